"""The one training path (training.path.run_path) on function objects: warm starts along C, a
fresh start per gamma, the best point by validation, and a killed-then-resumed path that ends
with the uninterrupted path's solutions, bit for bit."""

import numpy as np
import pytest

from function_objects import SquaredHinge, hinge_problem
from streamrank.solvers.tron import tron
from streamrank.training.path import Method, run_path


class _Passes:
    passes = 0


class Hinge(Method):
    """gamma index gi scales the rows (a stand-in for a feature map); the validation score peaks
    at C = 1 on gamma 1."""

    def __init__(self, X):
        self.X, self.starts, self.opened, self.closed = X, [], [], 0

    def open(self, gi):
        self.opened.append(gi)
        return _Passes()

    def close(self, resource):
        self.closed += 1

    def start(self, gi):
        return np.zeros(self.X.shape[1])

    def prepare(self, resource, gi, C, w):
        self.starts.append((gi, C, w.copy()))
        resource.passes += 1
        return SquaredHinge(self.X * (1.0 + gi), C), tron, {}

    def gamma(self, gi):
        return [0.5, 1.0][gi]

    def score(self, w, gi):
        return -abs(np.log(np.linalg.norm(w))) + gi  # any deterministic function of w and gi


POINTS = [(gi, C) for gi in (0, 1) for C in (0.1, 1.0, 10.0)]


def test_warm_starts_along_C_and_a_fresh_start_per_gamma():
    m = Hinge(hinge_problem(seed=20))
    r = run_path(m, POINTS, tol=1e-8, max_iter=200, select_metric="score")
    assert len(r.candidates) == 6 and m.opened == [0, 1] and m.closed == 2
    for k, (gi, C, w) in enumerate(m.starts):
        if k in (0, 3):
            assert not np.any(w)                         # first C of each gamma: from 0
        else:
            assert np.array_equal(w, r.path_w[k - 1])    # the previous point's solution
    scores = [c["valid_score"] for c in r.candidates]
    assert r.best == int(np.argmax(scores)) and r.candidates[r.best]["gamma"] == m.gamma(POINTS[r.best][0])
    assert r.passes == 6 and [c["passes"] for c in r.candidates] == [1, 2, 3, 4, 5, 6]


def test_without_validation_the_last_point_is_chosen():
    r = run_path(Hinge(hinge_problem(seed=21)), POINTS[:2], tol=1e-6, max_iter=100)
    assert r.best == 1 and "valid_score" not in r.candidates[0]


@pytest.mark.parametrize("stop_after", [2, 9])
def test_a_resumed_path_ends_with_the_uninterrupted_solutions(tmp_path, stop_after):
    """Kill the path after ``stop_after`` checkpoints (an exception from the solver's callback,
    as a crash would), then resume from the checkpoint directory."""
    X = hinge_problem(seed=22)
    kw = dict(tol=1e-10, max_iter=200, select_metric="score", settings={"test": 1},
              fingerprint="f" * 64)
    full = run_path(Hinge(X), POINTS, **kw)

    class Killed(Exception):
        pass

    class Dying(Hinge):
        calls = 0

        def prepare(self, resource, gi, C, w):
            obj, solve, extra = super().prepare(resource, gi, C, w)

            def dying_solve(obj, w, callback=None, **k):
                def cb(st):
                    callback(st)
                    Dying.calls += 1
                    if Dying.calls == stop_after:
                        raise Killed()
                return solve(obj, w, callback=cb, **k)
            return obj, dying_solve, extra

    ck = tmp_path / "ck"
    with pytest.raises(Killed):
        run_path(Dying(X), POINTS, checkpoint=ck, **kw)
    again = Hinge(X)
    resumed = run_path(again, POINTS, checkpoint=ck, resume=True, **kw)
    # it continued: from the saved solver state (not from 0), without solving finished points again
    assert np.any(again.starts[0][2])
    assert len(again.starts) == len(POINTS) - [c for c, (gi, C) in enumerate(POINTS)
                                               if any(s[:2] == (gi, C) for s in again.starts)][0]
    assert len(resumed.path_w) == len(full.path_w)
    for a, b in zip(resumed.path_w, full.path_w):
        assert np.array_equal(a, b)
    assert resumed.best == full.best
    assert [c["objective"] for c in resumed.candidates] == [c["objective"] for c in full.candidates]


@pytest.mark.parametrize("stop_after", [None, 3, 30])
def test_two_stage_path_and_its_resume(tmp_path, stop_after):
    """Paper 001's two-stage C: the decades, then 0.6, 0.8, 1.2, 1.4 x the best of them, the best
    chosen among all nine; killed in either stage and resumed, the same candidates and solutions."""
    from streamrank.training.path import TWO_STAGE_DECADES, two_stage_refine
    X = hinge_problem(seed=23)
    first = [(1, C) for C in TWO_STAGE_DECADES]
    kw = dict(tol=1e-10, max_iter=200, select_metric="score", settings={"test": 2}, fingerprint="e" * 64,
              refine=two_stage_refine)
    full = run_path(Hinge(X), first, **kw)
    Cs = [c["C"] for c in full.candidates]
    best1 = int(np.argmax([c["valid_score"] for c in full.candidates[:5]]))
    assert Cs[:5] == list(TWO_STAGE_DECADES)
    assert Cs[5:] == [f * TWO_STAGE_DECADES[best1] for f in (0.6, 0.8, 1.2, 1.4)]
    assert full.best == int(np.argmax([c["valid_score"] for c in full.candidates]))
    if stop_after is None:
        return

    class Killed(Exception):
        pass

    calls = [0]

    class Dying(Hinge):
        def prepare(self, resource, gi, C, w):
            obj, solve, extra = super().prepare(resource, gi, C, w)

            def dying_solve(obj, w, callback=None, **k):
                def cb(st):
                    callback(st)
                    calls[0] += 1
                    if calls[0] == stop_after:
                        raise Killed()
                return solve(obj, w, callback=cb, **k)
            return obj, dying_solve, extra

    ck = tmp_path / "ck"
    dying = Dying(X)
    with pytest.raises(Killed):
        run_path(dying, first, checkpoint=ck, **kw)
    assert (len(dying.starts) > 5) == (stop_after == 30)  # killed in the second stage, or in the first
    resumed = run_path(Hinge(X), first, checkpoint=ck, resume=True, **kw)
    assert [c["C"] for c in resumed.candidates] == Cs and resumed.best == full.best
    for a, b in zip(resumed.path_w, full.path_w):
        assert np.array_equal(a, b)
