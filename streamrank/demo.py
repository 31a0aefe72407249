"""``streamrank demo``: the pipeline end to end on generated LETOR-like data.

Generates train / validation / test text (preset ``small``: one relevance model, three samples
of queries), converts them, trains
the linear RankSVM along a C path chosen on validation, predicts the test set and evaluates it
with LETOR's official conventions.
"""

import logging
import tempfile
import time
from pathlib import Path

from streamrank.io.convert import convert
from streamrank.io.dataset import open_dataset
from streamrank.io.info import dataset_info, format_info
from streamrank.evaluation.metrics import evaluate


def run_demo(workdir=None, quiet=False, preset="small", seed=0):
    """Run the demo; return the exit status."""
    from streamrank.cli import _setup_logging
    from streamrank.io.synthetic import write_text
    from streamrank.training.linear import train_linear

    say = (lambda *a: None) if quiet else print
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="streamrank-demo-")
        workdir = tmp.name
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    _setup_logging(True)
    try:
        t0 = time.perf_counter()
        paths = {}
        for part in ("train", "valid", "test"):
            text = work / f"{part}.txt"
            write_text(text, preset=preset, seed=seed, part=part)
            paths[part] = work / f"{part}.h5"
            convert([text], paths[part], quiet=True)
        say(f"[1/4] generated and converted train/valid/test (preset {preset!r}, seed {seed}) "
            f"into {work} in {time.perf_counter() - t0:.1f} s")
        with open_dataset(paths["train"]) as tr, open_dataset(paths["valid"]) as va, \
                open_dataset(paths["test"]) as te:
            say("[2/4] " + format_info(dataset_info(tr)))
            logging.getLogger("streamrank").setLevel(logging.WARNING)
            model, s = train_linear(tr, valid=va, C=[2.0 ** k for k in range(-16, 5, 2)], normalize="zscore")
            say(f"[3/4] trained the linear RankSVM along C = 2^-16..2^4 (zscore features): chose C={s['C']:g}, "
                f"objective {s['objective']:.6g}, {s['iterations']} TRON iterations, {s['passes']} passes, "
                f"{s['seconds']:.2f} s")
            for c in s["candidates"]:
                say(f"        C={c['C']:<9g} validation MeanNDCG {c['valid_meanndcg']:.4f}")
            model_path = work / "model.h5"
            model.save(model_path)
            scores = model.predict_dataset(te)
            # scores come in input row order; the dataset's rows are grouped by query
            report = evaluate(te.y[:], scores[te.row], te.query_ptr, qid=te.qid)
        say(f"[4/4] test set, saved model {model_path.name}:")
        say(report.format())
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()
