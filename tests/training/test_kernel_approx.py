"""Kernel-approximation RankSVM (paper 000): maps inside training, storage modes, model files."""

import json

import numpy as np
import pytest

import streamrank
from dense_oracle import DenseRankSVM
from streamrank.cli import main
from streamrank.synthetic import write_hdf5
from streamrank.training.linear import train_linear


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ka")
    out = {}
    for part in ("train", "valid"):
        write_hdf5(d / f"{part}.h5", "small", seed=0, part=part, scale=0.5)
        out[part] = streamrank.open_dataset(d / f"{part}.h5")
    out["dir"] = d
    return out


@pytest.mark.parametrize("method,rows", [("nystroem", "features"), ("nystroem", "kernel"), ("rff", None)])
def test_memory_cache_and_recompute_give_the_same_model(parts, tmp_path, method, rows):
    ds = parts["train"]
    common = dict(C=0.5, tol=1e-6, method=method, gamma=0.05, components=64, seed=3)
    if rows is not None:
        common["map_rows"] = rows
    mem, s_mem = train_linear(ds, **common)
    assert s_mem["map_storage"] == "memory" and s_mem["map_rows"] == (rows or "features")
    # a budget far below the mapped rows: streamed, mapped again every pass or read from disk
    rec, s_rec = train_linear(ds, memory_budget="512KB", map_cache="recompute", **common)
    disk, s_disk = train_linear(ds, memory_budget="512KB", map_cache="cache", cache_dir=tmp_path, **common)
    assert s_rec["map_storage"] == "recompute" and s_disk["map_storage"] == "cache"
    assert np.array_equal(mem.w, rec.w) and np.array_equal(mem.w, disk.w)
    assert any(p.name.startswith("features-") for p in tmp_path.iterdir())
    # the same cache serves another C
    other, _ = train_linear(ds, memory_budget="512KB", map_cache="cache", cache_dir=tmp_path,
                            **{**common, "C": 2.0})
    again, _ = train_linear(ds, **{**common, "C": 2.0})
    assert np.array_equal(other.w, again.w)


@pytest.mark.parametrize("measured", ["recompute", "cache"])
def test_auto_decides_after_the_first_block(parts, tmp_path, monkeypatch, measured):
    """A run whose measurement says recompute writes one block, not the whole cache; a complete
    cache left by an earlier run is read from the first pass on (only block 0 is mapped)."""
    import streamrank.objectives.mapped_source as mapped
    from streamrank.cache.feature_cache import choose

    seen = []

    def fake_choose(read_bps, map_rps, row_bytes, force=None):
        seen.append((read_bps, map_rps))
        return choose(read_bps, map_rps, row_bytes, force=force or measured)

    monkeypatch.setattr(mapped, "choose", fake_choose)
    ds = parts["train"]
    common = dict(C=0.5, tol=1e-6, method="nystroem", gamma=0.05, components=64, seed=3,
                  memory_budget="512KB", cache_dir=tmp_path)
    model, summary = train_linear(ds, map_cache="auto", **common)
    assert summary["map_storage"] == measured and len(seen) == 1 and seen[0][0] > 0
    (cache,) = [p for p in tmp_path.iterdir() if p.name.startswith("features-")]
    blocks = [p for p in cache.iterdir() if p.name.startswith("block-")]
    if measured == "recompute":
        assert len(blocks) == 1
        return
    assert len(blocks) > 2
    mapped_rows = []
    orig_map = mapped.MappedSource._map

    def counting_map(self, block, out):
        mapped_rows.append(block.X.shape[0])
        return orig_map(self, block, out)

    monkeypatch.setattr(mapped.MappedSource, "_map", counting_map)
    again, _ = train_linear(ds, map_cache="auto", **common)
    assert len(mapped_rows) == 1  # block 0 timed; every other block of every pass read back
    assert np.array_equal(again.w, model.w)


@pytest.mark.parametrize("method,kernel,rows", [("nystroem", "rbf", "kernel"), ("nystroem", "rbf", "features"),
                                                ("nystroem", "poly", "auto"), ("rff", "laplacian", "auto")])
def test_saved_model_predicts_identically_and_matches_the_mapped_oracle(parts, tmp_path, method, kernel, rows):
    ds = parts["train"]
    model, s = train_linear(ds, C=1.0, tol=1e-9, method=method, kernel=kernel, gamma=0.05, components=40,
                            normalize="zscore", map_rows=rows)
    model.save(tmp_path / "m.h5")
    back = streamrank.load(tmp_path / "m.h5")
    X, y = ds.read(0, ds.n_rows)
    assert np.array_equal(back.predict(X, ds.row_query_ids()), model.decision_function(X))
    assert back.model_.method == method and back.coef_.shape == (model.fmap.n_components_,)
    # the objective is the linear RankSVM's on the mapped rows as trained: float32 features, or
    # float32 kernel rows times the projection
    Xn = model.normalizer.transform(X)
    if s["map_rows"] == "kernel":
        Phi = model.fmap.kernel_rows(Xn).astype(np.float32).astype(np.float64) @ model.fmap.projection_
    else:
        Phi = model.fmap.transform(Xn, dtype=np.float32).astype(np.float64)
    dense = DenseRankSVM(Phi, y, ds.query_ptr, 1.0)
    assert s["objective"] == pytest.approx(dense.fun(dense.solve()), rel=1e-8)
    # and the other rows' optimum is the same model to the rows' rounding
    other = model.fmap.transform(Xn, dtype=np.float32).astype(np.float64) if s["map_rows"] == "kernel" else None
    if other is not None:
        d2 = DenseRankSVM(other, y, ds.query_ptr, 1.0)
        assert s["objective"] == pytest.approx(d2.fun(d2.solve()), rel=1e-6)


def test_kernel_rows_are_chosen_by_width_and_precision(parts, monkeypatch):
    """Kernel rows where every landmark is kept and their float32 rounding through P is within
    KERNEL_ROWS_TOL (measured against the float64 oracle on rows drawn beside the landmarks);
    phi rows otherwise, and for a rank cap; the error is what a float64 recomputation gives."""
    import streamrank.objectives.mapped_source as ms
    from streamrank.features.maps import Nystroem
    fm = Nystroem("rbf", 0.05, n_components=40, seed=1).fit(parts["train"])
    K = np.exp(-0.05 * ((fm.check_rows_[:, None, :] - fm.landmarks_[None]) ** 2).sum(-1))
    rng = np.random.default_rng([0, 0x4B52])
    w, v = rng.standard_normal(fm.n_components_), rng.standard_normal(K.shape[0])
    K32 = K.astype(np.float32).astype(np.float64)
    P = fm.projection_
    want = np.linalg.norm(K32 @ (P @ w) - K @ (P @ w)) / np.linalg.norm(K @ (P @ w))
    got = fm.kernel_rows_error()
    assert got[0] == pytest.approx(want, rel=1e-3) and 0 < got[0] < 1e-3
    assert ms.choose_rows(fm)[0] == ("kernel" if max(got) <= ms.KERNEL_ROWS_TOL else "features")
    monkeypatch.setattr(ms, "KERNEL_ROWS_TOL", max(got) / 2)
    assert ms.choose_rows(fm)[0] == "features" and ms.choose_rows(fm, "kernel")[0] == "kernel"
    monkeypatch.setattr(ms, "KERNEL_ROWS_TOL", max(got) * 2)
    assert ms.choose_rows(fm)[0] == "kernel" and ms.choose_rows(fm, "features")[0] == "features"
    capped = Nystroem("rbf", 0.05, n_components=40, rank=20, seed=1).fit(parts["train"])
    assert ms.choose_rows(capped)[0] == "features" and ms.choose_rows(capped, "kernel")[0] == "features"


def test_newton_cholesky_and_tron_agree_on_nystroem(parts):
    ds = parts["train"]
    common = dict(C=1.0, tol=1e-8, method="nystroem", gamma=0.05, components=60)
    a, sa = train_linear(ds, solver="tron", **common)
    b, sb = train_linear(ds, solver="newton_cholesky", **common)
    assert sa["objective"] == pytest.approx(sb["objective"], rel=1e-10)


def test_gamma_and_C_path_chooses_on_validation(parts):
    model, s = train_linear(parts["train"], valid=parts["valid"], C=[0.1, 1.0], method="nystroem",
                            gamma=[0.01, 0.2], components=32)
    cands = s["candidates"]
    assert [(c["gamma"], c["C"]) for c in cands] == [(0.01, 0.1), (0.01, 1.0), (0.2, 0.1), (0.2, 1.0)]
    best = max(cands, key=lambda c: c["valid_meanndcg"])
    assert (s["gamma"], s["C"]) == (best["gamma"], best["C"]) and model.fmap.gamma_ == best["gamma"]


def test_cli_trains_and_predicts_with_a_map(parts, tmp_path, capsys):
    d = parts["dir"]
    assert main(["train", str(d / "train.h5"), "-o", str(tmp_path / "m.h5"), "--method", "rff", "--gamma", "0.05",
                 "--components", "50", "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["method"] == "rff" and summary["gamma"] == 0.05 and summary["components"] == 50
    assert main(["predict", str(tmp_path / "m.h5"), str(d / "valid.h5"), "-o", str(tmp_path / "s.txt")]) == 0
    with streamrank.open_dataset(d / "valid.h5") as v:
        X, _ = v.read(0, v.n_rows)
        want = streamrank.load(tmp_path / "m.h5").predict(X)
        got = np.loadtxt(tmp_path / "s.txt")
        assert np.array_equal(got[v.row], want)


def test_cache_size_cap_below_a_block_falls_back_to_recompute(parts, tmp_path, capsys):
    """--cache-size too small for one mapped block: nothing stored, recomputed, the same model."""
    base = ["train", str(parts["dir"] / "train.h5"), "--method", "nystroem", "--gamma", "0.05",
            "--components", "64", "--C", "0.5", "--memory-budget", "512KB", "--cache-dir", str(tmp_path), "--json"]
    assert main(base + ["--cache-size", "1KB", "-o", str(tmp_path / "capped.h5")]) == 0
    capped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(base + ["--map-cache", "recompute", "-o", str(tmp_path / "rec.h5")]) == 0
    capsys.readouterr()
    assert capped["map_storage"] == "recompute"
    a, b = streamrank.load(tmp_path / "capped.h5"), streamrank.load(tmp_path / "rec.h5")
    assert np.array_equal(a.coef_, b.coef_)


@pytest.mark.parametrize("method", ["nystroem", "rff"])
def test_validation_rows_mapped_once_score_the_same_bits(tmp_path_factory, monkeypatch, method):
    """A kernel map's C path maps the validation rows once per gamma (MappedValidation) and scores
    them with every iterate's weights: the same validation scores, choice and model, bit for bit, as
    mapping them again for every score (validation_score through the model), for two gammas."""
    import streamrank.training.linear as lin
    from small_data import small_pair
    ds, valid = small_pair(tmp_path_factory, "mapped-valid", 0.2)
    with ds, valid:
        kw = dict(valid=valid, method=method, components=30, gamma=[0.02, 0.1], C=[0.25, 2.0], normalize="zscore",
                  tol=1e-4, block_bytes=20_000)
        cached, s1 = lin.train_linear(ds, **kw)
        monkeypatch.setattr(lin, "mapped_validation_bytes", lambda *a: 0)
        plain, s2 = lin.train_linear(ds, **kw)
    assert [c["valid_meanndcg"] for c in s1["candidates"]] == [c["valid_meanndcg"] for c in s2["candidates"]]
    assert [[r[5] for r in c["trace"]] for c in s1["candidates"]] == [[r[5] for r in c["trace"]] for c in s2["candidates"]]
    np.testing.assert_array_equal(cached.w, plain.w)
    assert (s1["C"], s1["gamma"]) == (s2["C"], s2["gamma"])


def test_first_pass_stores_blocks_in_the_background_and_raises_what_a_store_raised(parts, tmp_path, monkeypatch):
    """The first pass stores block k by a thread while block k + 1 is mapped: every block is on
    disk when the pass ends (the next run maps only block 0), and a store that fails (a full
    disk) ends the training with its error rather than a cache that silently lacks the block."""
    from streamrank.cache.feature_cache import CacheDiskFull, FeatureCache

    ds = parts["train"]
    common = dict(C=0.5, tol=1e-6, method="nystroem", gamma=0.05, components=64, seed=3, memory_budget="512KB",
                  block_bytes=20_000, cache_dir=tmp_path / "ok", map_cache="cache")
    model, s = train_linear(ds, **common)
    (cache,) = [p for p in (tmp_path / "ok").iterdir() if p.name.startswith("features-")]
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["complete"] and len(manifest["blocks"]) > 3
    ref, _ = train_linear(ds, **{**common, "memory_budget": "2GB", "block_bytes": None})
    assert np.array_equal(model.w, ref.w)
    put = FeatureCache.put

    def failing_put(self, k, array, take=False):
        if k == 3:
            raise CacheDiskFull("no space left for block 3")
        return put(self, k, array, take)
    monkeypatch.setattr(FeatureCache, "put", failing_put)
    with pytest.raises(CacheDiskFull, match="block 3"):
        train_linear(ds, **{**common, "cache_dir": tmp_path / "full"})
    import threading
    assert not [t for t in threading.enumerate() if t.name.startswith("streamrank-cache-write")]


def test_the_sketch_rank_follows_the_data_size_not_the_budget(parts, monkeypatch):
    """More rows than the sketch samples: rank m / 4 (here 100 of m = 400 with SKETCH_RANK 64), the
    same in memory and streamed, so the same model bits for any memory budget."""
    import streamrank.objectives.sketch_precond as sp
    monkeypatch.setattr(sp, "SKETCH_ROWS", 500)
    monkeypatch.setattr(sp, "SKETCH_RANK", 64)
    assert sp.rank_for(400, 3000) == 100 and sp.rank_for(400, 400) == 64 and sp.rank_for(40, 3000) == 40
    ranks = []
    orig = sp.sketch_hessian

    def spy(source, m, *a, **k):
        out = orig(source, m, *a, **k)
        ranks.append(out.lam.size)
        return out
    monkeypatch.setattr(sp, "sketch_hessian", spy)
    ds = parts["train"]
    common = dict(C=0.5, tol=1e-6, method="nystroem", gamma=0.05, components=400, seed=3, map_rows="features")
    mem, s_mem = train_linear(ds, **common)
    rec, s_rec = train_linear(ds, memory_budget="2MB", map_cache="recompute", **common)
    assert s_mem["map_storage"] == "memory" and s_rec["map_storage"] == "recompute"
    assert ranks and all(r == ranks[0] for r in ranks) and 64 < ranks[0] <= 100
    assert np.array_equal(mem.w, rec.w)
