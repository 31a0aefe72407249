"""Inputs the property-based tests (tests/properties) found breaking a run, kept as plain tests:
each ends as a guarantee says (a finite model, or exit 2 with one line naming the cause)."""

import numpy as np
import pytest

import streamrank
from streamrank.cli.main import main
from streamrank.errors import ParameterError


def test_query_minmax_with_empty_queries_normalises_the_others_as_without_them():
    from streamrank.features.normalize import Normalizer
    rng = np.random.default_rng(0)
    X = rng.standard_normal((7, 3)).astype(np.float32)
    n = Normalizer("query_minmax")
    with_empty = n.transform(X, np.array([0, 0, 3, 3, 7, 7]))
    without = n.transform(X, np.array([0, 3, 7]))
    assert np.array_equal(with_empty, without)
    assert with_empty.min() == 0 and with_empty.max() == 1


def test_rows_of_very_different_scales_train_a_finite_model():
    """1e30 beside 1e-20 in one row: float64 rounds the preconditioner's identity away and its
    Cholesky failed (LinAlgError); the shifted M of linear_precond preconditions as well."""
    X = np.array([[1.89e29, -5.2e-20, -4.1e22], [-2.44e30, 1.8e-19, 1.14e23]], np.float32)
    y = np.array([0.0, 2.0])
    m = streamrank.RankSVM().fit(X, y, qid=[1, 1])
    assert np.isfinite(m.coef_).all() and m.objective_ <= 1.0  # f(0) = C * one pair
    assert m.predict(X)[1] > m.predict(X)[0]


def test_a_partition_size_beyond_int64_is_refused_by_name(tmp_path, capsys):
    from streamrank.execution.partitions import check_partition_rows
    with pytest.raises(ParameterError, match="partition_rows must be an integer in"):
        check_partition_rows(2**63)
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:1\n0 qid:1 1:2\n")
    assert main(["train", str(src), "-o", str(tmp_path / "m.h5"), "--cache-dir", str(tmp_path / "c"),
                 "--partition-rows", str(2**63)]) == 2
    assert "--partition-rows must be an integer in [1, " in capsys.readouterr().err


def test_convert_refuses_a_width_whose_rows_do_not_fit_before_allocating(tmp_path, capsys):
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:1\n0 qid:1 1:2\n")
    out = tmp_path / "c.h5"
    assert main(["convert", str(src), "-o", str(out), "--n-features", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert "1,000,000,000 features each" in err and "--n-features" in err
    assert not out.exists()


@pytest.mark.parametrize("kw,message", [
    (dict(tol=""), "tol must be a finite number > 0; got ''"),
    (dict(max_iter=2.5), "max_iter must be an integer in"),
    (dict(method="rff", n_components=10**9), "memory_budget 2.0 GB is too small for this run"),
])
def test_the_estimator_takes_settings_through_the_table_and_the_plan(kw, message):
    """A setting that is not a number of its range (tol="" raised a plain ValueError) or a map
    that cannot fit (10^9 Fourier components ran for minutes) is refused before any pass."""
    with pytest.raises(ParameterError, match=message):
        streamrank.RankSVM(**kw).fit(np.eye(4, dtype=np.float32), np.arange(4.0), qid=np.zeros(4))


def test_labels_whose_gain_overflows_are_refused_by_evaluation():
    from streamrank.errors import InputError
    from streamrank.evaluation.metrics import evaluate
    with pytest.raises(InputError, match="label of row 1 is 1e\\+20: its gain 2\\^y - 1 overflows"):
        evaluate([0.0, 1e20], [0.5, 0.2], [0, 2])
    evaluate([0.0, 1000.0], [0.5, 0.2], [0, 2])  # the largest label evaluated stays finite


def test_clsr_lambda_through_the_table():
    from streamrank.training.clsr import _lambda_path
    for bad in ("abc", float("inf"), 0.0, [1e-3, float("nan")]):
        with pytest.raises(ParameterError, match="lambda must be a finite number > 0"):
            _lambda_path(bad)
    assert _lambda_path([0.1, "0.01"]) == [0.01, 0.1]


def test_pairwise_counts_of_no_rows_are_zero():
    from streamrank.evaluation.metrics import _pairwise_by_query
    n, c = _pairwise_by_query(np.zeros(0), np.zeros(0), np.array([0, 0]))
    assert n.tolist() == [0] and c.tolist() == [0.0]


@pytest.mark.parametrize("method", ["exact", "nystroem", "clsr"])
def test_a_poly_kernel_that_overflows_is_named(tmp_path, capsys, method):
    """(gamma x.y + coef0)^degree beyond float64 (coef0 = 1e200), or beyond the float32 the exact
    path stores Q in (coef0 = 1e38): exit 2 naming the kernel's settings, where the exact path's
    cache key hit JSON's refusal of inf and Nystroem's eigh did not converge, each with a traceback."""
    src = tmp_path / "s.txt"
    src.write_text("".join(f"{k % 3} qid:{k // 4} 1:{k * 0.1:.2f} 2:{(k * 7) % 5}\n" for k in range(16)))
    argv = ["train", str(src), "-o", str(tmp_path / "m.h5"), "--cache-dir", str(tmp_path / "c"),
            "--method", method, "--kernel", "poly", "--coef0", "1e38" if method == "exact" else "1e200"]
    if method == "nystroem":
        argv += ["--components", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the poly kernel (gamma x.y + coef0)^degree" in err and "Traceback" not in err
    assert ("beyond float32's range" if method == "exact" else "is not finite") in err
    assert not (tmp_path / "m.h5").exists()


def test_an_ndcg_cut_beyond_int32_is_refused_by_name():
    from streamrank.selection.gas import parse_importance
    with pytest.raises(ParameterError, match="importance must be map, ndcg@K"):
        parse_importance("ndcg@9223372036854775808")
    assert parse_importance("ndcg@10") == ("ndcg", 10)


def test_a_similarity_file_is_never_written_over_an_input(tmp_path):
    from streamrank.errors import InputError
    from streamrank.io.atomic import reading
    from streamrank.selection.gas import StoredSimilarity
    victim = tmp_path / "input.h5"
    victim.write_bytes(b"not to be destroyed")
    with reading((victim, "DATA")), pytest.raises(InputError, match="input"):
        StoredSimilarity(victim, d=3)
    assert victim.read_bytes() == b"not to be destroyed"


def test_a_cache_write_that_takes_no_bytes_is_an_error_not_a_spin():
    from streamrank.cache.feature_cache import _write_all

    class Stuck:
        name = "block.bin"

        def write(self, mv):
            return 0
    with pytest.raises(OSError, match="took no bytes"):
        _write_all(Stuck(), b"abc")


@pytest.mark.parametrize("kw", [dict(degree="abc", kernel="poly"), dict(coef0="x"), dict(n_components="abc"),
                                dict(random_state=-3)])
def test_clsr_takes_its_kernel_settings_through_the_table(kw):
    with pytest.raises(ParameterError):
        streamrank.CLSRRank(**kw).fit(np.eye(6, dtype=np.float32), np.arange(6.0) % 3, qid=np.zeros(6))


def test_gas_ndcg_refuses_labels_whose_gain_overflows(tmp_path, capsys):
    src = tmp_path / "s.txt"
    src.write_text("2000 qid:1 1:0.3\n2000 qid:1 1:0.5\n1 qid:1 1:0.2\n")
    out = tmp_path / "g.h5"
    assert main(["select-features", str(src), "-o", str(out), "--cache-dir", str(tmp_path / "c"),
                 "--importance", "ndcg@3"]) == 2
    assert "its gain 2^y - 1 overflows" in capsys.readouterr().err and not out.exists()
    assert main(["select-features", str(src), "-o", str(out), "--cache-dir", str(tmp_path / "c"),
                 "--importance", "map"]) == 0


def test_pairwise_counts_with_an_empty_query_between_others():
    from streamrank.evaluation.metrics import _pairwise_by_query
    n, c = _pairwise_by_query(np.array([0.0, 1.0, 0.0]), np.array([0.1, 0.2, 0.3]), np.array([0, 1, 1, 3]))
    assert n.tolist() == [0, 0, 1] and c.tolist() == [0.0, 0.0, 0.0]


def test_a_gamma_out_of_range_is_refused_even_where_the_method_does_not_use_it():
    with pytest.raises(ParameterError, match="gamma must be a finite number > 0"):
        streamrank.RankSVM(gamma=0.0).fit(np.eye(4, dtype=np.float32), np.arange(4.0), qid=np.zeros(4))


def test_exact_with_a_c_that_swamps_the_identity_ends_with_its_cause(tmp_path, capsys):
    src = tmp_path / "s.txt"
    src.write_text("".join(f"{k % 3} qid:{k // 6} 1:{(k * 0.37) % 1:.3f} 2:{(k * 0.61) % 1:.3f}\n" for k in range(36)))
    assert main(["train", str(src), "-o", str(tmp_path / "m.h5"), "--cache-dir", str(tmp_path / "c"),
                 "--method", "exact", "--C", "3.4e38", "--quiet"]) in (0, 2)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1


def test_pairwise_counts_with_an_empty_query_last():
    from streamrank.evaluation.metrics import _pairwise_by_query
    n, c = _pairwise_by_query(np.array([0.0]), np.array([0.1]), np.array([0, 1, 1]))
    assert n.tolist() == [0, 0] and c.tolist() == [0.0, 0.0]


def test_pairwise_counts_of_several_rows_before_an_empty_last_query():
    """Found by the 3000-example run: select-features --importance pairwise on a file whose last
    query is empty (query_ptr [0, 3, 7, 9, 9]) ended in a broadcast error: the inversion counts
    had one entry per query up to the last row's, not per query."""
    from streamrank.evaluation.metrics import _pairwise_by_query, pairwise_accuracy_counts
    y = np.array([-1, -1, -1, -2, 1, -3, -2, -2, 0], float)
    s = np.array([0.3, 0.1, 0.2, 0.5, 0.4, 0.9, 0.8, 0.1, 0.2])
    ptr = np.array([0, 3, 7, 9, 9])
    n, c = _pairwise_by_query(y, s, ptr)
    want = [pairwise_accuracy_counts(y[a:b], s[a:b]) if b > a else (0, 0.0) for a, b in zip(ptr[:-1], ptr[1:])]
    assert n.tolist() == [w[0] for w in want] and c.tolist() == [w[1] for w in want]
    assert len(n) == 4


def test_an_interrupt_raised_inside_a_weakref_callback_prints_no_traceback(capsys):
    """The handler can run inside a weakref callback or __del__, where Python prints the exception
    as 'Exception ignored' with its traceback (CI, under load); the watcher sends the signal again,
    so the command's one line follows and the ignored one is said by no one."""
    import signal
    import types

    from streamrank.cli.signals import Handlers, Interrupted
    seen = []
    before = sys_hook = __import__("sys").unraisablehook
    import sys
    sys.unraisablehook = lambda u: seen.append(u)
    h = Handlers()
    try:
        h.install()
        sys.unraisablehook(types.SimpleNamespace(exc_value=Interrupted(signal.SIGTERM)))
        other = types.SimpleNamespace(exc_value=ValueError("x"))
        sys.unraisablehook(other)
    finally:
        h.restore()
        assert sys.unraisablehook is not h._unraisable
        sys.unraisablehook = before
    assert seen == [other] and sys_hook is before


def test_unused_kernel_settings_and_gas_commit_seconds_through_the_table(tmp_path, capsys):
    with pytest.raises(ParameterError, match="degree must be an integer"):
        streamrank.RankSVM(degree=float("inf")).fit(np.eye(4, dtype=np.float32), np.arange(4.0), qid=np.zeros(4))
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:0.3 2:1\n0 qid:1 1:0.5 2:0\n2 qid:1 1:0.2 2:3\n")
    assert main(["select-features", str(src), "-o", str(tmp_path / "g.h5"), "--cache-dir", str(tmp_path / "c"),
                 "--commit-every", "1e400"]) == 2
    assert "commit_seconds must be a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("budget", ["889", "2GB"])
def test_a_map_larger_than_any_budget_is_refused_before_it_is_drawn(tmp_path, capsys, budget):
    """Found by the 3000-example run: --components 1000000000 with --memory-budget 889 (bytes,
    below the process itself) was warned about and run, and drew a 149 GiB matrix (a MemoryError
    traceback; 51 s before). The run's own arrays larger than the budget and the whole process are
    refused before any work, whatever the budget, with the budget that would hold them."""
    from streamrank.synthetic import write_hdf5
    write_hdf5(tmp_path / "t.h5", "small", scale=0.2, seed=0)
    assert main(["train", str(tmp_path / "t.h5"), "-o", str(tmp_path / "m.h5"), "--method", "rff",
                 "--cache-dir", str(tmp_path / "c"), "--components", "1000000000", "--memory-budget", budget]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("streamrank train: error: memory_budget")
    assert "1,000,000,000 components" in err and "or fewer components" in err
    assert not (tmp_path / "m.h5").exists()


@pytest.mark.parametrize("name, value", [("tol", "abc"), ("max_iter", "many"), ("tol", -1), ("max_iter", 0.5)])
def test_exact_refuses_a_setting_out_of_its_range_before_reading_it_as_a_number(name, value):
    """Found by the second 3000-example run: RankSVM(method="exact", tol="abc").fit raised
    ValueError from float(tol), not the table's ParameterError."""
    X = np.random.default_rng(0).random((12, 3)).astype(np.float32)
    y, qid = np.arange(12.0) % 3, np.repeat([1, 2, 3], 4)
    with pytest.raises(ParameterError, match=rf"{name} must be"):
        streamrank.RankSVM(method="exact", **{name: value}).fit(X, y, qid=qid)


@pytest.mark.parametrize("grid, chosen", [([5e-324, 1.0, 1e9], 5e-324), ([2.2250738585072014e-308, 1.0], 2.2250738585072014e-308),
                                          ([1.0, 1e308], 1e308), ([2.0 ** -5, 2.0 ** -3], 2.0 ** -5)])
def test_the_grid_edge_advice_at_the_ends_of_float64(grid, chosen, caplog):
    """Found by the third 3000-example run: grid --C 10481,5e-324,1e9 and cv --C 2.2e-308,...
    ended in 'math domain error' (the extension below 5e-324 rounds to 0, log(0)). The warning is
    said, with an extension only where one exists in float64."""
    from streamrank.training.path import report_grid_edges
    with caplog.at_level("WARNING"):
        s = report_grid_edges({"C": chosen, "gamma": None}, grid, [None])
    assert s["at_grid_edge"] and "extend the grid" in caplog.text
    if chosen == 2.0 ** -5:
        assert "e.g. use C=2^-9:2^-5:2" in caplog.text
    elif chosen == 5e-324:
        assert "e.g. use" not in caplog.text


def test_exact_refuses_a_gamma_that_is_not_a_number():
    """The third 3000-example run: RankSVM(method='exact', gamma='abc').fit raised ValueError."""
    X = np.random.default_rng(0).random((12, 3)).astype(np.float32)
    with pytest.raises(ParameterError, match="gamma must be"):
        streamrank.RankSVM(method="exact", gamma="abc").fit(X, np.arange(12.0) % 3, qid=np.repeat([1, 2, 3], 4))


def test_a_poly_map_of_huge_offset_ends_with_a_float64_status_not_a_bare_stop():
    """coef0 = 1506733 makes the Nystroem features about 1e18: TRON's predicted reduction went to
    <= 0 by rounding and the run ended "no further progress possible" with nothing saying why, a
    status the property suite counts as neither converged nor capped. A positive definite model's
    decrease is positive in exact arithmetic: the status says it is below float64 resolution."""
    import re
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 3)).astype(np.float32)
    y = rng.integers(0, 3, 20).astype(np.float32)
    m = streamrank.RankSVM(method="nystroem", kernel="poly", coef0=1506733, n_components=4).fit(
        X, y, qid=np.repeat(np.arange(4), 5))
    accepted = re.compile(r"^(converged|reached max_iter|.*below float64 resolution|.*rounds to w in float64)")
    for c in m.training_["candidates"]:
        assert accepted.match(c["message"]), c["message"]
    assert np.isfinite(m.coef_).all()


def test_a_budget_beyond_the_machine_is_refused_at_the_plan(tmp_path, capsys):
    """--n-features 10^9 under a --memory-budget of 1 TB: the plan accepted 20-row chunks of 74.5
    GiB, numpy could not allocate them and the command ended in a MemoryError traceback (exit 1).
    A budget above the memory this process can have (the machine's, or its cgroup's limit) is
    refused where every plan reads it: one line naming the flag and the machine's memory, exit 2,
    nothing written."""
    from streamrank.units import budget_bytes, format_size, machine_memory
    have = machine_memory()
    src = tmp_path / "t.txt"
    src.write_text("".join(f"{k % 3} qid:{k // 5} 1:0.5 2:0.25 3:{k}\n" for k in range(20)))
    out = tmp_path / "d.h5"
    assert main(["convert", str(src), "-o", str(out), "--quiet", "--n-features", "2000000000",
                 "--memory-budget", "1000TB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "memory_budget 1000.0 TB is more than the" in err, err
    assert f"{format_size(have)} of memory this process can have here" in err and "Pass --memory-budget " in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    assert budget_bytes(have) == have  # the whole machine is a budget (the plan keeps inside it)
    with pytest.raises(ParameterError, match="memory_budget .* is more than"):
        streamrank.RankSVM(memory_budget=have + 1).fit(np.ones((2, 1)), np.array([0, 1]), qid=np.array([1, 1]))


def test_an_allocation_the_system_refuses_is_one_line(tmp_path, capsys, monkeypatch):
    """Inside a budget the machine has, other processes may still hold the memory: a MemoryError
    from any command is one line naming the budget and the machine's memory, exit 2."""
    import streamrank.io.convert as cv

    def refuse(*a, **k):
        raise MemoryError("Unable to allocate 74.5 GiB for an array with shape (20, 1000000000) and data type float32")
    monkeypatch.setattr(cv, "convert", refuse)
    src = tmp_path / "t.txt"
    src.write_text("0 qid:1 1:1\n")
    assert main(["convert", str(src), "-o", str(tmp_path / "d.h5"), "--memory-budget", "1GB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of memory: unable to allocate 74.5 GiB" in err
    assert "--memory-budget 1GB" in err and "Traceback" not in err


@pytest.mark.parametrize("labels", [[1.5, 1.5], [1.0, 2.0]])
def test_mapped_features_past_float32_are_refused_not_trained_on(labels):
    """Nystroem's poly features of values near 1e30 pass float32's range, where mapped rows are kept:
    inf, whose pair differences (inf - inf) the pair sums took as no loss. A fit ended exit 0 with
    a model that scores NaN (and numpy warned from the preconditioner). Refused, naming the row and
    the kernel's settings, without a warning."""
    import warnings

    from streamrank.errors import KernelRangeError
    X = np.array([[-6.814794529e28, -1.188889371e30]] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KernelRangeError, match=r"data row 1: its mapped feature \d+ of \d+ \(nystroem\) is inf, "
                                                   r"beyond float32's range .*poly kernel, gamma=0\.5, coef0=1, degree=2"):
            streamrank.RankSVM(method="nystroem", kernel="poly", degree=2, n_components=4).fit(
                X, np.array(labels), qid=np.array([7, 7]))
    # the same rows at a scale the map keeps: trained, finite scores
    m = streamrank.RankSVM(method="nystroem", kernel="poly", degree=2, n_components=4).fit(
        X * 1e-28, np.array(labels), qid=np.array([7, 7]))
    assert np.isfinite(m.predict(X * 1e-28)).all()


@pytest.mark.parametrize("name, value", [("C", None), ("max_iter", None), ("normalize", None), ("tol", None)])
def test_none_for_a_setting_that_has_a_value_is_refused_by_name(name, value):
    """RankSVM(C=None) in a Pipeline fitted as if C=1.0 was given (the settings' intake took None
    for "not given"); a search over a grid of refused values only then picked it. None is refused
    where the setting's default is a value; it still means the default for random_state (as in
    scikit-learn), pair_cost and query_weight."""
    from sklearn.pipeline import make_pipeline
    X, y, qid = np.eye(6, 3), np.array([0, 1, 2, 0, 1, 2.0]), np.repeat([1, 2], 3)
    with pytest.raises(ParameterError, match=rf"^{name} must be given \(None is not one of its values\); got None"):
        make_pipeline(streamrank.RankSVM(**{name: value})).fit(X, y, ranksvm__qid=qid)
    streamrank.RankSVM(random_state=None, pair_cost=None, query_weight=None).fit(X, y, qid=qid)
    streamrank.CLSRRank(n_components=None, lam=0.1).fit(X, y, qid)


def test_a_number_given_as_text_is_used_as_checked():
    """Found by the 3,000-example property run: RankSVM(method="nystroem", n_components="1") reached
    the memory plan as text (TypeError). The trainer computes with its checked value."""
    import numpy as np

    import streamrank
    rng = np.random.default_rng(0)
    X, y, qid = rng.random((20, 3)), rng.integers(0, 3, 20), np.repeat(np.arange(4), 5)
    text = streamrank.RankSVM(method="nystroem", n_components="1", random_state=0).fit(X, y, qid=qid)
    number = streamrank.RankSVM(method="nystroem", n_components=1, random_state=0).fit(X, y, qid=qid)
    assert text.model_.fmap.n_components == 1 and np.array_equal(text.coef_, number.coef_)
