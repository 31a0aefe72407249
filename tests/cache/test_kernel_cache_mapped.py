"""Q's blocks on disk mapped from the cache's files (issue 34): the same numbers as read blocks and
as the kernel matrix, the same bits in every product, a bounded number of mappings alive, damage
still caught; and the preconditioner's product chunks (kernel_precond.a_chunk_bytes)."""

import os

import numpy as np
import pytest

from dense_oracle import explicit_pairs, nystroem_precond_dense
from streamrank._native import pairkernels as pk
from streamrank.cache import kernel_cache as kcm
from streamrank.cache.feature_cache import block_name
from streamrank.cache.kernel_cache import KernelCache
from streamrank.features.kernels import kernel_matrix
from streamrank.objectives import kernel_precond as kp
from streamrank.objectives.kernel_objective import KernelObjective


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(11)
    sizes = rng.integers(3, 25, size=30)
    qp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    X = rng.random((qp[-1], 6))
    y = rng.integers(0, 3, qp[-1]).astype(np.float64)
    return X, y, qp


def make(rows, where, memory_bytes=0, block_bytes=3000):
    X, _, qp = rows
    kc = KernelCache(X, qp, kernel="rbf", gamma=0.4, key_material={"dataset": "mapped-test"},
                     block_bytes=block_bytes, memory_bytes=memory_bytes, cache_dir=where)
    kc.build()
    return kc


def full(kc):
    return np.vstack([Qk.copy() for _, _, _, Qk in kc.blocks()])


def test_mapped_blocks_are_the_read_blocks_and_the_kernel_matrix(rows, tmp_path, monkeypatch):
    X, _, _ = rows
    kc = make(rows, tmp_path)
    assert kc.n_blocks > 4 and not any(kc.in_memory(k) for k in kc.own)
    want = (kernel_matrix(X, kernel="rbf", gamma=0.4) - kc.shift).astype(np.float32)
    reads = kc.stats.disk_reads
    mapped = full(kc)
    assert kc.stats.disk_reads == reads + kc.n_blocks and kc._buffers is None  # no read buffer was needed
    monkeypatch.setattr(kcm, "MAP_BLOCKS", False)
    read = full(kc)
    assert np.array_equal(mapped, want) and np.array_equal(read, want)
    kc.close()


def _objective(kc, rows):
    _, y, qp = rows
    rank = np.searchsorted(np.unique(y), y).astype(np.int32)
    return KernelObjective(kc, rank, C=0.7, cost=pk.pair_cost(np.ones((3, 3))), mu=np.ones(len(qp) - 1))


def test_products_are_the_same_bits_mapped_read_or_in_memory_and_match_the_dense_product(rows, tmp_path, monkeypatch):
    X, y, qp = rows
    rng = np.random.default_rng(2)
    beta, v = rng.standard_normal(len(y)), rng.standard_normal(len(y))
    results = []
    for where, memory, mapped, here in ((tmp_path, 0, True, True), (tmp_path, 0, True, False), (tmp_path, 0, False, True),
                                        (tmp_path, 6000, True, True), (None, 1 << 30, True, True)):
        monkeypatch.setattr(kcm, "MAP_BLOCKS", mapped)
        monkeypatch.setattr(kcm, "SYNC_MAP", here)
        kc = make(rows, where, memory_bytes=memory)
        obj = _objective(kc, rows)
        f = obj.fun(beta)
        g = obj.grad(beta)
        results.append((f, g, obj.hessp(v), kc.jitter, kc.shift))
        kc.close()
    for f, g, h, _, _ in results[1:]:
        assert f == results[0][0] and np.array_equal(g, results[0][1]) and np.array_equal(h, results[0][2])
    # the oracle: Q' = float32(K - c) + c 1 1^T + jitter I as a dense float64 matrix, the pair loss's
    # gradient and Hessian in score space from explicit pairs (paper 004 (B.2), (B.3))
    _, g, h, jitter, shift = results[0]
    Q = (kernel_matrix(X, kernel="rbf", gamma=0.4) - shift).astype(np.float32).astype(np.float64) + shift
    Q[np.diag_indices_from(Q)] += jitter
    A, c = explicit_pairs(y, qp)
    A = A.toarray()
    z = Q @ beta
    m = 1.0 - A @ z
    act = m > 0
    dz = -2.0 * A[act].T @ (c[act] * m[act])
    L = 2.0 * A[act].T @ (c[act, None] * A[act])
    np.testing.assert_allclose(g, Q @ (beta + 0.7 * dz), rtol=1e-9, atol=1e-9 * np.abs(Q @ beta).max())
    want = Q @ (v + 0.7 * L @ (Q @ v))
    np.testing.assert_allclose(h, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="counts mappings in /proc/self/maps (Linux)")
@pytest.mark.parametrize("here", [True, False])
def test_a_pass_holds_at_most_read_buffers_mapped_blocks(rows, tmp_path, here, monkeypatch):
    monkeypatch.setattr(kcm, "SYNC_MAP", here)  # mapped in the pass's thread, or by a thread ahead
    kc = make(rows, tmp_path)
    name = str(kc.dir)

    def mapped_blocks():
        with open("/proc/self/maps") as f:
            return len({line.split()[-1] for line in f if name in line})

    counts = []
    for _ in range(2):
        for item in kc.blocks():  # a consumer that keeps only the block it is given
            counts.append(mapped_blocks())
    # seen from the consumer: its block and the one ahead (the one it dropped goes when it rebinds
    # its variable, so the plan's READ_BUFFERS bound the moment between the two)
    assert max(counts) <= kcm.MAPPED_AHEAD < kcm.READ_BUFFERS and min(counts) >= 1
    del item
    assert mapped_blocks() == 0  # every mapping ends with the last reference
    kc.close()


@pytest.mark.parametrize("here", [True, False])
def test_a_pass_stopped_early_leaves_nothing_waiting(rows, tmp_path, here, monkeypatch):
    monkeypatch.setattr(kcm, "SYNC_MAP", here)
    kc = make(rows, tmp_path)
    want = full(kc)
    for stop in (0, 1, 3):
        for n, _ in enumerate(kc.blocks()):
            if n == stop:
                break
    assert np.array_equal(full(kc), want)
    kc.close()


def test_a_block_damaged_after_its_first_check_is_caught_by_a_new_process_view(rows, tmp_path):
    kc = make(rows, tmp_path)
    want = full(kc)
    kc.close()
    path = kc.dir / block_name(1)
    raw = bytearray(path.read_bytes())
    raw[5] ^= 0x40
    path.write_bytes(bytes(raw))  # a new inode: checked again
    back = make(rows, tmp_path)
    assert np.array_equal(full(back), want)
    assert back.stats.damaged == 1 and back.computed_blocks == 1
    back.close()


def test_chunk_bytes_follow_rows_and_landmarks_alone():
    # MQ2008 Fold1's shape keeps the 8 MB chunks; generated mq2007's are about l / 32 rows, at most 64 MB
    assert kp.a_chunk_bytes(9630, 1000) == kp.A_CHUNK_BYTES
    assert kp.a_chunk_bytes(42158, 2000) == 24 * 2000 * -(-42158 // kp.A_CHUNKS)
    assert kp.a_chunk_bytes(10 ** 6, 4000) == kp.A_CHUNK_MAX
    assert kp.a_chunk_bytes(50, 10) == 24 * 50 * 10 and kp.a_chunk_bytes(50, 0) == 0


@pytest.mark.parametrize("chunk_rows", [1, 7, 10 ** 6])
def test_preconditioner_in_chunks_is_its_dense_formula(rows, chunk_rows, monkeypatch):
    """M = D + U (I + C U^T L U) U^T with D = diag(R) + ridge + C diag(L) diag(R)^2, whatever the
    chunks of its products (one query per chunk, a few, all rows in one)."""
    X, y, qp = rows
    l, k, C, ridge = len(y), 9, 1.3, 1e-3
    monkeypatch.setattr(kp, "A_CHUNK_BYTES", 24 * k * chunk_rows)
    monkeypatch.setattr(kp, "A_CHUNK_MAX", 24 * k * chunk_rows)
    monkeypatch.setattr(kp, "A_CHUNKS", 1)
    K = kernel_matrix(X, kernel="rbf", gamma=0.4)
    P = kp.NystroemPreconditioner(X, kernel="rbf", gamma=0.4, landmarks=k, ridge=ridge)
    rank = np.searchsorted(np.unique(y), y).astype(np.int32)
    cost, mu = pk.pair_cost(np.ones((3, 3))), np.ones(len(qp) - 1)
    z = np.random.default_rng(4).standard_normal(l)
    _, _, st = pk.loss_grad(z, rank, qp, cost, mu)
    want = nystroem_precond_dense(K, P.U.astype(np.float64), P.diag.min(), y, qp, z, C, ridge)
    M = P.at_point(C, rank, qp, cost, mu, st.arrays)
    # u^T M v against the dense formula over random directions (any wrong entry of M moves them) and
    # a few coordinate pairs, the diagonal among them; u is v takes mdot's shared-product branch
    g = np.random.default_rng(6)
    eye = np.eye(l)
    pairs = [(g.standard_normal(l), g.standard_normal(l)) for _ in range(12)]
    pairs += [(u, u) for u, _ in pairs[:4]]
    pairs += [(eye[i], eye[j]) for i, j in g.integers(0, l, (12, 2))] + [(eye[i], eye[i]) for i in (0, l - 1)]
    for u, v in pairs:
        scale = np.abs(u) @ np.abs(want) @ np.abs(v)
        assert M.mdot(u, v) == pytest.approx(u @ want @ v, rel=1e-7, abs=1e-9 * scale)
    x = np.random.default_rng(5).standard_normal(l)
    np.testing.assert_allclose(M.solve(want @ x), x, rtol=1e-5, atol=1e-6 * np.abs(x).max())
