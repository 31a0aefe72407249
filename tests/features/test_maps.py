"""Kernels and feature maps (paper 000): exactness, convergence in m, block-size independence,
bit-identical rows and HDF5 round trips."""

import json
import warnings

import h5py
import numpy as np
import pytest

import kernel_oracle as oracle
import streamrank
from streamrank.features import kernels as kn
from streamrank.errors import FormatError, InputError, ParameterError
from streamrank.features.map_files import load_map
from streamrank.features.maps import IdentityMap, Nystroem, RandomFourier, Reservoir
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.features.normalize import Normalizer

KERNELS = ["rbf", "laplacian", "poly", "sigmoid", "linear"]


def make_dataset(path, n_queries=60, d=5, seed=0, max_size=40):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_size, n_queries)
    with DatasetWriter(path, n_features=d) as w:
        for q, s in enumerate(sizes):
            w.append(rng.standard_normal((s, d)).astype(np.float32),
                     rng.integers(0, 3, s).astype(np.float32), np.full(s, 100 + q, np.int64))
    return streamrank.open_dataset(path)


def rel_fro(A, B):
    return np.linalg.norm(A - B) / np.linalg.norm(B)


def gram(phi):
    return phi @ phi.T


# -- kernels ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernels_equal_direct_formulas(kernel):
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((37, 7)), rng.standard_normal((23, 7))
    got = kn.kernel_matrix(A, B, kernel, gamma=0.3, degree=3, coef0=0.5)
    want = oracle.kernel(kernel, A, B, gamma=0.3, degree=3, coef0=0.5)
    assert got.dtype == np.float64 and got.shape == (37, 23)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    # the direct entry points compute the same
    direct = {"rbf": lambda: kn.rbf(A, B, 0.3), "laplacian": lambda: kn.laplacian(A, B, 0.3),
              "poly": lambda: kn.poly(A, B, 0.3, 3, 0.5), "sigmoid": lambda: kn.sigmoid(A, B, 0.3, 0.5),
              "linear": lambda: kn.linear(A, B)}[kernel]()
    np.testing.assert_array_equal(direct, got)
    # float32 input is computed in float64 (the conversion is exact)
    A32 = A.astype(np.float32)
    np.testing.assert_array_equal(kn.kernel_matrix(A32, B, kernel, 0.3, 3, 0.5),
                                  kn.kernel_matrix(A32.astype(np.float64), B, kernel, 0.3, 3, 0.5))
    # B defaults to A
    np.testing.assert_array_equal(kn.kernel_matrix(A, None, kernel, 0.3, 3, 0.5),
                                  kn.kernel_matrix(A, A, kernel, 0.3, 3, 0.5))


def test_laplacian_equals_numpy_twin_bit_for_bit():
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((45, 9)), rng.standard_normal((31, 9))
    out = np.empty((45, 31))
    kn._l1_distances(A, np.ascontiguousarray(B.T), out)
    np.testing.assert_array_equal(out, oracle.l1_distances(A, B))
    out2 = np.empty((45, 31))
    kn._l1_distances.py_func(A, np.ascontiguousarray(B.T), out2)  # the plain-Python body too
    np.testing.assert_array_equal(out2, out)
    np.testing.assert_array_equal(kn.laplacian(A, B, 0.7), oracle.laplacian(A, B, 0.7))


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_rows_do_not_depend_on_the_other_rows(kernel):
    rng = np.random.default_rng(3)
    T = kn.ROW_TILE
    A, B = rng.random((2 * T + 44, 11)), rng.random((70, 11))
    full = kn.kernel_matrix(A, B, kernel, 0.2)
    prep = kn.PreparedKernel(B, kernel, 0.2)
    assert prep.tile_rows == T
    for a, b in [(0, 1), (5, 6), (3, 20), (17, 33), (100, 300), (1, 299), (T - 2, 2 * T + 9), (T, 2 * T + 44)]:
        np.testing.assert_array_equal(prep(A[a:b], row0=a), full[a:b])
    # rounded once into a float32 out (as KernelCache stores Q)
    out = np.empty((b - a, 70), np.float32)
    assert prep(A[a:b], out=out, row0=a) is out and np.array_equal(out, full[a:b].astype(np.float32))


def test_rbf_distance_is_clipped_at_zero():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((40, 6)) * 1e4  # large norms: ||x||^2 + ||y||^2 - 2 x.y cancels
    K = kn.rbf(np.vstack([A, A]), A, 1e-9)
    assert np.all(K <= 1.0) and np.all(K > 0)
    np.testing.assert_allclose(np.diag(K[:40]), 1.0, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(K[:40], K[40:])


def test_psd_flags():
    assert kn.is_psd("rbf") and kn.is_psd("laplacian") and kn.is_psd("linear")
    assert kn.is_psd("poly", coef0=1.0) and not kn.is_psd("poly", coef0=-1.0)
    assert not kn.is_psd("sigmoid") and "sigmoid" not in kn.PSD
    assert kn.SHIFT_INVARIANT == {"rbf", "laplacian"}


@pytest.mark.parametrize("kwargs, words", [
    ({"gamma": -1}, ["gamma", "-1", "gamma="]),
    ({"gamma": 0.0}, ["gamma", "0", "gamma="]),
    ({"gamma": float("nan")}, ["gamma", "nan", "gamma="]),
    ({"gamma": "big"}, ["gamma", "big", "gamma="]),
    ({"degree": 0}, ["degree", "0", "degree="]),
    ({"degree": 2.5}, ["degree", "2.5", "degree="]),
    ({"coef0": float("inf")}, ["coef0", "inf", "coef0="]),
    ({"kernel": "cosine"}, ["kernel", "cosine", "kernel="]),
])
def test_kernel_parameters_are_checked(kwargs, words):
    A = np.ones((3, 4))
    args = {"kernel": "rbf", "gamma": None, "degree": 3, "coef0": 1.0, **kwargs}
    with pytest.raises(ParameterError) as e:
        kn.kernel_matrix(A, A, **args)
    for w in words:
        assert w in str(e.value)


def test_default_gamma_is_one_over_n_features():
    A = np.random.default_rng(5).random((6, 8))
    np.testing.assert_array_equal(kn.kernel_matrix(A, A, "rbf"), kn.rbf(A, A, 1 / 8))
    with pytest.raises(ParameterError, match="gamma must be > 0; got -1. Use gamma=0.125"):
        kn.kernel_matrix(A, A, "rbf", gamma=-1)


# -- reservoir -----------------------------------------------------------------------------------
def test_reservoir_is_uniform():
    n, k, trials = 30, 7, 3000
    counts = np.zeros(n)
    for seed in range(trials):
        res = Reservoir(k, seed)
        res.accept(n)
        rows = res.slot_row
        assert len(np.unique(rows)) == k and rows.min() >= 0 and rows.max() < n
        counts[rows] += 1
    p = k / n
    sd = np.sqrt(trials * p * (1 - p))
    assert np.all(np.abs(counts - trials * p) < 5 * sd)
    chi2 = (((counts - trials * p) ** 2) / (trials * p * (1 - p))).sum()
    assert chi2 < n + 6 * np.sqrt(2 * n)  # chi-square with ~n degrees of freedom


def test_reservoir_does_not_depend_on_how_rows_arrive():
    ref = Reservoir(50, 9)
    ref.accept(10_000)
    rng = np.random.default_rng(0)
    for _ in range(5):
        res = Reservoir(50, 9)
        cuts = np.sort(rng.integers(0, 10_000, 30))
        for c in list(cuts) + [10_000]:
            res.accept(int(c))
        np.testing.assert_array_equal(res.slot_row, ref.slot_row)
    few = Reservoir(50, 9)
    few.accept(20)  # fewer rows than slots: all of them, in row order
    np.testing.assert_array_equal(few.slot_row[:20], np.arange(20))


# -- Nystroem ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "poly", "linear"])
def test_nystroem_with_all_rows_as_landmarks_is_exact(kernel):
    rng = np.random.default_rng(6)
    X = rng.standard_normal((120, 5))
    X[60:70] = X[:10]  # duplicate rows: W is singular, the floor drops the zero eigenvalues
    for m in (120, 500):
        ny = Nystroem(kernel, gamma=0.3, n_components=m, seed=1).fit(X)
        assert ny.landmarks_.shape == (120, 5)
        np.testing.assert_array_equal(np.sort(ny.landmark_rows_), np.arange(120))
        phi = ny.transform(X, np.float64)
        K = oracle.kernel(kernel, X, X, gamma=0.3, degree=3, coef0=1.0)
        assert rel_fro(gram(phi), K) < 1e-6
        assert ny.n_components_ <= 110  # the 10 duplicates add nothing


def test_nystroem_is_eq18_up_to_a_rotation():
    rng = np.random.default_rng(7)
    X, Y = rng.standard_normal((300, 4)), rng.standard_normal((50, 4))
    ny = Nystroem("rbf", gamma=0.5, n_components=80, seed=3).fit(X)
    L = ny.landmarks_
    np.testing.assert_array_equal(L, X[ny.landmark_rows_])
    W = oracle.rbf(L, L, 0.5)
    lam, U = np.linalg.eigh(W)
    keep = lam > lam.max() * len(L) * np.finfo(float).eps
    P = U[:, keep] / np.sqrt(lam[keep])  # paper 000 eq. 18
    assert ny.n_components_ == keep.sum()
    np.testing.assert_allclose(np.sort(ny.eigenvalues_), np.sort(lam[keep]), rtol=1e-10)
    want = oracle.rbf(Y, L, 0.5) @ P
    got = ny.transform(Y, np.float64)
    np.testing.assert_allclose(gram(got), gram(want), atol=1e-10)
    # the stored projection is lower trapezoidal (the triangular product) and phi = K(x, L) P
    assert not np.any(np.triu(ny.projection_, 1))
    np.testing.assert_allclose(got, oracle.rbf(Y, L, 0.5) @ ny.projection_, atol=1e-10)


def test_nystroem_rank_keeps_the_top_eigenpairs():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((200, 6))
    full = Nystroem(gamma=0.2, n_components=60, seed=2).fit(X)
    low = Nystroem(gamma=0.2, n_components=60, rank=7, seed=2).fit(X)
    assert low.n_components_ == 7 and low.projection_.shape == (60, 7)
    np.testing.assert_array_equal(low.landmarks_, full.landmarks_)
    np.testing.assert_allclose(low.eigenvalues_, full.eigenvalues_[:7], rtol=1e-12)
    L = low.landmarks_
    lam, U = np.linalg.eigh(oracle.rbf(L, L, 0.2))
    P = U[:, -7:] / np.sqrt(lam[-7:])
    np.testing.assert_allclose(gram(low.transform(X[:30], np.float64)), gram(oracle.rbf(X[:30], L, 0.2) @ P),
                               atol=1e-9)
    # more landmarks, better approximation
    K = oracle.rbf(X, X, 0.2)
    errs = [rel_fro(gram(Nystroem(gamma=0.2, n_components=m).fit(X).transform(X, np.float64)), K)
            for m in (5, 20, 80)]
    assert errs[0] > errs[1] > errs[2]


def test_nystroem_sigmoid_keeps_the_positive_part():
    X = np.random.default_rng(9).standard_normal((80, 5))
    ny = Nystroem("sigmoid", gamma=0.1, coef0=-0.5, n_components=80).fit(X)
    assert np.all(ny.eigenvalues_ > 0) and 0 < ny.n_components_ < 80
    assert np.all(np.isfinite(ny.transform(X, np.float64)))


def test_landmarks_do_not_depend_on_block_size(tmp_path):
    ds = make_dataset(tmp_path / "d.h5")
    X = ds.read(0, ds.n_rows)[0]
    row_bytes = 4 * ds.n_features + 4
    biggest = int(np.diff(ds.query_ptr).max()) * row_bytes
    ref = Nystroem(n_components=150, seed=4).fit(X)
    np.testing.assert_array_equal(ref.landmarks_, X[ref.landmark_rows_])
    budgets = [1, biggest, 3 * biggest, 10 * biggest, ds.n_rows * row_bytes]
    for budget in budgets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # 1 byte: every query is "too large"
            ny = Nystroem(n_components=150, seed=4).fit(ds, block_bytes=budget)
        np.testing.assert_array_equal(ny.landmark_rows_, ref.landmark_rows_)
        np.testing.assert_array_equal(ny.landmarks_, ref.landmarks_)
        np.testing.assert_array_equal(ny.projection_, ref.projection_)
        assert ny.params() == ref.params()
    other = Nystroem(n_components=150, seed=5).fit(ds)
    assert other.params()["sha256"] != ref.params()["sha256"]


def test_landmarks_of_a_query_range_and_normalised_rows(tmp_path):
    ds = make_dataset(tmp_path / "d.h5")
    qp = ds.query_ptr
    q0, q1 = 10, 40
    X = ds.read(int(qp[q0]), int(qp[q1]))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # small budgets: queries larger than a block
        ny = Nystroem(n_components=50, seed=6).fit(ds, queries=(q0, q1), block_bytes=200)
    assert np.all((ny.landmark_rows_ >= qp[q0]) & (ny.landmark_rows_ < qp[q1]))
    ref = Nystroem(n_components=50, seed=6).fit(X)
    np.testing.assert_array_equal(ny.landmark_rows_, ref.landmark_rows_ + qp[q0])
    np.testing.assert_array_equal(ny.landmarks_, ref.landmarks_)
    # landmarks are model inputs: normalised rows when a normalizer is given
    norm = Normalizer("query_minmax")
    Xall = ds.read(0, ds.n_rows)[0]
    Xn = norm.transform(Xall, qp)
    for budget in (300, 5000, 10**7):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            nn = Nystroem(n_components=70, seed=6).fit(ds, normalizer=norm, block_bytes=budget)
        np.testing.assert_array_equal(nn.landmarks_, Xn[nn.landmark_rows_])
        np.testing.assert_array_equal(nn.landmarks_, Nystroem(n_components=70, seed=6).fit(Xn).landmarks_)


def test_fewer_rows_than_landmarks_and_empty_data(tmp_path):
    X = np.random.default_rng(10).standard_normal((9, 3))
    ny = Nystroem(n_components=1000).fit(X)
    np.testing.assert_array_equal(ny.landmarks_, X)
    np.testing.assert_array_equal(ny.landmark_rows_, np.arange(9))
    with pytest.raises(InputError, match="no rows"):
        Nystroem().fit(np.zeros((0, 3)))
    with pytest.raises(InputError, match="no eigenvalue"):
        Nystroem("linear", n_components=5).fit(np.zeros((10, 3)))


# -- random Fourier features -----------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
def test_random_fourier_error_falls_like_m_to_the_minus_half(kernel):
    rng = np.random.default_rng(11)
    X = rng.standard_normal((80, 5)) * 0.7
    K = oracle.kernel(kernel, X, X, gamma=0.4)
    ms = np.array([64, 128, 256, 512, 1024, 2048, 4096])
    err = np.array([[rel_fro(gram(RandomFourier(kernel, gamma=0.4, n_components=int(m), seed=s)
                                  .fit(X).transform(X, np.float64)), K) for s in range(6)] for m in ms])
    slope = np.polyfit(np.log(ms), np.log(err.mean(axis=1)), 1)[0]
    assert -0.65 <= slope <= -0.35, (slope, err.mean(axis=1))
    assert err.mean(axis=1)[-1] < 0.1


def test_random_fourier_draws():
    d, m, gamma = 6, 20000, 0.3
    rbf = RandomFourier("rbf", gamma=gamma, n_components=m, seed=1).fit(d)
    assert rbf.omega_.shape == (d, m) and rbf.offset_.shape == (m,)
    assert abs(rbf.omega_.var() / (2 * gamma) - 1) < 0.03 and abs(rbf.omega_.mean()) < 0.02
    assert rbf.offset_.min() >= 0 and rbf.offset_.max() < 2 * np.pi
    assert abs(rbf.offset_.mean() / np.pi - 1) < 0.02
    lap = RandomFourier("laplacian", gamma=gamma, n_components=m, seed=1).fit(d)
    assert abs(np.median(np.abs(lap.omega_)) / gamma - 1) < 0.03  # Cauchy(0, gamma): median |w| = gamma
    # nested: fewer components are the first ones of more
    small = RandomFourier("rbf", gamma=gamma, n_components=64, seed=1).fit(d)
    np.testing.assert_array_equal(small.omega_, rbf.omega_[:, :64])
    np.testing.assert_array_equal(small.offset_, rbf.offset_[:64])
    # gamma=None is 1 / n_features; the fit needs only the width (Dataset, array or int)
    g = RandomFourier(n_components=10).fit(np.zeros((3, 8)))
    assert g.gamma_ == 1 / 8 and g.params()["gamma"] == 1 / 8
    np.testing.assert_array_equal(g.omega_, RandomFourier(n_components=10).fit(8).omega_)


# -- shared protocol -------------------------------------------------------------------------------
def fitted_maps(X):
    return [IdentityMap().fit(X),
            Nystroem("rbf", gamma=0.3, n_components=200, seed=1).fit(X),  # k = m: square triangle
            Nystroem("rbf", gamma=1e-4, n_components=150, seed=1).fit(X),  # k < m: trapezoid
            Nystroem("laplacian", gamma=0.3, n_components=64, rank=20, seed=2).fit(X),
            Nystroem("poly", gamma=0.5, degree=2, coef0=1.0, n_components=64).fit(X),
            RandomFourier("rbf", gamma=0.3, n_components=100, seed=3).fit(X),
            RandomFourier("laplacian", gamma=0.3, n_components=70, seed=3).fit(X)]


def test_rows_map_independently_and_bit_identically():
    rng = np.random.default_rng(12)
    T = kn.ROW_TILE
    n = 3 * T + 37  # several tiles, the last one partial
    X = rng.standard_normal((n, 6)).astype(np.float32)
    maps = fitted_maps(X)
    assert maps[2].n_components_ < 150 and maps[1].n_components_ == 200
    # slices from one row to all, starting and ending inside tiles, across several tiles
    slices = [(0, 1), (3, 4), (5, 22), (17, 100), (99, 612), (600, 700), (T - 1, T + 1), (T, 2 * T),
              (T + 5, 3 * T + 7), (37, n), (2 * T + 3, n), (0, n)]
    for mp in maps:
        ref64 = mp.transform(X, np.float64)
        ref32 = mp.transform(X)
        assert ref32.dtype == np.float32 and ref64.dtype == np.float64
        assert ref32.shape == (n, mp.n_components_)
        np.testing.assert_array_equal(ref32, ref64.astype(np.float32))
        for a, b in slices:
            np.testing.assert_array_equal(mp.transform(X[a:b], np.float64, row0=a), ref64[a:b])
            np.testing.assert_array_equal(mp.transform(X[a:b], row0=np.int64(a)), ref32[a:b])
        out = np.empty((n, mp.n_components_), np.float64)
        assert mp.transform(X, np.float64, out=out) is out
        np.testing.assert_array_equal(out, ref64)
        assert mp.transform(X[:0]).shape == (0, mp.n_components_)
        if mp.kind != "identity":
            assert mp.chunk_rows() == T  # narrow maps: full tiles
        with pytest.raises(ParameterError, match="row0 must be an integer >= 0.*Pass row0=0"):
            mp.transform(X, row0=-1)


def test_rows_are_independent_by_construction_whatever_the_blas(monkeypatch):
    rng = np.random.default_rng(15)
    T = kn.ROW_TILE
    n = 2 * T + 61
    X = rng.standard_normal((n, 6)).astype(np.float32)
    maps = fitted_maps(X)[1:]
    oracle.fake_blas(monkeypatch)
    for mp in maps:
        ref = mp.transform(X, np.float64)
        for a, b in [(0, 1), (7, 8), (5, 300), (T - 3, 2 * T + 2), (T + 1, n)]:
            np.testing.assert_array_equal(mp.transform(X[a:b], np.float64, row0=a), ref[a:b])
    # the fake has teeth: a row in another position of its tile gets other bits
    ny = maps[0]
    assert not np.array_equal(ny.transform(X[5:300], np.float64, row0=0), ny.transform(X, np.float64)[5:300])
    K = kn.kernel_matrix(X, X[:40], "poly", gamma=0.5)
    for a, b in [(3, 4), (10, 2 * T + 9)]:
        np.testing.assert_array_equal(kn.PreparedKernel(X[:40], "poly", 0.5)(X[a:b], row0=a), K[a:b])


def test_transform_memory_is_bounded():
    X = np.random.default_rng(13).standard_normal((50, 4))
    ny = Nystroem(gamma=0.3, n_components=50).fit(X)
    assert ny.work_bytes() <= kn.TILE_BYTES * kn.tile_threads()
    # one tile whatever the rows: input, K(X, L), one output block
    assert ny.work_bytes(10) == ny.work_bytes(10 ** 6) == 8 * kn.ROW_TILE * (4 + 50 + ny.n_components_) * kn.tile_threads()
    assert ny.work_bytes(0) == 0 and IdentityMap().fit(X).work_bytes() == 0
    # very wide products get fewer rows per tile (a multiple of ROW_ALIGN), never more bytes
    assert kn.tile_rows(10) == kn.ROW_TILE
    for width in (20_000, 100_000, 10 ** 6):
        T = kn.tile_rows(width)
        assert T % kn.ROW_ALIGN == 0 and kn.ROW_ALIGN <= T < kn.ROW_TILE
        assert 8 * T * width <= kn.TILE_BYTES or T == kn.ROW_ALIGN


def test_identity_map_returns_its_input():
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    im = IdentityMap().fit(X)
    assert im.transform(X) is X and im.n_components_ == 3
    np.testing.assert_array_equal(im.transform(X, np.float64), X)


def test_h5_round_trip_is_bit_identical(tmp_path):
    rng = np.random.default_rng(14)
    X = rng.standard_normal((300, 6)).astype(np.float32)
    Y = rng.standard_normal((77, 6)).astype(np.float32)
    maps = fitted_maps(X)
    path = tmp_path / "maps.h5"
    with h5py.File(path, "w") as f:
        for i, mp in enumerate(maps):
            mp.to_h5(f.create_group(f"m{i}"))
    with h5py.File(path, "r") as f:
        for i, mp in enumerate(maps):
            back = load_map(f[f"m{i}"])
            assert type(back) is type(mp)
            assert back.params() == mp.params()
            json.dumps(back.params())
            for dtype in (np.float32, np.float64):
                np.testing.assert_array_equal(back.transform(Y, dtype), mp.transform(Y, dtype))
    # corruption is detected by the recorded sha256
    with h5py.File(path, "r+") as f:
        f["m1/projection"][0, 0] += 1.0
        f.create_group("odd").attrs["kind"] = "wavelet"
        f.create_group("legacy").attrs["kind"] = "identity"  # model files before feature maps
    with h5py.File(path, "r") as f:
        with pytest.raises(FormatError, match="sha256"):
            load_map(f["m1"])
        with pytest.raises(FormatError, match="wavelet"):
            load_map(f["odd"])
        assert isinstance(load_map(f["legacy"]), IdentityMap)


def test_params_are_json_and_define_the_map():
    X = np.random.default_rng(15).standard_normal((100, 4))
    p = Nystroem(n_components=30, seed=2).fit(X).params()
    assert json.loads(json.dumps(p)) == p
    for key in ("kind", "kernel", "gamma", "degree", "coef0", "n_components", "rank", "seed", "sha256",
                "n_features", "output_dim"):
        assert key in p
    assert p["kind"] == "nystroem" and p["gamma"] == 0.25 and p["output_dim"] == 30
    assert Nystroem(n_components=30, seed=2).fit(X).params() == p
    assert Nystroem(n_components=30, seed=2, gamma=0.3).fit(X).params()["sha256"] != p["sha256"]
    r = RandomFourier(n_components=30, seed=2).fit(X).params()
    assert r["kind"] == "rff" and r["gamma"] == 0.25 and json.loads(json.dumps(r)) == r
    assert Nystroem().params()["sha256"] is None


@pytest.mark.parametrize("make, words", [
    (lambda: Nystroem(n_components=0), ["n_components", "0", "n_components="]),
    (lambda: Nystroem(n_components=10, rank=20), ["rank", "20", "rank="]),
    (lambda: Nystroem(rank=0), ["rank", "0", "rank="]),
    (lambda: Nystroem(seed=-1), ["seed", "-1", "seed="]),
    (lambda: Nystroem(gamma=-2), ["gamma", "-2", "gamma="]),
    (lambda: Nystroem("poly", degree=0), ["degree", "degree="]),
    (lambda: RandomFourier("poly"), ["poly", "kernel=rbf"]),
    (lambda: RandomFourier(n_components=2.5), ["n_components", "n_components="]),
])
def test_map_parameters_are_checked(make, words):
    with pytest.raises(ParameterError) as e:
        make()
    for w in words:
        assert w in str(e.value)


def test_transform_checks_its_input():
    X = np.random.default_rng(16).standard_normal((20, 4))
    with pytest.raises(RuntimeError, match="fit"):
        Nystroem().transform(X)
    ny = Nystroem(n_components=5).fit(X)
    with pytest.raises(InputError, match="X has 3 features, but the nystroem feature map is expecting 4 features"):
        ny.transform(X[:, :3])
    with pytest.raises(InputError, match="2-D"):
        ny.transform(X[0])
