"""Every code block of README.md runs as written (issue 31), in a folder that holds the files the
README names, generated small: ```python blocks in a fresh namespace, ```bash blocks command by
command (backslash continuations joined, ``&&`` and ``|`` as the shell has them), each
``streamrank ...`` through the CLI's ``main`` in this process. A command that needs what no test
can provide is skipped only by SKIP below, which says why; anything else that is not a streamrank
command fails the test, as a block that cannot run as written is a defect of the README."""

import gzip
import itertools
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"

# command (a regular expression searched in the command as written) -> why this test cannot run it
SKIP = {
    r"^python3 -m pip install\b": "installs the package (this test runs the installed one)",
    r"^python3 -m pytest\b": "runs the whole test suite, which holds this test",
    r"--scheduler tcp://10\.0\.0\.5:8786": "needs a dask scheduler running at that address",
    r"--cache-dir /big/disk": "needs a disk mounted at /big/disk",
}
# the data the README's commands read, generated from the small preset (20 features, 5 to 150 rows a
# query): file -> (scale, seed); the text files hold the values of the dataset of the same seed
DATA = {"train": (0.1, 1), "vali": (0.05, 2), "test": (0.05, 3)}
CV_FOLDS = 1  # Fold1 of tiny text for `streamrank cv MQ2008/` (cv and report take any number of folds)


def blocks(text=None):
    """[(language, first line number, code)] of README's fenced blocks, in order."""
    text = README.read_text() if text is None else text
    out = []
    for m in re.finditer(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S):
        out.append((m.group(1), text.count("\n", 0, m.start()) + 2, m.group(2)))
    return out


def commands(code):
    """The shell command lines of a bash block: continuations joined, comments dropped, each line
    split at ``&&`` into commands, each a list of pipeline stages (token lists)."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        cmd = []
        for t in tokens + ["&&"]:
            if t == "&&":
                if cmd:
                    stages, stage = [], []
                    for u in cmd + ["|"]:
                        if u == "|":
                            stages.append(stage)
                            stage = []
                        else:
                            stage.append(u)
                    out.append(stages)
                cmd = []
            else:
                cmd.append(t)
    return out


def skip_reason(stages):
    shown = " | ".join(shlex.join(s) for s in stages)
    for pattern, why in SKIP.items():
        if re.search(pattern, shown):
            return why
    return None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from streamrank.synthetic import write_hdf5, write_text
    d = tmp_path_factory.mktemp("readme")
    for name, (scale, seed) in DATA.items():
        write_hdf5(d / f"{name}.h5", "small", scale=scale, seed=seed)
    write_text(d / "train.txt.gz", "small", scale=DATA["train"][0], seed=DATA["train"][1])
    write_text(d / "train.txt", "small", scale=DATA["train"][0], seed=DATA["train"][1])
    # LightGBM-style inputs: text without qid, its group sizes in a .query file beside it
    for name, seed in (("a", 4), ("b", 5)):
        write_text(d / f"{name}.tmp", "small", scale=0.05, seed=seed)
        lines = (d / f"{name}.tmp").read_text().splitlines()
        qids = [ln.split()[1] for ln in lines]
        (d / f"{name}.txt").write_text("".join(" ".join(ln.split(" ", 2)[::2]) + "\n" for ln in lines))
        sizes = [len(list(g)) for _, g in itertools.groupby(qids)]
        (d / f"{name}.query").write_text("".join(f"{s}\n" for s in sizes))
        (d / f"{name}.tmp").unlink()
    _parquet_parts(d / "features.parquet", d / "train.h5")
    for k in range(1, CV_FOLDS + 1):
        fold = d / "MQ2008" / f"Fold{k}"
        fold.mkdir(parents=True)
        for j, name in enumerate(("train", "vali", "test")):
            write_text(fold / f"{name}.txt", "small", scale=0.05, seed=10 * k + j)
    return d


def _parquet_parts(root, dataset):
    """The rows of ``dataset`` as Parquet in two part files, Spark's way (columns relevance,
    query_id, f1..fd); none without pyarrow (the README's Parquet block then fails, saying so)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    from streamrank.io.dataset import open_dataset
    with open_dataset(dataset) as ds:
        X, y = ds.read(0, ds.n_rows)
        cols = {"relevance": y.astype(np.float64), "query_id": ds.row_query_ids(0, ds.n_rows)}
    cols.update({f"f{j + 1}": X[:, j].astype(np.float64) for j in range(X.shape[1])})
    t = pa.table(cols)
    root.mkdir()
    half = t.num_rows // 2
    pq.write_table(t.slice(0, half), root / "part-00000.parquet")
    pq.write_table(t.slice(half), root / "part-00001.parquet")
    (root / "_SUCCESS").write_bytes(b"")


@pytest.fixture
def in_workdir(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("XDG_CACHE_HOME", str(workdir / "cache"))  # text converted on the fly lands here
    return workdir


@pytest.fixture
def bucket(request, workdir, monkeypatch):
    """The bucket ``bkt`` the README's commands name, on the test S3 server, holding the files
    they read (the workdir's)."""
    server, endpoint = request.getfixturevalue("s3_server")
    from s3_env import s3_environment
    fs = s3_environment(endpoint, monkeypatch)
    if not fs.exists("bkt"):
        fs.mkdir("bkt")
    for name in ("train.txt.gz", "vali.h5", "test.h5"):
        fs.put_file(str(workdir / name), f"bkt/{name}")
    return fs


BLOCKS = blocks()


def _id(block):
    lang, line, code = block
    return f"{lang}-line{line}"


@pytest.mark.parametrize("block", BLOCKS, ids=[_id(b) for b in BLOCKS])
def test_readme_block_runs_as_written(block, in_workdir, capfd, request):
    lang, line, code = block
    if "s3://bkt" in code:
        request.getfixturevalue("bucket")
    if lang == "python":
        _run_python(code, line)
    elif lang == "bash":
        _run_bash(code, line, capfd)
    else:
        pytest.fail(f"README.md:{line}: a ```{lang} block; this test runs python and bash blocks only")


def _run_python(code, line):
    import sklearn
    saved = sklearn.get_config()
    try:
        # the line numbers of a traceback are README's
        exec(compile("\n" * (line - 1) + code, str(README), "exec"), {"__name__": "__readme__"})
    finally:
        sklearn.set_config(**saved)  # a block's set_config (metadata routing) stays in the block


def _run_bash(code, line, capfd):
    from streamrank.cli.main import main
    ran = 0
    for stages in commands(code):
        shown = " | ".join(shlex.join(s) for s in stages)
        if skip_reason(stages) is not None:
            continue
        if stages[0][0] != "streamrank":
            pytest.fail(f"README.md:{line}: {shown!r} is not a streamrank command; make it one, or list it in "
                        f"test_readme.SKIP with the reason this test cannot run it")
        capfd.readouterr()
        code_ = main(stages[0][1:])
        out, err = capfd.readouterr()
        assert code_ == 0, f"README.md:{line}: {shown} exited {code_}:\n{err[-2000:]}"
        data = out.encode()
        for stage in stages[1:]:  # a pipeline's later commands read what the one before wrote
            done = subprocess.run(stage, input=data, capture_output=True, check=False)
            assert done.returncode == 0, f"README.md:{line}: {shown}: {shlex.join(stage)} exited {done.returncode}"
            data = done.stdout
        assert len(stages) == 1 or data.strip(), f"README.md:{line}: {shown} printed nothing"
        ran += 1
    assert ran, f"README.md:{line}: every command of this block is skipped"


def test_the_skipped_commands_are_the_listed_ones_each_in_the_readme():
    """SKIP stays short and current: each entry skips a command the README has."""
    cmds = [stages for lang, _, code in BLOCKS if lang == "bash" for stages in commands(code)]
    for pattern in SKIP:
        assert any(re.search(pattern, " | ".join(shlex.join(s) for s in st)) for st in cmds), \
            f"SKIP entry {pattern!r} matches no README command: remove it"
    assert sum(skip_reason(st) is not None for st in cmds) <= 6


def test_the_runner_parses_blocks_and_commands():
    text = "a\n```bash\nstreamrank x a.h5 \\\n    --k 1 -o - | head   # note\npip install y && streamrank demo\n```\n" \
           "```python\nprint(1)\n```\n"
    b = blocks(text)
    assert [(lang, line) for lang, line, _ in b] == [("bash", 3), ("python", 8)]
    assert commands(b[0][2]) == [[["streamrank", "x", "a.h5", "--k", "1", "-o", "-"], ["head"]],
                                 [["pip", "install", "y"]], [["streamrank", "demo"]]]


def test_the_readme_shows_a_file_to_fit_in_one_line():
    """Done-when of issue 31: from a file to fit(X, y, qid=...) in one line, with the reader."""
    python = "\n".join(code for lang, _, code in BLOCKS if lang == "python")
    assert 'X, y, qid = streamrank.load_ranking("train.h5")' in python
    assert re.search(r"\.fit\(X, y, qid=qid\)", python)


def test_the_generated_text_is_the_datasets(workdir):
    """The README converts train.txt.gz into train.h5: the same rows as the generated dataset."""
    import streamrank
    X, y, qid = streamrank.load_ranking(workdir / "train.txt.gz")
    with gzip.open(workdir / "train.txt.gz", "rt") as f:
        assert sum(1 for _ in f) == len(y)
    with streamrank.open_dataset(workdir / "vali.h5") as ds:
        assert ds.n_features == X.shape[1]
    assert np.unique(qid).size >= 3  # GroupKFold(3) in the README's scikit-learn block


def test_the_headline_table_is_short_and_has_its_plot():
    """Issue 33: under ``## Headline results``, at most 8 rows of at most 220 characters, one plot
    drawn from the results data, and a link to the page that holds every table."""
    text = README.read_text()
    section = text[text.index("## Headline results"):]
    section = section[:section.index("\n## ", 3)]
    rows = [ln for ln in section.splitlines() if ln.startswith("|") and not ln.startswith("|---")][1:]
    assert 1 <= len(rows) <= 8, f"{len(rows)} rows"
    assert all(len(r) <= 220 for r in rows), [len(r) for r in rows]
    images = re.findall(r"!\[[^\]]+\]\((docs/img/[^)]+\.(?:svg|png))\)", section)
    assert len(images) == 1 and (README.parent / images[0]).is_file(), images
    assert "(docs/benchmarks.md)" in section
