"""The warm-started C path: what --tol promises on it, the choice it makes, and the grid edge.

Issue 10: with the stopping rule ||g|| <= eps ||g(0)|| alone, ||g(0)|| = C ||dloss(0)|| grows with
C, so the previous C's solution met the rule before any step and every later candidate kept the
first C's model. The rule is now ||g|| <= eps min(||g(0)||, ||g(w0)||) (streamrank.solvers.tron).
"""

import json

import numpy as np
import pytest

import streamrank
from streamrank.cli import main
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.params import EXACT_GAP_TOL

PATH = [2.0 ** k for k in range(-8, 9, 2)]  # 9 values, 2^-8 .. 2^8


def ranking_data(n_queries, seed, d=60, noise=1.5):
    """Raw features of very different scales (10^-2 .. 10^3), six of them relevant, labels 0-2.
    With 8 training queries (~200 rows, 60 features) small C underfits and large C overfits the
    noise features: the validation optimum is inside 2^-8 .. 2^8 (at C = 4 without normalisation)."""
    rng = np.random.default_rng(1000)  # one relevance model for every part
    scales = 10.0 ** rng.uniform(-2, 3, d)
    w = np.zeros(d)
    w[:6] = rng.standard_normal(6)
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 40, n_queries)
    Z = rng.standard_normal((sizes.sum(), d))
    s = Z @ w + noise * rng.standard_normal(len(Z))
    y = np.digitize(s, np.quantile(s, [0.6, 0.9])).astype(np.float32)
    return (Z * scales).astype(np.float32), y, np.repeat(np.arange(n_queries), sizes)


@pytest.fixture(scope="module")
def data():
    return ranking_data(8, 1), ranking_data(200, 2)


def _gap(f, fstar):
    return (f - fstar) / fstar


def test_every_candidate_of_the_path_is_solved_to_the_tolerance(data):
    (X, y, q), valid = data
    path = streamrank.RankSVM(C=PATH).fit(X, y, q, valid=valid)
    cands = path.training_["candidates"]
    assert [c["C"] for c in cands] == PATH
    cold_scores = []
    for c in cands:
        assert c["iterations"] >= 1, f"C={c['C']} stopped at its warm start"
        opt = streamrank.RankSVM(C=c["C"], tol=1e-10).fit(X, y, q).objective_
        cold = streamrank.RankSVM(C=c["C"]).fit(X, y, q, valid=valid)
        gap, cold_gap = _gap(c["objective"], opt), _gap(cold.objective_, opt)
        assert gap <= max(10 * cold_gap, 1e-7), (c["C"], gap, cold_gap)
        cold_scores.append(cold.training_["candidates"][0]["valid_meanndcg"])
    # the models differ from one C to the next, and so do their validation scores
    scores = [c["valid_meanndcg"] for c in cands]
    assert len(set(scores)) == len(scores)
    # the path chooses what cold starts choose, inside the grid
    assert path.C_ == PATH[int(np.argmax(cold_scores))] == 4.0
    assert path.training_["at_grid_edge"] is False and path.training_["grid_edge"] == []


def test_a_choice_at_the_edge_of_the_grid_is_reported(data, caplog):
    (X, y, q), valid = data
    with caplog.at_level("WARNING", logger="streamrank"):
        est = streamrank.RankSVM(C=PATH[:4]).fit(X, y, q, valid=valid)  # 2^-8 .. 2^-2: optimum beyond
    assert est.C_ == PATH[3]
    assert est.training_["at_grid_edge"] is True and est.training_["grid_edge"] == ["C largest"]
    assert "largest value of its grid" in caplog.text
    one = streamrank.RankSVM(C=1.0).fit(X, y, q)  # one value: no grid, no edge
    assert one.training_["at_grid_edge"] is False


def test_cli_json_says_at_grid_edge(data, tmp_path, capsys):
    (X, y, q), (Xv, yv, qv) = data
    for name, (A, b, c) in (("t.h5", (X, y, q)), ("v.h5", (Xv, yv, qv))):
        with DatasetWriter(tmp_path / name, n_features=A.shape[1]) as w:
            w.append(A, b, c)
    assert main(["train", str(tmp_path / "t.h5"), "--valid", str(tmp_path / "v.h5"), "--C", "64,256",
                 "-o", str(tmp_path / "m.h5"), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["C"] == 64.0 and out["at_grid_edge"] is True and out["grid_edge"] == ["C smallest"]


@pytest.mark.parametrize("method", ["nystroem", "exact"])
def test_kernel_paths_move_at_every_candidate(data, method):
    (X, y, q), valid = data
    X, y, q = X[:150], y[:150], q[:150]
    Cs = [2.0 ** -4, 2.0 ** 0, 2.0 ** 4]
    kw = dict(method=method, kernel="rbf", gamma=0.02, normalize="zscore")
    if method == "nystroem":
        kw["n_components"] = 60
    path = streamrank.RankSVM(C=Cs, **kw).fit(X, y, q, valid=valid)
    for c in path.training_["candidates"]:
        assert c["iterations"] >= 1
        opt = streamrank.RankSVM(C=c["C"], tol=1e-10, gap_tol="off", **kw).fit(X, y, q).objective_
        cold = streamrank.RankSVM(C=c["C"], **kw).fit(X, y, q).objective_
        # exact stops on its estimated gap (EXACT_GAP_TOL): warm or cold, the true gap is within it
        target = EXACT_GAP_TOL if method == "exact" else 1e-7
        assert _gap(c["objective"], opt) <= max(10 * _gap(cold, opt), target)
        assert method != "exact" or _gap(cold, opt) <= EXACT_GAP_TOL
