"""Text as other programs write it (the text decoder, DESIGN.md "Guarantees"): every encoding of the
same rows -- LF, CRLF or CR-only line ends, a UTF-8 byte-order mark, gzip, bzip2 or xz, latin-1
bytes in comments, with or without a last line end -- converts to the same dataset fingerprint as
plain LF text (a differential property); scikit-learn's ``dump_svmlight_file(..., query_id=...)``
(zero-based by default) converts to its rows with ``--zero-based`` and, where an index 0 is
written, is refused without it with the ``--zero-based`` hint; LightGBM's data file with its
``.query`` beside it converts to its groups. Every run also ends as every case must (prop_checker)."""

import bz2
import gzip
import lzma

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit

PACK = {"plain": bytes, "gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}
ENDS = {"LF": b"\n", "CRLF": b"\r\n", "CR": b"\r"}


@st.composite
def table(draw, max_rows=12, max_d=5):
    """Rows of a ranking table: labels, per-row query ids in groups, float32-exact values."""
    d = draw(st.integers(1, max_d))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    n = min(sum(sizes), max_rows)
    qids = np.repeat(draw(st.lists(st.integers(0, 10**6), min_size=len(sizes), max_size=len(sizes), unique=True)),
                     sizes)[:n]
    y = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
    values = st.sampled_from([0.0, 0.0, 1.0, -2.5, 0.125, 3.0e-3, 1.5e10, 7.0])
    X = np.array(draw(st.lists(st.lists(values, min_size=d, max_size=d), min_size=n, max_size=n)), np.float32)
    return X, y, qids


def letor_lines(X, y, qids, comments, with_qid=True):
    """One LETOR line (bytes, no line end) per row; ``comments``: the bytes after '#', or None."""
    out = []
    for i in range(len(y)):
        feats = " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(X[i]) if v != 0)
        head = f"{y[i]} qid:{qids[i]}" if with_qid else f"{y[i]}"
        line = (head + (" " + feats if feats else "")).encode()
        out.append(line + (b" #" + comments[i] if comments[i] is not None else b""))
    return out


def encode(lines, end, bom, pack, final):
    text = ENDS[end].join(lines) + (ENDS[end] if final else b"")
    return PACK[pack]((b"\xef\xbb\xbf" if bom else b"") + text)


def fingerprint(path):
    import streamrank
    with streamrank.open_dataset(path) as ds:
        return ds.fingerprint, ds.n_rows, ds.query_ptr.tolist()


@st.composite
def encoding(draw):
    return {"end": draw(st.sampled_from(list(ENDS))), "bom": draw(st.booleans()),
            "pack": draw(st.sampled_from(list(PACK))), "final": draw(st.booleans()),
            "latin1": draw(st.booleans()), "blank": draw(st.booleans())}


def kinds_of(enc):
    kinds = [f"text: {enc['end']} line ends", f"text: {enc['pack']}"]
    kinds += ["text: UTF-8 byte-order mark"] if enc["bom"] else []
    kinds += ["text: latin-1 bytes in comments"] if enc["latin1"] else []
    return kinds


@kit.examples(6)
@given(data=st.data())
def test_every_encoding_of_the_rows_converts_to_one_fingerprint(prop_env, data):
    draw = data.draw
    X, y, qids = draw(table())
    enc = draw(encoding())
    comment = (lambda i: b"doc \xe9\xe8 " + str(i).encode()) if enc["latin1"] else (lambda i: f"doc {i}".encode())
    comments = [comment(i) if draw(st.booleans()) else None for i in range(len(y))]
    lines = letor_lines(X, y, qids, comments)
    if enc["blank"]:  # a comment line and a blank line between rows
        k = draw(st.integers(0, len(lines)))
        lines[k:k] = [b"# a comment \xff", b"  "]
    note(f"{enc}; rows {len(y)}")
    with prop_env.workspace() as (i, o, c):
        ref = i / "ref.txt"
        ref.write_bytes(b"\n".join(letor_lines(X, y, qids, [None] * len(y))) + b"\n")
        src = i / "data"
        src.write_bytes(encode(lines, enc["end"], enc["bom"], enc["pack"], enc["final"]))
        assert pc.run_cli(["convert", ref, "-o", o / "ref.h5", "--quiet"]).rc == 0
        argv = ["convert", src, "-o", o / "d.h5", "--quiet"]
        case = pc.Case("convert", kinds_of(enc), argv, inputs=[src, ref], outputs=[o / "d.h5", o / "ref.h5"])
        res = pc.run_cli(argv)
        pc.check(case, res)
        if res.rc != 0:
            pc._fail(case, res, "an encoding of valid rows was refused")
        if fingerprint(o / "d.h5") != fingerprint(o / "ref.h5"):
            pc._fail(case, res, f"another dataset than plain LF text's: {fingerprint(o / 'd.h5')} != "
                                f"{fingerprint(o / 'ref.h5')}")


@kit.examples(5)
@given(data=st.data())
def test_scikit_learn_svmlight_files_convert_to_their_rows(prop_env, data):
    from sklearn.datasets import dump_svmlight_file
    draw = data.draw
    X, y, qids = draw(table())
    zero_based = draw(st.sampled_from([True, True, False]))  # scikit-learn's default is True
    flag = draw(st.booleans()) if zero_based else False
    header = draw(st.sampled_from([None, "made by a test", "two\nlines"]))
    note(f"zero_based={zero_based} --zero-based={flag} header={header!r}")
    with prop_env.workspace() as (i, o, c):
        src = i / "sk.svmlight"
        dump_svmlight_file(X.astype(np.float64), y, str(src), zero_based=zero_based, query_id=qids,
                           **({"comment": header} if header else {}))
        argv = ["convert", src, "-o", o / "d.h5", "--quiet"] + (["--zero-based"] if flag else [])
        index0 = zero_based and bool((X[:, 0] != 0).any())
        case = pc.Case("convert", ["writer: scikit-learn dump_svmlight_file"], argv, inputs=[src],
                       outputs=[o / "d.h5"], must_refuse="index 0 in one-based mode" if index0 and not flag else "")
        res = pc.run_cli(argv)
        pc.check(case, res)
        if res.rc == 2:
            if not (index0 and not flag) or "--zero-based" not in res.err:
                pc._fail(case, res, "refused, and not as an index 0 read one-based with the --zero-based hint")
            return
        if zero_based and not flag:
            return  # no index 0 written: one-based reading shifts the columns (the format cannot tell)
        import streamrank
        with streamrank.open_dataset(o / "d.h5") as ds:
            Xr, yr = ds.read(0, ds.n_rows)
            order = np.asarray(ds.row)
            width = Xr.shape[1]
            ok = (np.array_equal(Xr, X[order, :width]) and not X[:, width:].any() and np.array_equal(yr, y[order])
                  and np.array_equal(np.asarray(ds.row_query_ids()), qids[order]))
        if not ok:
            pc._fail(case, res, "the converted rows are not scikit-learn's")


@kit.examples(6)
@given(data=st.data())
def test_lightgbm_data_with_its_query_file_converts_to_its_groups(prop_env, data):
    draw = data.draw
    X, y, qids = draw(table())
    enc = draw(encoding())
    sizes = np.diff(np.flatnonzero(np.r_[True, qids[1:] != qids[:-1], True])).tolist()
    note(f"{enc}; groups {sizes}")
    with prop_env.workspace() as (i, o, c):
        src = i / "rank.train"
        src.write_bytes(encode(letor_lines(X, y, qids, [None] * len(y), with_qid=False), enc["end"], enc["bom"],
                               enc["pack"], enc["final"]))
        (i / "rank.train.query").write_bytes(encode([str(s).encode() for s in sizes], enc["end"], enc["bom"],
                                                    "plain", True))
        argv = ["convert", src, "-o", o / "d.h5", "--quiet"]
        case = pc.Case("convert", ["writer: LightGBM data + .query"] + kinds_of(enc), argv,
                       inputs=[src, i / "rank.train.query"], outputs=[o / "d.h5"])
        res = pc.run_cli(argv)
        pc.check(case, res)
        if res.rc != 0:
            pc._fail(case, res, "LightGBM's layout was refused")
        got = fingerprint(o / "d.h5")
        if got[2] != np.cumsum([0] + sizes).tolist():
            pc._fail(case, res, f"query_ptr {got[2]} is not the .query file's groups {sizes}")
