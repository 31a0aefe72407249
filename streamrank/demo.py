"""``streamrank demo``: the pipeline end to end on generated LETOR-like data.

Generates train / validation / test text (preset ``small``: one relevance model, three samples
of queries), converts them, trains the linear RankSVM along a C path chosen on validation,
predicts the test set and evaluates it with LETOR's official conventions.

Every file it writes stays in one named folder (default ``./streamrank-demo``): the text, the
datasets, the model and the test scores, so the steps can be rerun by hand on them
(the CLI prints the commands). The folder holds a marker listing what the demo writes; a folder with other
files in it is refused (the demo replaces its own files only), and the demo can run again in
its own folder.
"""

import json
import logging
import time
from pathlib import Path

from streamrank.errors import InputError
from streamrank.evaluation.metrics import evaluate
from streamrank.io.convert import convert
from streamrank.io.dataset import open_dataset
from streamrank.io.info import dataset_info, format_info

DEFAULT_WORKDIR = "streamrank-demo"
PARTS = ("train", "valid", "test")
# what the demo writes into its folder (and nothing else but the marker and its own temporary files)
FILES = tuple(f"{p}.txt" for p in PARTS) + tuple(f"{p}.h5" for p in PARTS) + ("model.h5", "scores.txt")
MARKER = ".streamrank-demo.json"
# the C path: 2^-16, 2^-14, ..., 2^4, features z-scored
C_EXPONENTS = (-16, 4, 2)
NORMALIZE = "zscore"

def claim_workdir(workdir):
    """The demo's folder, created if missing: refused if it holds a file the demo does not write
    (the marker tells a folder the demo made from one that only has files of the same names)."""
    work = Path(workdir)
    if work.exists() and not work.is_dir():
        raise InputError(f"{work}: the demo's folder is a file; use workdir=DIR with a new or empty folder")
    if work.is_dir():
        names = sorted(p.name for p in work.iterdir())
        ours = set(FILES) | {MARKER}
        # an interrupted demo's temporary files (.model.h5.PID.tmp, .train.h5.convert.json) are its own
        foreign = [n for n in names if n not in ours and not any(n.startswith(f".{f}.") for f in FILES)]
        if names and MARKER not in names:
            foreign = names
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise InputError(f"{work}: holds files the demo did not write ({shown}); the demo writes only into a "
                             f"new or empty folder, or one of an earlier demo: use workdir=DIR")
    try:
        work.mkdir(parents=True, exist_ok=True)
        from streamrank.io.atomic import write_atomically
        write_atomically(work / MARKER, json.dumps({"written_by": "streamrank demo", "files": list(FILES)}) + "\n")
    except OSError as e:
        from streamrank.io.atomic import storage_error
        raise storage_error(work / MARKER, e) from None
    return work


def run_demo(workdir=None, quiet=False, preset="small", seed=0):
    """Run the demo in ``workdir`` (default ``./streamrank-demo``); return a dict of what it wrote:
    ``workdir``, ``paths`` (part -> text and dataset), ``model``, ``scores`` and the test
    ``report``."""
    from streamrank.console import setup_logging
    from streamrank.evaluation.score_files import write_scores
    from streamrank.synthetic import write_text
    from streamrank.training.linear import train_linear

    say = (lambda *a: None) if quiet else print
    work = claim_workdir(DEFAULT_WORKDIR if workdir is None else workdir)
    setup_logging(True)
    t0 = time.perf_counter()
    paths = {}
    for part in PARTS:
        text = work / f"{part}.txt"
        write_text(text, preset=preset, seed=seed, part=part)
        paths[part] = work / f"{part}.h5"
        convert([text], paths[part], quiet=True)
    say(f"[1/4] generated and converted train/valid/test (preset {preset!r}, seed {seed}) "
        f"into {work} in {time.perf_counter() - t0:.1f} s")
    model_path, scores_path = work / "model.h5", work / "scores.txt"
    lo, hi, step = C_EXPONENTS
    with open_dataset(paths["train"]) as tr, open_dataset(paths["valid"]) as va, \
            open_dataset(paths["test"]) as te:
        say("[2/4] " + format_info(dataset_info(tr)))
        logging.getLogger("streamrank").setLevel(logging.WARNING)
        model, s = train_linear(tr, valid=va, C=[2.0 ** k for k in range(lo, hi + 1, step)], normalize=NORMALIZE)
        model.save(model_path)
        say(f"[3/4] trained the linear RankSVM along C = 2^{lo}..2^{hi} ({NORMALIZE} features): chose C={s['C']:g}, "
            f"objective {s['objective']:.6g}, {s['iterations']} TRON iterations, {s['passes']} passes, "
            f"{s['seconds']:.2f} s; saved {model_path}")
        for c in s["candidates"]:
            say(f"        C={c['C']:<9g} validation MeanNDCG {c['valid_meanndcg']:.4f}")
        scores = model.predict_dataset(te)
        write_scores(scores_path, scores, te.name)  # as predict writes them: input row order, every float64 digit
        # scores come in input row order; the dataset's rows are grouped by query
        report = evaluate(te.y[:], scores[te.row], te.query_ptr, qid=te.qid)
    say(f"[4/4] test set, scored by {model_path} (scores in {scores_path}):")
    say(report.format())
    return {"workdir": work, "paths": paths, "model": model_path, "scores": scores_path, "report": report}
