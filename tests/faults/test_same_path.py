"""No output is, or links to, an input (issue 30, Build 4): every command refuses, before any work,
an output (-o, --checkpoint's files, --cache-dir, a run directory's files) that is an input, a
symbolic link to one or a hard link to one; exit 2 with one line naming the flag and the input,
every input's bytes unchanged and nothing left beside the output. The writers of io.atomic refuse
the same targets whoever calls them (the guarantee; the command's check is the message)."""

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from streamrank.cli import main
from streamrank.synthetic import write_hdf5


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Every kind of input a command reads: datasets, text with and without qid, a query file, a
    model, scores, a feature list, a finished grid run and LETOR folds."""
    d = tmp_path_factory.mktemp("same-path-sources")
    write_hdf5(d / "t.h5", "small", seed=0, part="train", scale=0.05)
    write_hdf5(d / "v.h5", "small", seed=0, part="valid", scale=0.05)
    rng = np.random.default_rng(0)
    rows = [(int(rng.integers(3)), i // 10, rng.random(5)) for i in range(120)]
    (d / "g.txt").write_text("".join(f"{y} qid:{q} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x)) + "\n"
                                     for y, q, x in rows))
    (d / "nq.txt").write_text("".join(f"{y} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x)) + "\n"
                                      for y, _, x in rows))
    (d / "nq.query").write_text("10\n" * 12)
    (d / "f.txt").write_text("1,2,3\n")
    assert main(["train", str(d / "t.h5"), "-o", str(d / "m.h5"), "--quiet"]) == 0
    assert main(["predict", str(d / "m.h5"), str(d / "t.h5"), "-o", str(d / "s.txt")]) == 0
    assert main(["grid", str(d / "t.h5"), "--valid", str(d / "v.h5"), "--C", "1", "-o", str(d / "run"),
                 "--quiet"]) == 0
    for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
        (d / "folds" / "Fold1").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(d / ("v.h5" if part != "train" else "t.h5"), d / "folds" / "Fold1" / f"{name}.h5")
    return d


# (id, argv, the input at {in}, the output: None for {out} (a file), else its name inside {d}, the flag named)
CASES = [
    ("convert-IN", ["convert", "{in}", "-o", "{out}"], "g.txt", None, "-o"),
    ("convert-query-file", ["convert", "{w}/nq.txt", "--query-file", "{in}", "-o", "{out}"], "nq.query", None, "-o"),
    ("train-DATA", ["train", "{in}", "-o", "{out}"], "t.h5", None, "-o"),
    ("train-text-DATA", ["train", "{in}", "-o", "{out}", "--cache-dir", "{w}/cache"], "g.txt", None, "-o"),
    ("train-valid", ["train", "{w}/t.h5", "--valid", "{in}", "-o", "{out}"], "v.h5", None, "-o"),
    ("train-features", ["train", "{w}/t.h5", "--features", "@{in}", "-o", "{out}"], "f.txt", None, "-o"),
    ("train-checkpoint", ["train", "{in}", "-o", "{w}/new.h5", "--checkpoint", "{d}"], "t.h5", "checkpoint.h5",
     "--checkpoint"),
    ("train-checkpoint-prev", ["train", "{w}/t.h5", "--valid", "{in}", "-o", "{w}/new.h5", "--checkpoint", "{d}"],
     "v.h5", "checkpoint.prev.h5", "--checkpoint"),
    ("train-cache-dir", ["train", "{in}", "-o", "{w}/new.h5", "--cache-dir", "{out}"], "t.h5", None, "--cache-dir"),
    ("predict-MODEL", ["predict", "{in}", "{w}/t.h5", "-o", "{out}"], "m.h5", None, "-o"),
    ("predict-DATA", ["predict", "{w}/m.h5", "{in}", "-o", "{out}"], "t.h5", None, "-o"),
    ("select-features-DATA", ["select-features", "{in}", "-k", "3", "-o", "{out}", "--quiet"], "t.h5", None, "-o"),
    ("select-features-checkpoint", ["select-features", "{in}", "-k", "3", "--checkpoint", "{d}", "--quiet"], "t.h5",
     "similarity.h5", "--checkpoint"),
    ("grid-DATA", ["grid", "{in}", "--valid", "{w}/v.h5", "--C", "1", "-o", "{d}"], "t.h5", "model.h5", "-o"),
    ("grid-valid", ["grid", "{w}/t.h5", "--valid", "{in}", "--C", "1", "-o", "{d}"], "v.h5",
     "runs/00-primal/result.json", "-o"),
    ("grid-DATA-configuration", ["grid", "{in}", "--valid", "{w}/v.h5", "--C", "1", "-o", "{d}"], "t.h5",
     "runs/00-primal/model.h5", "-o"),
    ("cv-fold", ["cv", "{w}/folds", "--C", "1", "-o", "{d}"], "folds/Fold1/train.h5", "Fold1/primal/model.h5", "-o"),
    ("cv-fold-table", ["cv", "{w}/folds", "--C", "1", "-o", "{d}"], "folds/Fold1/test.h5", "cv.json", "-o"),
    ("report-record", ["report", "{w}/run", "-o", "{out}", "--no-plots"], "run/grid.json", None, "-o"),
    ("report-png-dir", ["report", "{w}/run", "-o", "{w}/r.html", "--no-plots", "--png-dir", "{out}"],
     "run/grid.json", None, "--png-dir"),
]


def snapshot(w):
    """Every entry under ``w``: a file's sha256, a link's target, a folder's name."""
    out = {}
    for p in sorted(Path(w).rglob("*")):
        rel = str(p.relative_to(w))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def arrange(sources, w, source, inside, link):
    """Copy the sources into ``w`` and place the output where ``link`` says: the input itself
    ("same"), a symbolic link to it, or a hard link to it. Returns (input path, output path, d)."""
    shutil.copytree(sources, w, symlinks=True)
    d = w / "outdir"
    src = w / source
    out = (d / inside) if inside else (w / "out")
    out.parent.mkdir(parents=True, exist_ok=True)
    if link == "same":
        if inside:
            shutil.copyfile(src, out)
            src = out
        else:
            out = src
    elif link == "symlink":
        out.symlink_to(src)
    else:
        os.link(src, out)
    return src, out, d


@pytest.mark.parametrize("link", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_output_that_is_an_input_is_refused_before_any_work(sources, tmp_path, capsys, case, link):
    name, argv, source, inside, flag = case
    if link == "same" and "{in}" not in " ".join(argv) and inside:
        pytest.skip("the input is not named on the command line: only a link can put it at the output")
    w = tmp_path / "w"
    src, out, d = arrange(sources, w, source, inside, link)
    argv = [a.format(w=w, d=d, out=out, **{"in": src}) for a in argv]
    before = snapshot(w)
    capsys.readouterr()
    assert main(argv) == 2, name
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"error: {flag} " in lines[0] and "the input" in lines[0] and "another" in lines[0], lines[0]
    if link == "symlink":
        assert "symbolic link" in lines[0]
    if link == "hardlink":
        assert "hard link" in lines[0]
    assert snapshot(w) == before  # every input's bytes, and nothing new beside the output


def test_a_run_directory_may_hold_the_inputs(sources, tmp_path):
    """grid and cv write into the folder that holds their data: nothing there is replaced."""
    w = tmp_path / "w"
    shutil.copytree(sources, w)
    inputs = {p: hashlib.sha256((w / p).read_bytes()).hexdigest() for p in ("t.h5", "v.h5")}
    assert main(["grid", str(w / "t.h5"), "--valid", str(w / "v.h5"), "--C", "1", "-o", str(w), "--quiet"]) == 0
    assert (w / "model.h5").is_file() and (w / "grid.json").is_file()
    assert main(["cv", str(w / "folds"), "--C", "1", "-o", str(w / "folds"), "--quiet"]) == 0
    assert (w / "folds" / "cv.json").is_file()
    assert inputs == {p: hashlib.sha256((w / p).read_bytes()).hexdigest() for p in inputs}


def test_the_writers_refuse_a_registered_input_whoever_calls_them(sources, tmp_path):
    """The guarantee lives in io.atomic and the checkpoint: a library caller that registered its
    inputs cannot replace one, through a link or not, and no temporary file is left."""
    from streamrank.errors import InputError
    from streamrank.io.atomic import atomic_replace, check_writable, reading, registered_inputs, write_atomically
    from streamrank.state.checkpoint import write_checkpoint
    from streamrank.state.model import load
    shutil.copytree(sources, tmp_path / "w")
    w = tmp_path / "w"
    (w / "ck").mkdir()
    os.link(w / "t.h5", w / "ck" / "checkpoint.h5")
    (w / "sym.h5").symlink_to(w / "m.h5")
    before = snapshot(w)
    model = load(w / "m.h5")
    with reading((w / "t.h5", "DATA"), (w / "m.h5", "MODEL")):
        assert {what for _, what in registered_inputs()} >= {"DATA", "MODEL"}
        for attempt in (lambda: model.save(w / "t.h5"), lambda: model.save(w / "sym.h5"),
                        lambda: write_atomically(w / "m.h5", "x"), lambda: check_writable(w / "t.h5"),
                        lambda: write_checkpoint(w / "ck", config={}, fingerprint="f", scalars={}, w=[0.0], g=[0.0]),
                        lambda: write_hdf5(w / "t.h5", "small", seed=1, part="train", scale=0.01)):
            with pytest.raises(InputError, match="the input"):
                attempt()
        tmp = w / ".x.tmp"
        tmp.write_bytes(b"new")
        with pytest.raises(InputError, match="hard link"):
            atomic_replace(tmp, w / "ck" / "checkpoint.h5")
        tmp.unlink()
    assert snapshot(w) == before
    model.save(w / "t.h5")  # the registration ended with the block


# cases where the data given write nothing at that output, so only the command's check can speak
WRITES_NOTHING_THERE = {
    "train-cache-dir": "HDF5 data is not converted: nothing is written in --cache-dir",
    "select-features-checkpoint": "20 features take one block: GAS keeps no similarity.h5",
}


@pytest.mark.parametrize("link", ["same", "hardlink"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_without_the_commands_check_the_writers_still_refuse(sources, tmp_path, capsys, monkeypatch, case, link):
    """The command's early check switched off (inputs only registered): the work may run, but its
    writers refuse to replace the input; exit 2, the inputs' bytes unchanged, no temporary file."""
    import sys
    from streamrank.io.atomic import register_input

    def register_only(args, tokens):
        for what, path in args.paths(args)[0]:
            tokens.append(register_input(path, what))
    monkeypatch.setattr(sys.modules["streamrank.cli.main"], "_check_paths", register_only)
    name, argv, source, inside, flag = case
    if name in WRITES_NOTHING_THERE:
        pytest.skip(WRITES_NOTHING_THERE[name])
    if link == "same" and "{in}" not in " ".join(argv) and inside:
        pytest.skip("the input is not named on the command line: only a link can put it at the output")
    w = tmp_path / "w"
    src, out, d = arrange(sources, w, source, inside, link)
    argv = [a.format(w=w, d=d, out=out, **{"in": src}) for a in argv]
    before = {k: v for k, v in snapshot(w).items() if v != "dir"}
    assert main(argv) == 2, name
    err = capsys.readouterr().err
    assert "the input" in err and "Traceback" not in err, err
    after = snapshot(w)
    assert {k: after.get(k) for k in before} == before
    assert not [k for k in after if Path(k).name.startswith(".") and ".tmp" in k]


def test_the_python_api_refuses_to_save_over_an_open_dataset(tmp_path):
    """An open Dataset is a registered input (io.atomic): a model saved over it is refused and the
    file keeps its bytes; once the dataset is closed the name is free again."""
    import hashlib

    import numpy as np

    import streamrank
    from streamrank.errors import InputError
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 3)).astype(np.float32)
    y, qid = rng.integers(0, 3, 20).astype(np.float32), np.repeat(np.arange(4), 5)
    est = streamrank.RankSVM(C=0.5).fit(X, y, qid=qid)
    data = tmp_path / "d.h5"
    est.save(data)  # any HDF5 file will do as the thing to protect; make it a dataset:
    from streamrank.io.hdf5_format import DatasetWriter
    data.unlink()
    with DatasetWriter(data, n_features=3) as w:
        w.append(X, y, qid)
    before = hashlib.sha256(data.read_bytes()).hexdigest()
    ds = streamrank.open_dataset(data)
    try:
        with pytest.raises(InputError, match="d.h5"):
            est.save(data)
        link = tmp_path / "link.h5"
        link.symlink_to(data)
        with pytest.raises(InputError, match="link"):
            est.save(link)
    finally:
        ds.close()
    assert hashlib.sha256(data.read_bytes()).hexdigest() == before
    est.save(data)  # closed: a user may replace it
    assert streamrank.load(data).n_features_in_ == 3
