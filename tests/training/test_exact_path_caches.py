"""The exact path's caches give the bits of the computations they replace (oracle comparisons):
the validation rows' kernel values kept per gamma, and fun's pass at beta = 0 scaled along C."""

import numpy as np
import pytest

import streamrank
from streamrank._native import pairkernels as pk
from streamrank.cache.kernel_cache import KernelCache, read_rows
from streamrank.features.normalize import Normalizer
from streamrank.objectives.kernel_objective import KernelObjective, ZeroPoint
from streamrank.training import exact as ex
from streamrank.training.problem import MappedValidation
from streamrank.training import memory_plan as memplan
from streamrank.training.exact import train_exact

GAMMA = 0.05


def _objective(ds, C, zero=None, cost=None):
    Xn, y, qp = read_rows(ds, Normalizer("none"), (0, ds.n_queries), 1 << 20)
    levels = np.unique(y)
    kc = KernelCache(Xn, qp, kernel="rbf", gamma=GAMMA, key_material={"dataset": ds.fingerprint},
                     block_bytes=1 << 16, memory_bytes=1 << 30, cache_dir=None)
    kc.build()
    cost = cost or pk.pair_cost(np.ones((len(levels),) * 2))
    return kc, lambda c: KernelObjective(kc, np.searchsorted(levels, y), C=c, cost=cost, mu=np.ones(len(qp) - 1),
                                         zero=zero)


@pytest.mark.parametrize("C0, C", [(0.25, 4.0), (2.0, 0.125), (0.25, 0.25)])
def test_zero_point_scaled_along_c_gives_the_pass_bits(small, C0, C):
    with streamrank.open_dataset(small / "train.h5") as ds:
        zero = ZeroPoint()
        kc, make = _objective(ds, C0, zero)
        b0 = np.zeros(kc.l)
        first = make(C0)
        first.fun(b0)
        passes = kc.passes
        cached, fresh = make(C), make(C)
        cached._zero, fresh._zero = zero, None
        f1, g1 = cached.fun(b0), cached.grad(b0)
        assert kc.passes == passes  # no pass: scaled from C0's
        f2, g2 = fresh.fun(b0), fresh.grad(b0)
        assert kc.passes == passes + 1
        assert f1 == f2 and np.array_equal(g1, g2)
        assert np.array_equal(cached.kernel_metric(), fresh.kernel_metric())
        assert all(np.array_equal(a, b) for a, b in zip(cached._states, fresh._states))
        v = np.random.default_rng(1).standard_normal(kc.l)
        assert np.array_equal(cached.hessp(v), fresh.hessp(v))


def test_zero_point_makes_the_pass_for_a_ratio_that_is_not_a_power_of_two(small):
    with streamrank.open_dataset(small / "train.h5") as ds:
        zero = ZeroPoint()
        kc, make = _objective(ds, 1.0, zero)
        b0 = np.zeros(kc.l)
        make(1.0).fun(b0)
        passes = kc.passes
        obj = make(3.0)
        obj.fun(b0)
        assert kc.passes == passes + 1
        assert zero.at(3.0) is None and zero.at(0.5) is not None


def _train(small, monkeypatch, keep_valid, **kw):
    if not keep_valid:
        monkeypatch.setattr(memplan, "exact_valid_bytes", lambda *a, **k: 0)
    with streamrank.open_dataset(small / "train.h5") as ds, streamrank.open_dataset(small / "valid.h5") as va:
        model, summary = train_exact(ds, valid=va, C=[0.25, 1.0, 4.0], gamma=[GAMMA, 4 * GAMMA], landmarks=50, **kw)
    monkeypatch.undo()
    return model, summary


def test_kept_validation_rows_and_zero_point_give_the_models_and_scores_of_the_old_path(small, monkeypatch):
    """Oracle: the path without either cache (validation recomputed, a pass at beta = 0 per point)."""
    monkeypatch.setattr(ex, "ZeroPoint", lambda: None)
    old_model, old = _train(small, monkeypatch, keep_valid=False)
    new_model, new = _train(small, monkeypatch, keep_valid=True)
    assert np.array_equal(old_model.w, new_model.w)
    for a, b in zip(old["candidates"], new["candidates"]):
        assert a["objective"] == b["objective"] and a["valid_meanndcg"] == b["valid_meanndcg"]
        assert [r[5] for r in a["trace"]] == [r[5] for r in b["trace"]]  # every iteration's score
        assert [r[3:5] for r in a["trace"]] == [r[3:5] for r in b["trace"]]
    # a pass at beta = 0 saved for every warm-started point (all but each gamma's first)
    assert new["passes"] == old["passes"] - (len(new["candidates"]) - 2)


def test_validation_rows_are_kept_only_when_q_still_fits_beside_them(small):
    with streamrank.open_dataset(small / "valid.h5") as va:
        l, d, res = 3000, 46, 200 * 10 ** 6
        need = 4 * va.n_rows * l
        assert memplan.exact_valid_bytes(l, d, 2 * 10 ** 9, va, resident=res) == need
        assert memplan.exact_valid_bytes(l, d, 2 * 10 ** 9, None, resident=res) == 0

        def q_fits(b, extra=0):
            return memplan.exact_kernel_plan(l, d, b, resident=res, extra=extra)[1] >= 4 * l * l
        b = next(m * 10 ** 6 for m in range(300, 2000, 2) if q_fits(m * 10 ** 6))  # Q fits only without them
        assert not q_fits(b, need)
        assert memplan.exact_valid_bytes(l, d, b, va, resident=res) == 0
        big = next(m * 10 ** 6 for m in range(300, 2000, 2) if q_fits(m * 10 ** 6, need))
        assert memplan.exact_valid_bytes(l, d, big, va, resident=res) == need


def test_the_caches_give_the_old_paths_bits_on_letor_text_with_paper_001s_costs(mq2008, tmp_path, monkeypatch):
    """The same oracle on the user's ground: MQ2008's own text (LETOR 4.0, gzip) converted, its
    vali rows scored, the cost-sensitive configuration of the default search (graded pair costs,
    log-ratio query weights) on a 30-query training subset, C along powers of two."""
    from streamrank.io.convert import convert
    for name in ("train", "vali"):
        convert([mq2008 / "Fold1" / f"{name}.txt.gz"], tmp_path / f"{name}.h5", quiet=True)

    mapped = []

    def run(keep_valid, zero):
        monkeypatch.setattr(ex, "ZeroPoint", ZeroPoint if zero else (lambda: None))
        monkeypatch.setattr(ex, "MappedValidation", lambda *a, **k: mapped.append(1) or MappedValidation(*a, **k))
        if not keep_valid:
            monkeypatch.setattr(memplan, "exact_valid_bytes", lambda *a, **k: 0)
        with streamrank.open_dataset(tmp_path / "train.h5") as ds, streamrank.open_dataset(tmp_path / "vali.h5") as va:
            out = train_exact(ds, valid=va, C=[2.0 ** -4, 2.0 ** -2, 1.0], gamma=[2.0 ** -9, 2.0 ** -5],
                              queries=(0, 30), pair_cost="graded", query_weight="log_ratio", landmarks=50)
        monkeypatch.undo()
        return out
    (old_model, old), (new_model, new) = run(False, False), run(True, True)
    assert np.array_equal(old_model.w, new_model.w)
    for a, b in zip(old["candidates"], new["candidates"], strict=True):
        assert a["objective"] == b["objective"] and a["valid_meanndcg"] == b["valid_meanndcg"]
        assert [r[3:6] for r in a["trace"]] == [r[3:6] for r in b["trace"]]
    assert new["passes"] < old["passes"]
    assert len(mapped) == 2  # the kept route ran: the vali rows mapped once per gamma, in the second run only
