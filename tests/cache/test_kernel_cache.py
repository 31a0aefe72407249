"""KernelCache: Q = K(X, X) in query-aligned float32 row blocks, on disk and in memory."""

import json

import numpy as np
import pytest

from streamrank.errors import ParameterError
from streamrank.cache.feature_cache import MANIFEST, block_name
from streamrank.cache.kernel_cache import KernelCache
from streamrank.features.kernels import kernel_matrix


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(5)
    sizes = rng.integers(3, 30, size=25)
    qp = np.concatenate(([0], np.cumsum(sizes)))
    X = rng.random((qp[-1], 7))
    X[10] = X[11]  # duplicate rows: Q singular, as in LETOR data
    return X, qp


def make(rows, tmp_path=None, *, block_bytes=4000, memory_bytes=1 << 30, gamma=0.3, kernel="rbf", **kw):
    X, qp = rows
    kc = KernelCache(X, qp, kernel=kernel, gamma=gamma, key_material={"dataset": "test"}, block_bytes=block_bytes,
                     memory_bytes=memory_bytes, cache_dir=tmp_path, **kw)
    kc.build()
    return kc


def full(kc):
    return np.vstack([Qk.copy() for _, _, _, Qk in kc.blocks()])


@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "poly", "linear"])
def test_blocks_are_the_float32_kernel_matrix_whatever_the_layout(rows, kernel):
    X, qp = rows
    K = kernel_matrix(X, kernel=kernel, gamma=0.3)
    for bb in (1, 4000, 10 ** 9):  # one query per block, a few queries, everything in one block
        kc = make(rows, block_bytes=bb, kernel=kernel)
        assert np.array_equal(full(kc), (K - kc.shift).astype(np.float32))  # stored as float32(K - shift)
        # blocks hold whole queries
        assert all(a in qp and b in qp for a, b in kc.layout)
    assert kc.n_blocks == 1


def test_stored_blocks_are_reused_and_streamed_when_memory_is_short(rows, tmp_path):
    X, qp = rows
    first = make(rows, tmp_path)
    want = full(first)
    assert first.computed_blocks == first.n_blocks and first.complete
    first.close()
    again = make(rows, tmp_path, memory_bytes=3 * 4 * len(X) * 20)  # a few blocks in memory, the rest read
    assert again.computed_blocks == 0
    assert not again.all_in_memory and again.in_memory(0)
    for _ in range(2):  # read-ahead buffers reused across passes
        assert np.array_equal(full(again), want)
    assert again.stats.disk_reads > 0 and again.computed_blocks == 0
    # another gamma is another cache
    other = make(rows, tmp_path, gamma=0.5)
    assert other.dir != again.dir and other.computed_blocks == other.n_blocks


def test_memory_only_cache_recomputes_what_does_not_fit(rows):
    X, _ = rows
    kc = make(rows, memory_bytes=4 * len(X) * 40)
    want = (kernel_matrix(X, gamma=0.3) - kc.shift).astype(np.float32)
    assert not kc.all_in_memory
    assert np.array_equal(full(kc), want) and np.array_equal(full(kc), want)


def test_damaged_block_is_detected_and_recomputed(rows, tmp_path):
    X, _ = rows
    kc = make(rows, tmp_path, memory_bytes=0)
    want = full(kc)
    kc.close()
    path = kc.dir / block_name(2)
    raw = bytearray(path.read_bytes())
    raw[17] ^= 0xFF
    path.write_bytes(bytes(raw))
    back = make(rows, tmp_path, memory_bytes=0)
    assert np.array_equal(full(back), want)
    assert back.stats.damaged == 1 and back.computed_blocks == 1
    assert np.array_equal(full(back), want) and back.computed_blocks == 1  # stored again


def test_foreign_or_damaged_manifest_rebuilds(rows, tmp_path):
    kc = make(rows, tmp_path, memory_bytes=0)
    want = full(kc)
    kc.close()
    m = json.loads((kc.dir / MANIFEST).read_text())
    m["key_material"]["key_material"]["gamma"] = 9.0  # written for another kernel
    (kc.dir / MANIFEST).write_text(json.dumps(m))
    back = make(rows, tmp_path, memory_bytes=0)
    assert back.computed_blocks == back.n_blocks and np.array_equal(full(back), want)
    back.close()
    (kc.dir / MANIFEST).write_text("{ truncated")
    again = make(rows, tmp_path, memory_bytes=0)
    assert again.computed_blocks == again.n_blocks and np.array_equal(full(again), want)


def test_kernels_that_are_not_psd_are_refused(rows):
    with pytest.raises(ParameterError, match=r"kernel=sigmoid.*not positive semi-definite.*use kernel=rbf"):
        make(rows, kernel="sigmoid")
    with pytest.raises(ParameterError, match=r"coef0=-1.*use coef0=0"):
        make(rows, kernel="poly", coef0=-1.0)
    with pytest.raises(ParameterError, match="gamma must be > 0"):
        make(rows, gamma=-1.0)
