"""streamrank.load_ranking: X, y and one query id PER ROW from a dataset or LETOR/SVMlight text,
checked against the project's own readers (Dataset.read, the converter), scikit-learn's
load_svmlight_file(query_id=True), and the memory budget; the per-query / per-row names of a
Dataset; the estimator's message for a per-query qid."""

import bz2
import gzip
import warnings

import numpy as np
import pytest

import streamrank
from streamrank.errors import InputError, ParameterError
from streamrank.io.budget import STREAM_SLACK, resident_bytes
from streamrank.io.convert import convert
from streamrank.io.load import text_plan
from streamrank.synthetic import write_hdf5, write_text


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("load")
    write_hdf5(d / "train.h5", "small", seed=5, scale=0.1)
    write_text(d / "train.txt", "small", seed=5, scale=0.1)
    raw = (d / "train.txt").read_bytes()
    (d / "train.txt.gz").write_bytes(gzip.compress(raw))
    (d / "train.txt.bz2").write_bytes(bz2.compress(raw))
    return d


def per_row(ds):
    """The oracle: each query's id repeated over its rows, by the index as stored."""
    return np.repeat(ds.query_ids, np.diff(ds.query_ptr))


def test_a_dataset_reads_as_dataset_read_gives_it(files):
    X, y, qid = streamrank.load_ranking(files / "train.h5")
    with streamrank.open_dataset(files / "train.h5") as ds:
        X0, y0 = ds.read(0, ds.n_rows)
        assert qid.shape == (ds.n_rows,) and X.shape == (ds.n_rows, ds.n_features)
        assert ds.n_queries < ds.n_rows  # per row, not per query
        assert np.array_equal(qid, per_row(ds)) and qid.dtype == np.int64
        assert np.array_equal(ds.row_query_ids(), qid)
        assert np.array_equal(ds.row_query_ids(17, 95), qid[17:95])
        assert np.array_equal(ds.query_sizes, np.diff(ds.query_ptr))
        assert ds.query_ids.shape == (ds.n_queries,)
        # a Dataset given as such, narrowed and cast
        Xs, ys, qs = streamrank.load_ranking(ds, features=[3, 1, 20], dtype=np.float64)
    assert X.dtype == y.dtype == np.float32
    assert np.array_equal(X, X0) and np.array_equal(y, y0)
    assert Xs.dtype == ys.dtype == np.float64
    assert np.array_equal(Xs, X0[:, [2, 0, 19]].astype(np.float64))
    assert np.array_equal(ys, y0) and np.array_equal(qs, qid)
    # the same subset spelled as the estimators' features take it
    assert np.array_equal(streamrank.load_ranking(files / "train.h5", features="3,1,20")[0], X0[:, [2, 0, 19]])


@pytest.mark.parametrize("name", ["train.txt", "train.txt.gz", "train.txt.bz2"])
def test_text_reads_as_scikit_learn_and_the_converter_read_it(files, name, tmp_path):
    from sklearn.datasets import load_svmlight_file
    X, y, qid = streamrank.load_ranking(files / name)
    Xs, ys, qs = load_svmlight_file(str(files / name), query_id=True, dtype=np.float32, zero_based=False)
    assert np.array_equal(X, Xs.toarray()) and np.array_equal(y, ys) and np.array_equal(qid, qs)
    assert qid.shape == (X.shape[0],)
    # the converter's dataset of the same text (its queries are contiguous: the same row order)
    convert([files / name], tmp_path / "c.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "c.h5") as ds:
        X0, y0 = ds.read(0, ds.n_rows)
        assert np.array_equal(X, X0) and np.array_equal(y, y0) and np.array_equal(qid, per_row(ds))
    # and the generator's dataset of these values
    Xh, yh, qh = streamrank.load_ranking(files / "train.h5")
    assert np.array_equal(X, Xh) and np.array_equal(y, yh) and np.array_equal(qid, qh)


def test_text_keeps_its_line_order_and_fit_groups_it(tmp_path):
    """Queries not contiguous in the text: rows come in line order (as scikit-learn's), each with its
    own query's id, and fit on them equals fit on the converted dataset, which groups them."""
    from sklearn.datasets import load_svmlight_file
    rng = np.random.default_rng(0)
    lines = []
    for i in range(60):
        q = [4, 9, 2][i % 3]
        feats = " ".join(f"{j + 1}:{rng.normal():.6f}" for j in range(5))
        lines.append(f"{rng.integers(0, 3)} qid:{q} {feats}")
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    X, y, qid = streamrank.load_ranking(tmp_path / "t.txt")
    Xs, ys, qs = load_svmlight_file(str(tmp_path / "t.txt"), query_id=True, dtype=np.float32, zero_based=False)
    assert np.array_equal(X, Xs.toarray()) and np.array_equal(y, ys) and np.array_equal(qid, qs)
    assert qid[:4].tolist() == [4, 9, 2, 4]
    a = streamrank.RankSVM(tol=1e-8).fit(X, y, qid=qid)
    b = streamrank.RankSVM(tol=1e-8).fit(str(tmp_path / "t.txt"))
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-6, atol=1e-9)


def test_chunks_of_other_widths_and_id_kinds_join_as_the_converter_writes_them(tmp_path, monkeypatch):
    """Tiny text chunks: a later row wider than the first ones (earlier rows get 0 there) and ids
    that are integers in one chunk and text in another (every id is then its text)."""
    import streamrank.io.text_source as text_source
    lines = ["1 qid:7 1:0.5 2:1.25", "0 qid:7 2:-3", "2 qid:007 1:1 4:2.5 # d", "0 qid:007 3:1e-3",
             "1 qid:abc 6:7", "0 qid:abc 1:0.1", "1 qid:12 2:2"]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text_source, "DEFAULT_CHUNK_BYTES", 24)  # about a line a chunk
    X, y, qid = streamrank.load_ranking(tmp_path / "t.txt")
    assert X.shape == (7, 6) and qid.dtype == object
    assert qid.tolist() == ["7", "7", "007", "007", "abc", "abc", "12"]
    assert X[4].tolist() == [0, 0, 0, 0, 0, 7] and X[2].tolist() == [1, 0, 0, 2.5, 0, 0]
    convert([tmp_path / "t.txt"], tmp_path / "t.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "t.h5") as ds:
        X0, y0 = ds.read(0, ds.n_rows)
        order = np.argsort(ds.row)  # the dataset's rows back in line order
        assert np.array_equal(X, X0[order]) and np.array_equal(y, y0[order])
        assert ds.row_query_ids()[order].tolist() == qid.tolist()
        Xd, _, qd = streamrank.load_ranking(ds)
        assert np.array_equal(Xd, X0) and qd.tolist() == ds.row_query_ids().tolist()
    Xs, _, _ = streamrank.load_ranking(tmp_path / "t.txt", features=[6, 1])
    assert np.array_equal(Xs, X[:, [5, 0]])


def test_group_sizes_give_the_rows_their_queries(tmp_path):
    (tmp_path / "t.txt").write_text("1 1:1 2:2\n0 1:3\n2 2:1\n0 1:5 2:5\n1 2:0.5\n")
    (tmp_path / "t.query").write_text("2\n3\n")
    X, y, qid = streamrank.load_ranking(tmp_path / "t.txt", query_file=tmp_path / "t.query")
    assert qid.tolist() == [0, 0, 1, 1, 1] and y.tolist() == [1, 0, 2, 0, 1] and X.shape == (5, 2)
    (tmp_path / "t.txt.query").write_text("2\n3\n")  # beside it, LightGBM's way: taken by default
    assert streamrank.load_ranking(tmp_path / "t.txt")[2].tolist() == [0, 0, 1, 1, 1]
    (tmp_path / "t.txt.query").unlink()
    with pytest.raises(InputError, match=r"t.txt:1: missing 'qid:' .*use query_file=F with the group sizes"):
        streamrank.load_ranking(tmp_path / "t.txt")
    (tmp_path / "bad.query").write_text("2\n2\n")
    with pytest.raises(InputError, match=r"bad.query: the group sizes add up to 4 rows but .*t.txt has more"):
        streamrank.load_ranking(tmp_path / "t.txt", query_file=tmp_path / "bad.query")


def test_fit_in_one_line_from_a_file(files):
    a = streamrank.RankSVM(tol=1e-8).fit(*streamrank.load_ranking(files / "train.h5"))
    b = streamrank.RankSVM(tol=1e-8).fit(str(files / "train.h5"))
    assert np.array_equal(a.coef_, b.coef_)
    X, y, qid = streamrank.load_ranking(files / "train.txt.gz")
    assert np.array_equal(streamrank.RankSVM(tol=1e-8).fit(X, y, qid=qid).coef_, b.coef_)


def test_refusals_name_the_file_and_the_fix(files, tmp_path):
    with pytest.raises(ParameterError, match=r"train.h5: memory_budget 1.0 MB is below the .* this process holds "
                                             r"before reading a row; its 300 rows of 20 features .*"
                                             r"Use memory_budget=\d+MB"):
        streamrank.load_ranking(files / "train.h5", memory_budget="1MB")
    with pytest.raises(ParameterError, match=r"train.txt.gz: memory_budget 1.0 MB is below .* before reading a row; "
                                             r"parsing text takes .* at a time"):
        streamrank.load_ranking(files / "train.txt.gz", memory_budget="1MB")
    with pytest.raises(ParameterError, match=r"features: id 21 is beyond the 20 features of .*train.h5"):
        streamrank.load_ranking(files / "train.h5", features=[1, 21])
    with pytest.raises(ParameterError, match=r"features '3,x': feature ids are integers .*use features=3,7,12"):
        streamrank.load_ranking(files / "train.h5", features="3,x")
    with pytest.raises(ParameterError, match=r"ids are 1-based, as in the data; got 0"):
        streamrank.load_ranking(files / "train.h5", features=[0, 1])
    with pytest.raises(ParameterError, match=r"load_ranking takes feature ids .*RankSVM\(features='gas.h5:5'\)"):
        streamrank.load_ranking(files / "train.h5", features="gas.h5:5")
    with pytest.raises(ParameterError, match=r"dtype must be numpy.float32 or numpy.float64 .*got <class 'numpy.int64'>"):
        streamrank.load_ranking(files / "train.h5", dtype=np.int64)
    with pytest.raises(ParameterError, match=r"dtype must be numpy.float32 or numpy.float64 .*got 'float16'"):
        streamrank.load_ranking(files / "train.h5", dtype="float16")
    with pytest.raises(ParameterError, match=r"train.h5 is a dataset, .*query_file applies to LETOR/SVMlight text"):
        streamrank.load_ranking(files / "train.h5", query_file=files / "train.txt")
    with pytest.raises(ParameterError, match=r"data must be a path .* or a Dataset; got ndarray"):
        streamrank.load_ranking(np.zeros((3, 2)))
    with pytest.raises(InputError, match=r"nothing.h5: no such file"):
        streamrank.load_ranking(tmp_path / "nothing.h5")


@pytest.fixture(scope="module")
def larger(tmp_path_factory):
    """About 8 MB of rows (87,000 x 20 features, float32, with labels and ids), as a dataset and as text."""
    d = tmp_path_factory.mktemp("larger")
    write_hdf5(d / "big.h5", "small", seed=1, scale=29)
    write_text(d / "big.txt", "small", seed=1, scale=29)
    return d


@pytest.mark.parametrize("name", ["big.h5", "big.txt"])
def test_rows_beyond_the_budget_are_refused_and_the_budget_it_names_reads_them(larger, name):
    with streamrank.open_dataset(larger / "big.h5") as ds:
        held = ds.n_rows * (4 * ds.n_features + 4 + 8)
    resident = resident_bytes()
    # what the process holds, and half the arrays: refused (the text as soon as its rows pass it)
    if name.endswith(".txt"):  # and a chunk of text with its parse
        resident += text_plan(larger / name)[1]
    budget = resident + STREAM_SLACK + held // 2
    with pytest.raises(ParameterError, match=rf"{name}: its (first )?[\d,]+ rows (.* )?of 20 features take "
                                             rf".* more than memory_budget .* Use memory_budget=(\d+)MB") as err:
        streamrank.load_ranking(larger / name, memory_budget=budget)
    assert "RankSVM().fit(" in str(err.value)
    import re
    suggested = int(re.search(r"memory_budget=(\d+)MB", str(err.value)).group(1)) * 10**6
    if name.endswith(".txt"):  # refused part way, with the whole file's estimate
        assert "(about, for the whole file)" in str(err.value)
    X, y, qid = streamrank.load_ranking(larger / name, memory_budget=suggested + (16 << 20))
    assert X.shape[0] == qid.shape[0] == y.shape[0] and X.nbytes + y.nbytes + qid.nbytes == held


def test_per_query_and_per_row_names(files):
    with streamrank.open_dataset(files / "train.h5") as ds:
        with pytest.warns(DeprecationWarning, match=r"Dataset.qid is deprecated: it holds one id per query \(6 here\), "
                                                    r"not one per row .* Dataset.query_ids .* "
                                                    r"streamrank.load_ranking"):
            old = ds.qid
        assert np.array_equal(old, ds.query_ids)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ds.query_ids, ds.query_sizes, ds.row_query_ids(), ds.query_ptr  # the new names warn of nothing
        with pytest.raises(IndexError, match=r"rows 5:400 lie outside its 300 rows"):
            ds.row_query_ids(5, 400)


def test_a_per_query_qid_is_named_as_such_in_fit(files):
    X, y, _ = streamrank.load_ranking(files / "train.h5")
    with streamrank.open_dataset(files / "train.h5") as ds:
        ids, ptr, sizes = ds.query_ids, ds.query_ptr, ds.query_sizes
    n = len(y)
    with pytest.raises(ParameterError, match=rf"qid must give one query id per row of X \({n}\); got shape \(6,\): 6 "
                                             rf"distinct ids for {n} rows, one per query \(as Dataset.query_ids holds "
                                             rf"them\), not one per row. Per row: "
                                             rf"np.repeat\(query_ids, query_sizes\).* X, y, qid = "
                                             rf"streamrank.load_ranking\(path\)"):
        streamrank.RankSVM().fit(X, y, qid=ids)
    with pytest.raises(ParameterError, match=rf"7 values from 0 to {n} are the row offsets of 6 queries \(query_ptr\)"):
        streamrank.RankSVM().fit(X, y, ptr)
    with pytest.raises(ParameterError, match=rf"6 values that add up to the {n} rows: if they are the sizes of 6 "
                                             rf"queries \(query_sizes, LightGBM's group\)"):
        streamrank.RankSVM().fit(X, y, qid=sizes)
    with pytest.raises(ParameterError, match=r"got shape \(6,\): 6 distinct ids .* one per query"):
        streamrank.RankSVM().fit(X, y, qid=ids.astype(str))
    # the fix it names
    streamrank.RankSVM().fit(X, y, qid=np.repeat(ids, sizes))


def test_mq2008_fold1_reads_as_scikit_learn_reads_it_and_fits_in_one_line(mq2008, tmp_path):
    """The issue's case: MQ2008 Fold1's 9,630 training rows in 471 queries."""
    from sklearn.datasets import load_svmlight_file
    path = mq2008 / "Fold1" / "train.txt.gz"
    X, y, qid = streamrank.load_ranking(path)
    Xs, ys, qs = load_svmlight_file(str(path), query_id=True, dtype=np.float32, zero_based=False)
    assert X.shape == (9630, 46) and np.unique(qid).size == 471
    assert np.array_equal(X, Xs.toarray()) and np.array_equal(y, ys) and np.array_equal(qid, qs)
    convert([path], tmp_path / "mq.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "mq.h5") as ds:
        with pytest.raises(ParameterError, match=r"qid must give one query id per row of X \(9630\); got shape "
                                                 r"\(471,\): 471 distinct ids for 9630 rows, one per query"):
            streamrank.RankSVM().fit(X, y, qid=ds.query_ids)
        assert np.array_equal(ds.row_query_ids(), qid)  # its queries are contiguous in the text
    streamrank.RankSVM(max_iter=3).fit(*streamrank.load_ranking(tmp_path / "mq.h5"))
