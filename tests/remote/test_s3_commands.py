"""The commands with their files in a bucket: the bits of the same commands on local copies, one
line for what cannot be had, and no credential in any message."""

import io
import json

import h5py
import numpy as np
import pytest

from streamrank.cli import main
from streamrank.io.dataset import open_dataset
from streamrank.synthetic import write_text


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """train/valid/test datasets and the model and scores of the local run."""
    from streamrank.io.convert import convert
    d = tmp_path_factory.mktemp("local")
    for name, seed in (("train", 0), ("valid", 1), ("test", 2)):
        write_text(d / f"{name}.txt", preset="small", seed=seed, scale=0.3)
        convert([d / f"{name}.txt"], d / f"{name}.h5", quiet=True, chunk_bytes=8192)
    assert main(["train", str(d / "train.h5"), "--valid", str(d / "valid.h5"), "-o", str(d / "m.h5"),
                 "--method", "nystroem", "--components", "16", "--quiet"]) == 0
    assert main(["predict", str(d / "m.h5"), str(d / "test.h5"), "-o", str(d / "scores.txt")]) == 0
    return d


def _put(fs, bucket, local, *names):
    for n in names:
        fs.put_file(str(local / n), f"{bucket}/{n}")


def test_train_and_predict_in_a_bucket_give_the_local_bits(local, s3, capsys):
    fs, b = s3
    _put(fs, b, local, "train.h5", "valid.h5", "test.h5")
    assert main(["train", f"s3://{b}/train.h5", "--valid", f"s3://{b}/valid.h5", "-o", f"s3://{b}/m.h5",
                 "--method", "nystroem", "--components", "16", "--quiet"]) == 0
    with h5py.File(io.BytesIO(fs.cat_file(f"{b}/m.h5"))) as a, h5py.File(local / "m.h5") as c:
        assert np.array_equal(a["w"][:], c["w"][:])
        assert json.loads(a.attrs["config"]) == json.loads(c.attrs["config"])
    assert main(["predict", f"s3://{b}/m.h5", f"s3://{b}/test.h5", "-o", f"s3://{b}/scores.txt"]) == 0
    assert fs.cat_file(f"{b}/scores.txt") == (local / "scores.txt").read_bytes()
    assert main(["export", f"s3://{b}/m.h5", "--format", "json", "-o", f"s3://{b}/m.json"]) == 0
    assert json.loads(fs.cat_file(f"{b}/m.json"))
    assert main(["export", f"s3://{b}/m.h5", "--format", "onnx", "-o", f"s3://{b}/m.onnx"]) == 0
    assert main(["export", str(local / "m.h5"), "--format", "onnx", "-o", str(local / "m.onnx")]) == 0
    import onnx  # the same graph (the metadata names each source model's own content digest)
    a, c = onnx.load_from_string(fs.cat_file(f"{b}/m.onnx")), onnx.load(str(local / "m.onnx"))
    assert a.graph.SerializeToString() == c.graph.SerializeToString()
    # no temporary object was left beside the outputs
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(b, refresh=True)) == [
        "m.h5", "m.json", "m.onnx", "scores.txt", "test.h5", "train.h5", "valid.h5"]


def test_what_a_store_cannot_give_is_one_line(local, s3, capsys, monkeypatch):
    fs, b = s3
    _put(fs, b, local, "train.h5")
    cases = [
        (["train", f"s3://{b}/nothing.h5", "-o", f"s3://{b}/m.h5"], f"s3://{b}/nothing.h5: no such object"),
        (["train", f"s3://{b}/train.h5", "-o", "s3://no-such-bucket-x/m.h5"],
         "s3://no-such-bucket-x/m.h5: the bucket no-such-bucket-x does not exist"),
        (["train", f"s3://{b}/train.h5", "-o", f"s3://{b}/train.h5"], "would destroy the input"),
        (["predict", f"s3://{b}/train.h5", f"s3://{b}/train.h5", "-o", "-"], "not a streamrank model"),
        (["train", "nosuchproto://x/train.h5", "-o", str(local / "x.h5")], "fsspec knows no protocol 'nosuchproto'"),
    ]
    for argv, message in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, (argv, err)
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(b)) == ["train.h5"]


def test_a_url_with_credentials_is_never_shown_with_them():
    from streamrank.io.urls import shown
    assert shown("s3://AKIA:secret@bkt/k.h5") == "s3://bkt/k.h5"
    assert shown("https://h.example/a/b.h5?X-Amz-Signature=abc&X-Amz-Credential=AKIA") == "https://h.example/a/b.h5?..."
    assert shown("simplecache::s3://u:p@b/k") == "simplecache::s3://b/k"
    assert shown("/local/path.h5") == "/local/path.h5"


def test_convert_from_and_to_a_bucket_gives_the_local_dataset(tmp_path, s3, capsys):
    import gzip

    from streamrank.io.dataset import open_dataset
    fs, b = s3
    write_text(tmp_path / "t.txt", preset="small", seed=3, scale=0.3)
    (tmp_path / "t.txt.gz").write_bytes(gzip.compress((tmp_path / "t.txt").read_bytes()))
    fs.put_file(str(tmp_path / "t.txt.gz"), f"{b}/t.txt.gz")
    assert main(["convert", str(tmp_path / "t.txt.gz"), "-o", str(tmp_path / "local.h5"), "--quiet"]) == 0
    assert main(["convert", f"s3://{b}/t.txt.gz", "-o", f"s3://{b}/t.h5", "--quiet"]) == 0
    fs.get_file(f"{b}/t.h5", str(tmp_path / "back.h5"))
    with open_dataset(tmp_path / "local.h5") as a, open_dataset(tmp_path / "back.h5") as c:
        assert a.fingerprint == c.fingerprint and a.source[0]["sha256"] == c.source[0]["sha256"]
    # the text in the bucket converted to a local file too
    assert main(["convert", f"s3://{b}/t.txt.gz", "-o", str(tmp_path / "l2.h5"), "--quiet"]) == 0
    with open_dataset(tmp_path / "l2.h5") as c:
        assert c.fingerprint == a.fingerprint


def test_storage_options_on_the_command_line_reach_the_file_system(local, s3, capsys, monkeypatch):
    """--storage-option KEY=VALUE (typed, nested by dots) is what the URL is opened with: the
    endpoint given here alone finds the server; a wrong one is one line, with no credential."""
    fs, b = s3
    _put(fs, b, local, "test.h5", "m.h5")
    endpoint = __import__("os").environ.pop("AWS_ENDPOINT_URL")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    import s3fs
    s3fs.S3FileSystem.clear_instance_cache()
    argv = ["predict", f"s3://{b}/m.h5", f"s3://{b}/test.h5", "-o", str(local / "s.txt")]
    assert main(argv + ["--storage-option", f"client_kwargs.endpoint_url={endpoint}",
                        "--storage-option", "config_kwargs.read_timeout=5"]) == 0
    assert (local / "s.txt").read_bytes() == (local / "scores.txt").read_bytes()
    s3fs.S3FileSystem.clear_instance_cache()
    code = main(argv + ["--storage-option", "client_kwargs.endpoint_url=http://127.0.0.1:9",
                        "--storage-option", "config_kwargs.connect_timeout=1", "--storage-option", "retries=1",
                        "--storage-option", "secret=s3cr3t-value"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "s3cr3t-value" not in err and "Traceback" not in err, err
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)


def test_a_url_in_a_message_loses_its_credentials_on_the_command_line(capsys):
    code = main(["train", "s3://AKIAKEY:secretpart@bkt/x.h5?X-Amz-Signature=sig123", "-o", "/nonexistent-dir/m.h5"])
    err = capsys.readouterr().err
    assert code == 2 and "secretpart" not in err and "sig123" not in err and "AKIAKEY" not in err, err


def test_text_in_a_bucket_trains_as_its_local_copy_and_is_converted_once(tmp_path, s3, capsys):
    fs, b = s3
    write_text(tmp_path / "t.txt", preset="small", seed=4, scale=0.3)
    fs.put_file(str(tmp_path / "t.txt"), f"{b}/t.txt")
    cache = tmp_path / "cache"
    for out in ("a.h5", "b.h5"):
        assert main(["train", f"s3://{b}/t.txt", "-o", str(tmp_path / out), "--cache-dir", str(cache), "--quiet"]) == 0
    assert main(["train", str(tmp_path / "t.txt"), "-o", str(tmp_path / "l.h5"), "--cache-dir",
                 str(tmp_path / "c2"), "--quiet"]) == 0
    with h5py.File(tmp_path / "a.h5") as a, h5py.File(tmp_path / "l.h5") as c:
        assert np.array_equal(a["w"][:], c["w"][:])
    assert len(list(cache.glob("t.txt.*.h5"))) == 1  # converted once
    # the object written again (other rows): converted again, another model
    write_text(tmp_path / "t2.txt", preset="small", seed=5, scale=0.3)
    fs.put_file(str(tmp_path / "t2.txt"), f"{b}/t.txt")
    assert main(["train", f"s3://{b}/t.txt", "-o", str(tmp_path / "c.h5"), "--cache-dir", str(cache), "--quiet"]) == 0
    assert len(list(cache.glob("t.txt.*.h5"))) == 2


def test_a_checkpoint_in_a_bucket_resumes_a_killed_run_to_the_uninterrupted_bits(local, s3, tmp_path, capsys):
    import os
    import subprocess
    import sys

    from streamrank.state.checkpoint import ABORT_ENV, ABORT_EXIT_CODE
    fs, b = s3
    _put(fs, b, local, "train.h5", "valid.h5")
    args = ["train", f"s3://{b}/train.h5", "--valid", f"s3://{b}/valid.h5", "--C", "0.1,1", "--checkpoint",
            f"s3://{b}/ck", "-o", str(tmp_path / "m.h5"), "--quiet"]
    env = {**os.environ, ABORT_ENV: "after-iteration:4", "XDG_CACHE_HOME": str(tmp_path / "cache1")}
    r = subprocess.run([sys.executable, "-m", "streamrank", *args], capture_output=True, text=True, env=env)
    assert r.returncode == ABORT_EXIT_CODE, r.stderr
    fs.invalidate_cache()
    assert fs.exists(f"{b}/ck/checkpoint.h5") and not (tmp_path / "m.h5").exists()
    # resumed on another machine (another cache directory: nothing local survives)
    os.environ["XDG_CACHE_HOME"] = str(tmp_path / "cache2")
    try:
        assert main([*args, "--resume"]) == 0
    finally:
        del os.environ["XDG_CACHE_HOME"]
    assert main(["train", str(local / "train.h5"), "--valid", str(local / "valid.h5"), "--C", "0.1,1", "-o",
                 str(tmp_path / "ref.h5"), "--quiet"]) == 0
    with h5py.File(tmp_path / "m.h5") as a, h5py.File(tmp_path / "ref.h5") as c:
        assert np.array_equal(a["w"][:], c["w"][:])


@pytest.mark.parametrize("argv", [
    ["grid", "t.h5", "--valid", "v.h5", "-o", "s3://b/run"], ["cv", "s3://b/folds", "-o", "run"],
    ["train", "t.h5", "-o", "m.h5", "--cache-dir", "s3://b/cache"], ["report", "s3://b/run", "-o", "r.html"],
    ["select-features", "t.h5", "-k", "2", "-o", "s3://b/gas.h5"]])
def test_where_a_url_is_not_taken_yet_it_is_refused_not_made_a_local_folder(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "takes a local path here, not a URL" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_parquet_parts_in_a_bucket_convert_and_load_as_the_local_parts(tmp_path, s3):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from streamrank.io.convert import convert
    from streamrank.io.dataset import open_dataset
    from streamrank.io.load import load_ranking
    fs, b = s3
    rng = np.random.default_rng(0)
    n = 40
    t = pa.table({"label": rng.integers(0, 3, n).astype(float), "qid": np.repeat(np.arange(8), 5),
                  **{f"f{j}": rng.normal(size=n) for j in range(1, 5)}})
    for k, (a, c) in enumerate([(0, 13), (13, 29), (29, 40)]):
        d = tmp_path / "parts" / f"day={k}"
        d.mkdir(parents=True)
        pq.write_table(t.slice(a, c - a), d / f"part-{k}.parquet", row_group_size=4)
    (tmp_path / "parts" / "_SUCCESS").write_bytes(b"")
    fs.put(str(tmp_path / "parts"), f"{b}/parts", recursive=True)
    convert([tmp_path / "parts"], tmp_path / "local.h5", quiet=True)
    assert main(["convert", f"s3://{b}/parts", "-o", f"s3://{b}/t.h5", "--quiet"]) == 0
    fs.get_file(f"{b}/t.h5", str(tmp_path / "back.h5"))
    with open_dataset(tmp_path / "local.h5") as x, open_dataset(tmp_path / "back.h5") as y:
        assert x.fingerprint == y.fingerprint
    X1, y1, q1 = load_ranking(tmp_path / "parts")
    X2, y2, q2 = load_ranking(f"s3://{b}/parts")
    assert np.array_equal(X1, X2) and np.array_equal(y1, y2) and np.array_equal(q1, q2)
    X3, _, _ = load_ranking(f"s3://{b}/t.h5")
    assert X3.shape == X1.shape


def test_info_and_eval_read_from_a_bucket(local, s3, capsys):
    fs, b = s3
    _put(fs, b, local, "test.h5", "m.h5", "scores.txt")
    assert main(["info", f"s3://{b}/test.h5", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["path"] == f"s3://{b}/test.h5" and got["file_bytes"] == (local / "test.h5").stat().st_size
    assert main(["info", f"s3://{b}/m.h5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["format"].startswith("streamrank-model")
    assert main(["eval", f"s3://{b}/test.h5", f"s3://{b}/scores.txt", "--json"]) == 0
    remote = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["eval", str(local / "test.h5"), str(local / "scores.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == remote


def test_feature_lists_and_names_are_read_from_a_bucket(local, s3, tmp_path):
    fs, b = s3
    _put(fs, b, local, "train.h5")
    fs.pipe(f"{b}/ids.txt", b"\xef\xbb\xbf3\n7\n12\n")  # with a byte-order mark, as Notepad saves it
    assert main(["train", f"s3://{b}/train.h5", "--features", f"@s3://{b}/ids.txt", "-o", str(tmp_path / "a.h5"),
                 "--quiet"]) == 0
    assert main(["train", str(local / "train.h5"), "--features", "3,7,12", "-o", str(tmp_path / "b.h5"),
                 "--quiet"]) == 0
    with h5py.File(tmp_path / "a.h5") as a, h5py.File(tmp_path / "b.h5") as c:
        assert np.array_equal(a["w"][:], c["w"][:])
    fs.pipe(f"{b}/names.txt", "".join(f"g{j}\n" for j in range(1, 21)).encode())
    assert main(["export", str(tmp_path / "a.h5"), "--format", "json", "--feature-names", f"s3://{b}/names.txt",
                 "-o", str(tmp_path / "a.json")]) == 0
    assert "g12" in (tmp_path / "a.json").read_text()


def test_what_is_a_url_and_what_stays_a_path():
    from pathlib import Path

    from streamrank.io.urls import is_url, protocol
    assert is_url("s3://b/k") and is_url("simplecache::s3://b/k") and is_url("file:///tmp/x.h5")
    assert not is_url("a::b.h5") and not is_url("/tmp/s3:/x") and not is_url(Path("s3://b/k")) and not is_url(None)
    assert protocol("simplecache::s3://b/k") == "s3" and protocol("memory://x") == "memory"


def test_a_glob_over_a_bucket_names_its_parts(s3, tmp_path):
    """``s3://bkt/parts/part-*.parquet``: fsspec's glob, the parts in lexicographic order."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    fs, bucket = s3
    rng = np.random.default_rng(0)
    qid = np.repeat(np.arange(6), 4)
    X, y = rng.normal(size=(len(qid), 3)), rng.integers(0, 3, len(qid)).astype(float)
    table = pa.table({"label": y, "qid": qid, **{f"f{j}": X[:, j] for j in range(3)}})
    for k in range(3):
        pq.write_table(table.slice(8 * k, 8), tmp_path / f"p{k}.parquet")
        fs.put_file(str(tmp_path / f"p{k}.parquet"), f"{bucket}/parts/part-{k:05d}.parquet")
    pq.write_table(table, tmp_path / "all.parquet")
    local, remote = tmp_path / "all.h5", tmp_path / "globbed.h5"
    assert main(["convert", str(tmp_path / "all.parquet"), "-o", str(local), "--quiet"]) == 0
    assert main(["convert", f"s3://{bucket}/parts/part-*.parquet", "-o", str(remote), "--quiet"]) == 0
    with open_dataset(local) as a, open_dataset(remote) as b:
        assert a.fingerprint == b.fingerprint
