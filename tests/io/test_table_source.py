"""Parquet and Arrow inputs (streamrank.io.table_source): the same dataset as the equivalent text,
whatever the layout a table writer chose (Spark-like parts, hive folders, row groups, a vector
column, Spark ML's VectorUDT), and one plain line for what cannot be read."""

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow (the parquet extra) is not installed")
import pyarrow.parquet as pq  # noqa: E402

from streamrank.cli import main  # noqa: E402
from streamrank.errors import InputError  # noqa: E402
from streamrank.io.convert import convert  # noqa: E402
from streamrank.io.dataset import open_dataset  # noqa: E402
from streamrank.io.load import load_ranking  # noqa: E402


def _rows(seed=0, n_q=7, d=5):
    """X, y, qid of queries of 1-9 rows, values with float32's rounding visible."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, n_q)
    qid = np.repeat(rng.permutation(np.arange(100, 100 + 3 * n_q, 3))[:n_q], sizes)
    X = rng.normal(size=(len(qid), d)) * 10.0 ** rng.integers(-3, 4, size=(len(qid), d))
    X[rng.random(X.shape) < 0.3] = 0.0
    y = rng.integers(0, 3, len(qid)).astype(float)
    return X, y, qid


def _text(path, X, y, qid):
    with open(path, "w") as fh:
        for r in range(len(y)):
            feats = " ".join(f"{j + 1}:{float(X[r, j])!r}" for j in range(X.shape[1]) if X[r, j] != 0)
            fh.write(f"{int(y[r])} qid:{qid[r]} {feats}\n")
    return path


def _table(X, y, qid, *, names=None, vector=None):
    cols = {"relevance": pa.array(y), "query": pa.array(qid, pa.int64())}
    names = names or [f"f{j + 1}" for j in range(X.shape[1])]
    if vector == "list":
        cols["features"] = pa.array([list(r) for r in X], pa.list_(pa.float64()))
    elif vector == "udt":
        items = []
        for k, r in enumerate(X):
            nz = np.flatnonzero(r)
            items.append({"type": 1, "size": None, "indices": None, "values": list(r)} if k % 2 else
                         {"type": 0, "size": X.shape[1], "indices": nz.tolist(), "values": r[nz].tolist()})
        t = pa.struct([("type", pa.int8()), ("size", pa.int32()), ("indices", pa.list_(pa.int32())),
                       ("values", pa.list_(pa.float64()))])
        cols["features"] = pa.array(items, t)
    else:
        for j, n in enumerate(names):
            cols[n] = pa.array(X[:, j])
    cols["doc"] = pa.array([f"d{r}" for r in range(len(y))])  # text: never a feature
    return pa.table(cols)


def _spark_like(root, table, cuts, *, row_group=3):
    """Parts in hive folders (``day=...``), the rows cut at ``cuts`` so that queries span parts,
    each part in small row groups, Spark's _SUCCESS and a .crc file beside them."""
    bounds = [0, *cuts, table.num_rows]
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        d = root / f"day=2024-01-0{1 + k // 2}"
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(a, b - a), d / f"part-{k:05d}-abc.snappy.parquet", row_group_size=row_group)
        (d / f".part-{k:05d}-abc.snappy.parquet.crc").write_bytes(b"crc")
    (root / "_SUCCESS").write_bytes(b"")
    return root


def _dataset(path):
    with open_dataset(path) as ds:
        return ds.fingerprint, ds.n_rows, ds.n_queries, ds.n_features


@pytest.mark.parametrize("vector", [None, "list", "udt"])
def test_spark_like_parquet_converts_to_the_text_dataset(tmp_path, vector):
    X, y, qid = _rows()
    ref = tmp_path / "ref.h5"
    convert([_text(tmp_path / "t.txt", X, y, qid)], ref, quiet=True, keep_comments=False)
    src = _spark_like(tmp_path / "parts", _table(X, y, qid, vector=vector), cuts=[5, 11, 23])
    out = tmp_path / "p.h5"
    stats = convert([src], out, quiet=True, label_column="relevance", qid_column="query",
                    feature_columns="features" if vector else "f1:f5")
    assert _dataset(out) == _dataset(ref)
    assert stats["rows"] == len(y) and stats["regrouped"] is False
    # load_ranking gives the rows in the text's order
    X2, y2, q2 = load_ranking(src, label_column="relevance", qid_column="query",
                              feature_columns="features" if vector else None)
    X1, y1, q1 = load_ranking(tmp_path / "t.txt")
    assert np.array_equal(X2, X1) and np.array_equal(y2, y1) and np.array_equal(q2, q1)


def test_queries_scattered_over_parts_are_regrouped_as_text_queries_are(tmp_path):
    X, y, qid = _rows(seed=3)
    order = np.random.default_rng(1).permutation(len(y))  # every query scattered
    X, y, qid = X[order], y[order], qid[order]
    ref = tmp_path / "ref.h5"
    convert([_text(tmp_path / "t.txt", X, y, qid)], ref, quiet=True, keep_comments=False)
    src = _spark_like(tmp_path / "parts", _table(X, y, qid), cuts=[4, 9])
    out = tmp_path / "p.h5"
    assert main(["convert", str(src), "-o", str(out), "--label-column", "relevance", "--qid-column", "query",
                 "--quiet"]) == 0
    assert _dataset(out) == _dataset(ref)
    with open_dataset(out) as a, open_dataset(ref) as b:
        assert np.array_equal(a.row, b.row)


def test_arrow_ipc_and_one_parquet_file(tmp_path):
    X, y, qid = _rows(seed=5)
    ref = tmp_path / "ref.h5"
    convert([_text(tmp_path / "t.txt", X, y, qid)], ref, quiet=True, keep_comments=False)
    t = _table(X, y, qid)
    with pa.ipc.new_file(tmp_path / "t.arrow", t.schema) as w:
        w.write_table(t, max_chunksize=4)
    pq.write_table(t, tmp_path / "t.parquet", row_group_size=5)
    for f in ("t.arrow", "t.parquet"):
        out = tmp_path / f"{f}.h5"
        convert(tmp_path / f, out, quiet=True, label_column="relevance", qid_column="query")
        assert _dataset(out) == _dataset(ref), f


@pytest.mark.parametrize("case, message", [
    ("null label", r"p\.parquet: row 3, column 'relevance': the value is missing \(null\)"),
    ("nan feature", r"p\.parquet: row 2, column 'f2': nan is not a finite float32 number"),
    ("past float32", r"p\.parquet: row 1, column 'f1': 1e\+39 is not a finite float32 number"),
    ("no qid column", r"p\.parquet: no column 'query' .*name the query id column with qid_column=NAME"),
    ("text feature", r"feature column 'doc' holds string, not numbers"),
    ("ragged vectors", r"row 2, column 'features': a vector of 3 values where the rows before have 2"),
])
def test_what_cannot_be_read_is_one_line_naming_file_row_and_column(tmp_path, capsys, case, message):
    y = [1.0, 0.0, 2.0]
    cols = {"relevance": pa.array(y), "query": pa.array([1, 1, 2]), "f1": pa.array([1.0, 2.0, 3.0]),
            "f2": pa.array([0.5, 0.5, 0.5]), "doc": pa.array(["a", "b", "c"])}
    args = []
    if case == "null label":
        cols["relevance"] = pa.array([1.0, 0.0, None])
    elif case == "nan feature":
        cols["f2"] = pa.array([0.5, float("nan"), 0.5])
    elif case == "past float32":
        cols["f1"] = pa.array([1e39, 2.0, 3.0])
    elif case == "no qid column":
        cols.pop("query")
        cols["qid2"] = pa.array([1, 1, 2])
    elif case == "text feature":
        args = ["--feature-columns", "f1,doc"]
    elif case == "ragged vectors":
        cols["features"] = pa.array([[1.0, 2.0], [1.0, 2.0, 3.0], [1.0, 2.0]])
        args = ["--feature-columns", "features"]
    pq.write_table(pa.table(cols), tmp_path / "p.parquet")
    out = tmp_path / "p.h5"
    code = main(["convert", str(tmp_path / "p.parquet"), "-o", str(out), "--label-column", "relevance",
                 "--qid-column", "query", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    import re
    assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.parquet"]


def test_text_ids_and_string_query_ids(tmp_path):
    X, y, qid = _rows(seed=7)
    t = _table(X, y, qid).set_column(1, "query", pa.array([str(q) for q in qid]))
    pq.write_table(t, tmp_path / "s.parquet")
    ref = tmp_path / "ref.h5"
    convert([_text(tmp_path / "t.txt", X, y, qid)], ref, quiet=True, keep_comments=False)
    convert(tmp_path / "s.parquet", tmp_path / "s.h5", quiet=True, label_column="relevance", qid_column="query")
    assert _dataset(tmp_path / "s.h5") == _dataset(ref)  # canonical integers in text are integers
    t2 = t.set_column(1, "query", pa.array([f"q-{q}" for q in qid]))
    pq.write_table(t2, tmp_path / "s2.parquet")
    convert(tmp_path / "s2.parquet", tmp_path / "s2.h5", quiet=True, label_column="relevance", qid_column="query")
    with open_dataset(tmp_path / "s2.h5") as ds:
        assert ds.n_queries == len(set(qid.tolist())) and ds.n_rows == len(y)


def test_column_settings_are_refused_for_text(tmp_path):
    X, y, qid = _rows()
    from streamrank.errors import ParameterError
    with pytest.raises(ParameterError, match="label_column, qid_column and feature_columns apply to Parquet"):
        convert([_text(tmp_path / "t.txt", X, y, qid)], tmp_path / "o.h5", quiet=True, label_column="y")
    with pytest.raises(InputError, match="no Parquet or Arrow files"):
        from streamrank.io.table_source import TableSource
        (tmp_path / "empty").mkdir()
        TableSource(tmp_path / "empty")


def test_a_row_group_past_the_budget_and_a_missing_pyarrow_are_one_line(tmp_path, capsys, monkeypatch):
    X, y, qid = _rows(seed=2, n_q=40, d=5)
    pq.write_table(_table(X, y, qid), tmp_path / "p.parquet", row_group_size=len(y))
    from streamrank.io.table_source import Columns, TableSource
    with pytest.raises(InputError, match=r"p\.parquet: row group 0 holds .* more than the 100 B memory_budget leaves"):
        TableSource(tmp_path / "p.parquet", Columns("relevance", "query"), room=100)
    # a training given a table is told to convert it, not fed its bytes as text
    code = main(["train", str(tmp_path / "p.parquet"), "-o", str(tmp_path / "m.h5"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "p.parquet is Parquet: convert it into a dataset first" in err
    import builtins
    real = builtins.__import__

    def no_pyarrow(name, *a, **k):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    code = main(["convert", str(tmp_path / "p.parquet"), "-o", str(tmp_path / "o.h5"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "reading Parquet or Arrow needs pyarrow: pip install 'streamrank[parquet]'" in err


def test_glob_patterns_name_parts_and_text_files_in_lexicographic_order(tmp_path, capsys):
    """fsspec's and the shell's globs (``*``, ``**``): the files a pattern matches, in lexicographic
    order, as convert's inputs and as load_ranking's source; a pattern that matches nothing is one
    line naming it."""
    X, y, qid = _rows(seed=5)
    ref = tmp_path / "ref.h5"
    convert([_text(tmp_path / "t.txt", X, y, qid)], ref, quiet=True, keep_comments=False)
    src = _spark_like(tmp_path / "parts", _table(X, y, qid), cuts=[6, 13, 20])
    out = tmp_path / "g.h5"
    pattern = str(src / "**" / "part-*.parquet")
    assert main(["convert", pattern, "-o", str(out), "--label-column", "relevance", "--qid-column", "query",
                 "--quiet"]) == 0
    assert _dataset(out) == _dataset(ref)
    X2, y2, _ = load_ranking(pattern, label_column="relevance", qid_column="query")
    X1, y1, _ = load_ranking(tmp_path / "t.txt")
    assert np.array_equal(X2, X1) and np.array_equal(y2, y1)
    # text: the pattern's files concatenated in name order, as if listed
    cut = 17
    _text(tmp_path / "b-2.txt", X[cut:], y[cut:], qid[cut:])
    _text(tmp_path / "b-1.txt", X[:cut], y[:cut], qid[:cut])
    listed, globbed = tmp_path / "l.h5", tmp_path / "gt.h5"
    convert([tmp_path / "b-1.txt", tmp_path / "b-2.txt"], listed, quiet=True)
    assert main(["convert", str(tmp_path / "b-*.txt"), "-o", str(globbed), "--quiet"]) == 0
    assert _dataset(globbed)[:3] == _dataset(listed)[:3]
    assert main(["convert", str(tmp_path / "nothing-*.txt"), "-o", str(tmp_path / "n.h5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing-*.txt: the pattern matches no file" in err[0]
    assert not (tmp_path / "n.h5").exists()
