"""Tests of the synthetic LETOR generator (streamrank.synthetic) and tools/make_letor.py."""

import gzip
import subprocess
import sys

import numpy as np
import pytest

from streamrank import synthetic as ds
from streamrank.errors import ParameterError

from locations import ROOT  # noqa: E402


def _parse_text(data, n_features):
    """Plain-Python LETOR parse: (X float32 via float(token), y, qid, docid rows)."""
    X, y, qid, rows = [], [], [], []
    for line in data.decode("ascii").split("\n"):
        if not line:
            continue
        body, comment = line.split(" #", 1)
        tok = body.split(" ")
        y.append(float(tok[0]))
        assert tok[1].startswith("qid:")
        qid.append(int(tok[1][4:]))
        x = np.zeros(n_features, np.float32)
        for t in tok[2:]:
            j, v = t.split(":")
            assert len(v) == 8 and v[1] == "."      # fixed 6 decimals, value in [0, 1]
            x[int(j) - 1] = np.float32(float(v))
        X.append(x)
        assert comment.startswith("docid = synth-")
        rows.append(int(comment[len("docid = synth-"):]))
    return np.array(X), np.array(y, np.float32), np.array(qid, np.int64), np.array(rows)


def _all_batches(preset, **kw):
    X, y, q = zip(*ds.generate_batches(preset, **kw))
    return np.concatenate(X), np.concatenate(y), np.concatenate(q)


def _write(tmp_path, name, **kw):
    path = tmp_path / name
    stats = ds.write_text(path, **kw)
    data = path.read_bytes()
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    return data, stats


# --- determinism ------------------------------------------------------------------------------
def test_same_seed_same_bytes_any_batch_size(tmp_path):
    a, _ = _write(tmp_path, "a.txt", preset="small", seed=3)
    b, _ = _write(tmp_path, "b.txt", preset="small", seed=3, batch_rows=37)
    c, _ = _write(tmp_path, "c.txt", preset="small", seed=3, batch_rows=10**6)
    assert a == b == c
    d, _ = _write(tmp_path, "d.txt", preset="small", seed=4)
    assert d != a


def test_batches_end_on_query_boundaries_and_match_across_batch_sizes():
    ref = _all_batches("small", seed=1, batch_rows=10**6)
    batches = list(ds.generate_batches("small", seed=1, batch_rows=200))
    assert len(batches) > 5
    for (_, _, q), (_, _, q_next) in zip(batches, batches[1:]):
        assert q[-1] != q_next[0]
    for a, b in zip(ref, map(np.concatenate, zip(*batches))):
        np.testing.assert_array_equal(a, b)
    assert ref[0].dtype == np.float32 and ref[1].dtype == np.float32 and ref[2].dtype == np.int64


def test_gzip_output_is_reproducible_and_equal_to_plain(tmp_path):
    plain, _ = _write(tmp_path, "p.txt", preset="small")
    gz1 = tmp_path / "1.txt.gz"
    gz2 = tmp_path / "2.txt.gz"
    ds.write_text(gz1, "small")
    ds.write_text(gz2, "small")
    assert gz1.read_bytes() == gz2.read_bytes()
    assert gzip.decompress(gz1.read_bytes()) == plain


# --- counts and statistics ----------------------------------------------------------------------
@pytest.mark.parametrize("name,scale", [("mq2007", 0.1), ("mslr30k", 0.002), ("istella", 0.001),
                                        ("small", 1.0), ("small", 2.5)])
def test_exact_query_and_row_counts(name, scale):
    p = ds.PRESETS[name]
    sizes = ds.query_sizes(name, scale=scale)
    assert len(sizes) == round(p.n_queries * scale)
    assert sizes.sum() == round(p.n_rows * scale)
    assert sizes.min() >= p.size_min and sizes.max() <= p.size_max


@pytest.mark.parametrize("name", list(ds.PRESETS))
def test_full_scale_sizes_are_exact_and_skewed(name):
    p = ds.PRESETS[name]
    sizes = ds.query_sizes(name)
    assert len(sizes) == p.n_queries and sizes.sum() == p.n_rows
    assert np.mean(sizes) > np.median(sizes)      # right-skewed


def test_features_labels_and_stats(tmp_path):
    p = ds.PRESETS["small"]
    X, y, q = _all_batches("small")
    assert X.shape == (p.n_rows, p.n_features)
    assert X.min() == 0.0 and X.max() == 1.0
    zero_cols = [c - 1 for c in p.zero_columns]
    assert not X[:, zero_cols].any()
    assert (X == 0).mean() > 0.15                          # many exact zeros
    counts = np.bincount(y.astype(int), minlength=p.n_labels)
    assert counts.argmax() == 0 and counts[0] > 0.5 * len(y) and (counts > 0).all()
    _, stats = _write(tmp_path, "s.txt", preset="small")
    assert stats["rows"] == p.n_rows and stats["queries"] == p.n_queries
    assert stats["label_counts"] == counts.tolist()
    assert stats["all_zero_queries"] > 0


def test_mq2007_pairs_close_to_the_real_fold():
    p = ds.PRESETS["mq2007"]
    pairs = zero = 0
    for blk in ds.iter_blocks("mq2007", seed=0):
        n, _, z = ds._pairs(blk, p.n_labels)
        pairs += n
        zero += z
    assert abs(pairs - 246_015) / 246_015 < 0.05
    assert 0.1 < zero / p.n_queries < 0.4


def test_pair_count_matches_brute_force():
    blk = next(ds.iter_blocks("small", batch_rows=400))
    brute = 0
    start = 0
    for n in blk.sizes.tolist():
        g = blk.grade[start:start + n].astype(int)
        brute += int((g[:, None] > g[None, :]).sum())
        start += n
    assert ds._pairs(blk, 3)[0] == brute


def test_relevance_is_nonlinear_in_the_signal_features():
    """A model with the true nonlinear terms explains the grades far better than a linear one."""
    m = ds._build_model(ds.PRESETS["mq2007"], 0)
    X, y, q = _all_batches("mq2007", scale=0.5)
    s = X[:, m.signal].astype(np.float64)
    graded = np.isin(q, np.unique(q[y > 0]))
    s, y = s[graded], y[graded]

    def r2(F):
        F = np.column_stack([np.ones(len(F)), F])
        res = y - F @ np.linalg.lstsq(F, y, rcond=None)[0]
        return 1 - res.var() / y.var()

    linear = r2(s)
    truth = r2(np.column_stack([s, np.exp(-((s[:, 0] - .65) ** 2 + (s[:, 1] - .35) ** 2) / .08),
                                s[:, 2] * s[:, 3], np.sin(2 * np.pi * s[:, 4])]))
    assert truth > linear + 0.05


# --- text format -------------------------------------------------------------------------------
def test_numba_formatter_equals_python_twin():
    rng = np.random.default_rng(0)
    M = rng.integers(0, 10**6 + 1, (50, 12)).astype(np.int32)
    M[:, 3] = 0
    M[::7, 5] = 10**6
    M[1, :] = [0, 1, 9, 10, 99, 100, 999_999, 10**6, 500_000, 5, 123_456, 0]
    grade = rng.integers(0, 5, 50).astype(np.int8)
    qid = np.repeat(np.array([1, 7, 123456789012]), [20, 20, 10]).astype(np.int64)
    blk = ds.Block(M, grade, qid, 98, np.array([20, 20, 10]))
    for sparse in (False, True):
        f = ds._TextFormatter(12, sparse)
        f.chunk_rows = 7                       # several chunks
        got = b"".join(bytes(c) for c in f.chunks(blk))
        assert got == ds.format_rows_py(M, grade, qid, 98, sparse=sparse)
    line = ds.format_rows_py(M[1:2], grade[1:2], qid[1:2], 5).decode()
    assert " 1:0.000000 2:0.000001 3:0.000009 4:0.000010 5:0.000099 6:0.000100 7:0.999999 " \
           "8:1.000000 9:0.500000 10:0.000005 11:0.123456 12:0.000000 #docid = synth-5\n" in line


def test_text_parses_to_the_generated_arrays(tmp_path):
    p = ds.PRESETS["small"]
    X, y, q = _all_batches("small", seed=2)
    for sparse in (False, True):
        data, _ = _write(tmp_path, f"t{sparse}.txt", preset="small", seed=2, sparse=sparse)
        Xt, yt, qt, rows = _parse_text(data, p.n_features)
        np.testing.assert_array_equal(Xt, X)    # float32(float(token)) == the arrays handed out
        np.testing.assert_array_equal(yt, y)
        np.testing.assert_array_equal(qt, q)
        np.testing.assert_array_equal(rows, np.arange(len(y)))
    assert b"\r" not in data and data.endswith(b"\n")


def test_text_value_is_percent_6f_of_the_micro_units(tmp_path):
    data, _ = _write(tmp_path, "v.txt", preset="small", seed=2)
    blk = next(ds.iter_blocks("small", seed=2))
    first = data.split(b"\n", 1)[0].split(b" #")[0].split(b" ")[2:]
    assert [t.split(b":")[1].decode() for t in first] == ["%.6f" % (m / 1e6) for m in blk.M[0]]


def test_write_is_atomic_on_error(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("boom")
        yield

    monkeypatch.setattr(ds, "iter_blocks", boom)
    with pytest.raises(RuntimeError):
        ds.write_text(tmp_path / "x.txt", "small")
    assert list(tmp_path.iterdir()) == []


# --- HDF5 ----------------------------------------------------------------------------------------
def test_hdf5_equals_converted_text(tmp_path):
    h5py = pytest.importorskip("h5py")
    convert = pytest.importorskip("streamrank.io.convert")
    txt = tmp_path / "s.txt"
    ds.write_text(txt, "small", seed=5)
    direct = tmp_path / "direct.h5"
    stats = ds.write_hdf5(direct, "small", seed=5, comments=True)
    conv = tmp_path / "conv.h5"
    convert.convert([txt], conv, quiet=True)
    with h5py.File(direct, "r") as a, h5py.File(conv, "r") as b:
        for key in ("X", "y", "query_ptr", "qid", "row", "comment/data", "comment/ptr"):
            np.testing.assert_array_equal(a[key][()], b[key][()], err_msg=key)
        assert a.attrs["content_sha256"] == b.attrs["content_sha256"]
        assert a.attrs["n_rows"] == stats["rows"] and a.attrs["n_queries"] == stats["queries"]
    X, y, q = _all_batches("small", seed=5)
    with h5py.File(direct, "r") as a:
        np.testing.assert_array_equal(a["X"][()], X)


# --- parameters and CLI ---------------------------------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(preset="nope"), "preset must be one of"),
    (dict(scale=-1), "scale must be > 0; got -1"),
    (dict(scale=1e-9), "no query"),
    (dict(seed=-3), "seed must be an integer >= 0"),
    (dict(batch_rows=0), "batch_rows must be an integer >= 1"),
])
def test_bad_parameters_name_the_fix(kw, match):
    with pytest.raises(ParameterError, match=match):
        next(ds.generate_batches(**kw))


def test_cli_writes_text_and_summary(tmp_path):
    out = tmp_path / "cli.txt"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_letor.py"), "--preset", "small",
                        "--scale", "0.5", "--seed", "1", "-o", str(out)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1,500 rows, 30 queries" in r.stdout and "pairs" in r.stdout
    assert out.read_bytes() == _write(tmp_path, "api.txt", preset="small", scale=0.5, seed=1)[0]


def test_cli_error_names_the_fix(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import make_letor
    finally:
        sys.path.remove(str(ROOT / "tools"))
    with pytest.raises(SystemExit, match="scale must be > 0; got -1.0. Pass --scale 0.5"):
        make_letor.main(["--scale", "-1", "-o", str(tmp_path / "bad.txt")])
    with pytest.raises(SystemExit, match="--sparse applies to text output only"):
        make_letor.main(["--sparse", "-o", str(tmp_path / "bad.h5")])
    assert list(tmp_path.iterdir()) == []


def test_parts_share_the_relevance_model_but_not_the_queries():
    """train / valid / test: other queries, same features-to-relevance model (so a model learnt
    on one part ranks the others well), and part 0 is the data set generated without parts."""
    from streamrank import RankSVM
    from streamrank.evaluation.metrics import evaluate

    def arrays(**kw):
        X, y, q = zip(*ds.generate_batches("small", seed=0, **kw))
        return np.vstack(X), np.concatenate(y), np.concatenate(q)

    base = arrays()
    tr = arrays(part="train")
    assert all(np.array_equal(a, b) for a, b in zip(base, tr))
    te = arrays(part="test")
    assert te[2].min() > 1_000_000 and not np.array_equal(te[0][:50], tr[0][:50])
    model = RankSVM(C=1.0).fit(*tr)
    qp = np.concatenate(([0], np.flatnonzero(te[2][1:] != te[2][:-1]) + 1, [len(te[2])]))
    acc = evaluate(te[1], model.predict(te[0]), qp).means["pairwise_accuracy"]
    assert acc > 0.75  # another seed's model (a different relevance function) would be near 0.5
