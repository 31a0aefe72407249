"""Rows computed in fixed tiles by absolute row index (streamrank.features.kernels, "Row independence"):
Q blocks and predictions are the same bits for any block layout, even with a BLAS whose rounding
depends on the call's shape (kernel_oracle.fake_blas)."""

import warnings

import numpy as np
import pytest

import kernel_oracle as oracle
import streamrank
from streamrank.features import kernels as kn
from streamrank.features.exact_map import ExactKernelMap
from streamrank.features.maps import Nystroem, RandomFourier
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.cache.kernel_cache import KernelCache
from streamrank.state.model import LinearModel
from streamrank.features.normalize import Normalizer


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(21)
    sizes = rng.integers(3, 40, size=75)
    qp = np.concatenate(([0], np.cumsum(sizes)))
    assert qp[-1] > 2 * kn.ROW_TILE  # blocks cross several tiles
    return rng.random((qp[-1], 7)), qp


@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
def test_kernel_cache_blocks_do_not_depend_on_the_layout(rows, monkeypatch, kernel):
    X, qp = rows
    oracle.fake_blas(monkeypatch)
    K = kn.kernel_matrix(X, kernel=kernel, gamma=0.3)
    for bb in (1, 20_000, 10 ** 9):  # one query per block, a few queries, everything in one block
        kc = KernelCache(X, qp, kernel=kernel, gamma=0.3, key_material={"dataset": "test"}, block_bytes=bb,
                         memory_bytes=1 << 30)
        kc.build()
        assert kc.n_blocks > 1 or bb == 10 ** 9
        got = np.vstack([Qk.copy() for _, _, _, Qk in kc.blocks()])
        assert np.array_equal(got, (K - kc.shift).astype(np.float32))  # stored as float32(K - shift)


def _dataset(path, X, qp):
    with DatasetWriter(path, n_features=X.shape[1]) as w:
        for q in range(len(qp) - 1):
            a, b = qp[q], qp[q + 1]
            w.append(X[a:b].astype(np.float32), np.zeros(b - a, np.float32), np.full(b - a, q, np.int64))
    return streamrank.open_dataset(path)


@pytest.mark.parametrize("make", [
    lambda X: Nystroem("rbf", gamma=0.3, n_components=90, seed=1).fit(X),
    lambda X: RandomFourier("laplacian", gamma=0.3, n_components=50, seed=2).fit(X),
    lambda X: ExactKernelMap(X[::9], "rbf", 0.3),
    lambda X: None,
], ids=["nystroem", "rff", "exact", "linear"])
def test_predictions_do_not_depend_on_the_memory_budget(rows, tmp_path, monkeypatch, make):
    X, qp = rows
    X = X.astype(np.float32).astype(np.float64)
    fmap = make(X)
    width = X.shape[1] if fmap is None else fmap.n_components_
    model = LinearModel(np.random.default_rng(3).standard_normal(width), Normalizer("none"),
                        n_features=X.shape[1], fmap=fmap)
    ds = _dataset(tmp_path / "d.h5", X, qp)
    try:
        oracle.fake_blas(monkeypatch)
        want = model.decision_function(X)  # all rows, in the stored order: rows 0..n-1
        for budget in ("2KB", "16KB", "1GB"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # queries above a tiny block budget
                got = model.predict_dataset(ds, memory_budget=budget)
            assert np.array_equal(got[ds.row], want)
    finally:
        ds.close()


def test_tile_bits_do_not_depend_on_the_thread_count():
    """OpenBLAS splits a product with K >= 400 or so differently with one thread (other bits):
    tiles run each product on one BLAS thread, side by side, so one thread, two, or a BLAS limit
    set around the call give the same bits (a dask worker has fewer threads than this process)."""
    import numba
    from streamrank._native.blas import one_thread
    X = np.random.default_rng(22).standard_normal((1200, 20))
    ny = Nystroem("rbf", gamma=0.05, n_components=450, seed=0).fit(X)
    ref = ny.transform(X, np.float64)
    with one_thread():
        limited = ny.transform(X, np.float64)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        single = ny.transform(X, np.float64)
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(limited, ref) and np.array_equal(single, ref)


def test_scratch_pool_hands_every_set_back_and_reuses_it(rows):
    """kernels.ScratchPool (the kernel matrix's build, block after block): a thread's scratch set
    goes back to the pool when its tiles are done, also when a tile raises, and later calls take
    the sets already made instead of making them afresh (32 MB each on generated mq2007)."""
    X, _ = rows
    made = []

    def make():
        made.append(np.empty((kn.ROW_TILE, 4)))
        return [made[-1]]

    pool = kn.ScratchPool(make)
    used = []
    for _ in range(3):
        kn.parallel_tiles(X, 0, kn.ROW_TILE, lambda At, s, e, p, bufs: used.append(id(bufs[0])), pool.take, pool.give)
    assert 1 <= len(made) <= kn.tile_threads()
    assert set(used) == {id(b) for b in made}

    def failing(At, s, e, p, bufs):
        raise RuntimeError("a tile failed")
    with pytest.raises(RuntimeError, match="a tile failed"):
        kn.parallel_tiles(X, 0, kn.ROW_TILE, failing, pool.take, pool.give)
    n = len(made)
    taken = [pool.take() for _ in range(n)]  # every set came back: taking them all makes none
    assert len(made) == n and {id(t[0]) for t in taken} == {id(b) for b in made}
