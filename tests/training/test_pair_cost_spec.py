"""Paper 001's label-pair costs given as text ('0-1:1,1-2:1.3,0-2:2'): the table they make, the
model they train (the same as the explicit table), and the messages for malformed specs (issue 13)."""

import numpy as np
import pytest

import streamrank
from streamrank.cli import main
from streamrank.errors import ParameterError
from streamrank.synthetic import write_hdf5
from streamrank.training.problem import pair_cost_table, parse_pair_costs


def test_a_spec_makes_the_symmetric_table_over_the_labels_present():
    assert parse_pair_costs("0-1:1, 1-2:1.3,2-0:2") == {(0.0, 1.0): 1.0, (1.0, 2.0): 1.3, (0.0, 2.0): 2.0}
    lam = pair_cost_table("0-1:1,1-2:1.3,0-2:2", [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(lam, [[1, 1, 2], [1, 1, 1.3], [2, 1.3, 1]])
    # unlisted pairs cost 1; pairs of labels the data does not have do not count
    np.testing.assert_array_equal(pair_cost_table("0-4:3,1-2:1.5", [0.0, 1.0, 2.0]), [[1, 1, 1], [1, 1, 1.5],
                                                                                      [1, 1.5, 1]])


@pytest.mark.parametrize("spec, why", [
    ("0-1=2", "is not a label pair and its cost"),
    ("0-1:0", "is not a label pair and its cost"),
    ("0-1:-1", "is not a label pair and its cost"),
    ("1-1:2", "is not a label pair and its cost"),
    ("0-1:x", "is not a label pair and its cost"),
    ("0-1:1,1-0:2", "are given twice"),
    ("0-1:inf", "is not a label pair and its cost"),
    ("gain", "must be one of none, graded, gain_difference, label pair costs"),
])
def test_a_malformed_spec_shows_the_expected_form(spec, why):
    with pytest.raises(ParameterError, match=why) as e:
        pair_cost_table(spec, [0.0, 1.0, 2.0])
    assert "'0-1:1,1-2:1.3,0-2:2'" in str(e.value)


def test_the_spec_trains_the_model_of_its_table_and_the_cli_takes_it(tmp_path, capsys):
    write_hdf5(tmp_path / "d.h5", "small", seed=0, part="train", scale=0.2)
    with streamrank.open_dataset(tmp_path / "d.h5") as ds:
        levels = np.unique(ds.y[:])
    spec = "0-1:1,1-2:1.3,0-2:2"
    a = streamrank.RankSVM(C=0.5, pair_cost=spec, query_weight="log_ratio").fit(tmp_path / "d.h5")
    b = streamrank.RankSVM(C=0.5, pair_cost=pair_cost_table(spec, levels), query_weight="log_ratio").fit(
        tmp_path / "d.h5")
    np.testing.assert_array_equal(a.model_.w, b.model_.w)
    assert not np.array_equal(a.model_.w, streamrank.RankSVM(C=0.5, query_weight="log_ratio").fit(
        tmp_path / "d.h5").model_.w)
    assert main(["train", str(tmp_path / "d.h5"), "-o", str(tmp_path / "m.h5"), "--C", "0.5", "--pair-cost", spec,
                 "--query-weight", "log_ratio", "--quiet"]) == 0
    np.testing.assert_array_equal(streamrank.load(tmp_path / "m.h5").model_.w, a.model_.w)
    assert main(["train", str(tmp_path / "d.h5"), "-o", str(tmp_path / "m2.h5"), "--pair-cost", "0-1=2"]) == 2
    err = capsys.readouterr().err
    assert "--pair-cost" in err and "'0-1:1,1-2:1.3,0-2:2'" in err and not (tmp_path / "m2.h5").exists()
