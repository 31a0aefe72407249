"""The memory plan of every streamed method (issue 30, item 6): a budget the run cannot keep is
refused before any pass, with the smallest budget that works (and that budget works), and the
blocks it chooses under a small budget do not change the model.

The resident set is fixed (RESIDENT) so that the plan's arithmetic, not this process's libraries,
decides; a budget below RESIDENT + STREAM_SLACK holds nothing and is only warned about.
"""

import re

import numpy as np
import pytest

import streamrank
import streamrank.io.budget as io_budget
from streamrank.errors import ParameterError
from streamrank.synthetic import write_hdf5
from streamrank.training.linear import train_linear

RESIDENT = 100 * 10**6
MB = 10**6


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("membudget")
    for part in ("train", "valid"):
        write_hdf5(d / f"{part}.h5", "small", seed=0, part=part, scale=0.5)
    train, valid = streamrank.open_dataset(d / "train.h5"), streamrank.open_dataset(d / "valid.h5")
    yield train, valid
    train.close()
    valid.close()


@pytest.fixture
def fixed_resident(monkeypatch):
    monkeypatch.setattr(io_budget, "resident_bytes", lambda kernels=True: RESIDENT)


@pytest.fixture
def passes(monkeypatch):
    """Counts the streams opened over any dataset: a refusal must come before the first."""
    from streamrank.io.dataset import Dataset
    opened = []
    real = Dataset.stream

    def stream(self, **kw):
        opened.append(kw)
        return real(self, **kw)

    monkeypatch.setattr(Dataset, "stream", stream)
    return opened


def smallest(err):
    """The budget a refusal names, in MB."""
    m = re.search(r"memory_budget=(\d+)MB", str(err))
    assert m, f"the refusal does not name the budget that works: {err}"
    return int(m.group(1))


def blocks_logged(caplog):
    counts = [int(m.group(1)) for r in caplog.records for m in [re.search(r"every pass in (\d+) blocks", r.getMessage())]
              if m]
    return counts[-1] if counts else 0


MAPS = dict(C=0.5, tol=1e-6, gamma=0.05, components=400, seed=3, map_cache="recompute")


@pytest.mark.parametrize("method", ["nystroem", "rff"])
def test_a_kernel_map_refuses_a_budget_it_cannot_keep_before_any_pass(data, fixed_resident, passes, method):
    train, _ = data
    floor = RESIDENT + io_budget.STREAM_SLACK
    with pytest.raises(ParameterError, match="memory_budget") as e:
        train_linear(train, method=method, memory_budget=floor, **MAPS)
    assert passes == []  # before any work
    need = smallest(e.value)
    assert need * MB > floor
    with pytest.raises(ParameterError):  # the named budget is the smallest: 1 MB less is refused
        train_linear(train, method=method, memory_budget=f"{need - 1}MB", **MAPS)
    train_linear(train, method=method, memory_budget=f"{need}MB", **MAPS)


@pytest.mark.parametrize("method", ["nystroem", "rff"])
def test_the_blocks_of_the_smallest_budget_give_the_same_model(data, fixed_resident, caplog, method):
    train, valid = data
    with pytest.raises(ParameterError) as e:
        train_linear(train, method=method, memory_budget=RESIDENT + io_budget.STREAM_SLACK, **MAPS)
    need = smallest(e.value)
    caplog.set_level("INFO", logger="streamrank")
    small, _ = train_linear(train, method=method, memory_budget=f"{need}MB", **MAPS)
    assert blocks_logged(caplog) > 1  # the smallest budget streams in several blocks
    caplog.clear()
    big, _ = train_linear(train, method=method, memory_budget="2GB", **MAPS)
    assert blocks_logged(caplog) < 3
    assert np.array_equal(small.w, big.w)


def test_the_linear_method_refuses_below_its_blocks_and_state(data, fixed_resident, passes):
    train, _ = data
    floor = RESIDENT + io_budget.STREAM_SLACK
    with pytest.raises(ParameterError, match="memory_budget") as e:
        train_linear(train, C=0.5, memory_budget=floor)
    assert passes == []
    need = smallest(e.value)
    a, _ = train_linear(train, C=0.5, memory_budget=f"{need}MB")
    b, _ = train_linear(train, C=0.5, memory_budget="2GB")
    assert np.array_equal(a.w, b.w)


def test_a_budget_below_the_resident_set_is_warned_about_not_refused(data, fixed_resident, caplog):
    """Nothing can be kept below what the process holds before any work: the run says so, with the
    budget that works, and streams the smallest blocks (tests use such budgets)."""
    train, _ = data
    caplog.set_level("WARNING", logger="streamrank")
    model, _ = train_linear(train, method="nystroem", memory_budget="1MB", **MAPS)
    assert any(re.search(r"use memory_budget=\d+MB", r.getMessage()) for r in caplog.records)
    assert np.all(np.isfinite(model.w))


def test_gas_refuses_before_its_pass_and_its_blocks_do_not_change_the_result(data, fixed_resident, passes):
    from streamrank.selection.gas import gas_scores
    train, _ = data
    floor = RESIDENT + io_budget.STREAM_SLACK
    with pytest.raises(ParameterError, match="memory_budget") as e:
        gas_scores(train, importance="ndcg@10", memory_budget=floor)
    assert passes == []
    need = smallest(e.value)  # (on data this small, 1 MB less is below the floor: warned about)
    small = gas_scores(train, importance="ndcg@10", memory_budget=f"{need}MB")
    assert passes[-1]["block_bytes"] < train.n_rows * (4 * train.n_features + 4)  # several blocks
    big = gas_scores(train, importance="ndcg@10", memory_budget="2GB")
    assert np.array_equal(small.importance, big.importance)
    assert np.array_equal(small.similarity, big.similarity, equal_nan=True)


@pytest.mark.parametrize("method", ["primal", "nystroem"])
def test_predict_refuses_before_reading_and_its_blocks_do_not_change_the_scores(data, method, monkeypatch, passes):
    train, valid = data
    model, _ = train_linear(train, method=method, **{**MAPS, "map_cache": "auto"})
    monkeypatch.setattr(io_budget, "resident_bytes", lambda kernels=True: RESIDENT)
    # a model whose map needs tiles, and scores for every row: at the floor nothing is left for a block
    floor = RESIDENT + io_budget.STREAM_SLACK
    passes.clear()
    with pytest.raises(ParameterError, match="memory_budget") as e:
        model.predict_dataset(valid, memory_budget=floor)
    assert passes == []
    need = smallest(e.value)
    small = model.predict_dataset(valid, memory_budget=f"{need}MB")
    big = model.predict_dataset(valid, memory_budget="2GB")
    assert np.array_equal(small, big)


def test_clsr_plan_refuses_with_the_smallest_budget_and_its_blocks_do_not_change_the_model(data):
    from streamrank.features.basis_map import clsr_plan
    from streamrank.training.clsr import train_clsr
    train, _ = data
    qmax = int(np.diff(train.query_ptr).max())
    kw = dict(m=300, d=train.n_features, n_train=train.n_rows, largest_query=qmax)
    with pytest.raises(ParameterError, match="memory_budget") as e:
        clsr_plan(RESIDENT + io_budget.STREAM_SLACK, RESIDENT, **kw)
    need = smallest(e.value)
    with pytest.raises(ParameterError):
        clsr_plan((need - 1) * MB, RESIDENT, **kw)
    block = clsr_plan(need * MB, RESIDENT, **kw)
    assert qmax * (4 * train.n_features + 4) <= block < train.n_rows * (4 * train.n_features + 4)
    # the planned (small) blocks against one block for all rows: the same model, bit for bit
    a, _ = train_clsr(train, components=300, gamma=0.05, block_bytes=block)
    b, _ = train_clsr(train, components=300, gamma=0.05, block_bytes=10**9)
    assert np.array_equal(a.w, b.w)
