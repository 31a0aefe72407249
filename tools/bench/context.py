"""What every section of the peers bench shares: the options, the work folders, the environment, the
peers found, MQ2008's data, the rows and notes of the first table, and the commands streamrank runs."""
import sys
from pathlib import Path

from .common import BIG_D, BIG_PRESET, C, EPS
from .generated import generated_text
from .models import h5_x_bytes
from .run import run_steps, run_timed, summarise


class Context:
    def __init__(self, args, only, work, env, peers):
        self.args, self.only, self.work, self.env, self.peers = args, only, work, env, peers
        self.logs, self.models = work / "logs", work / "models"
        for d in (self.logs, self.models):
            d.mkdir(exist_ok=True)
        self.py = sys.executable
        self.rows = []  # the first table's rows: startup, firstuse, linear, exact
        self.notes = []  # (section, text): printed as "note: text" under the first table
        self.status = 0
        self.data = None  # MQ2008 Fold1 (mq2008.load)
        self.fold = None
        self.exact_ref = None
        self.big = None  # the generated set of big, convert and gbdt (prepare_big)

    def sr_train(self, h5_path, model, extra=()):
        return [self.py, "-m", "streamrank", "train", h5_path, "-o", model, "--C", f"{C:g}", "--tol", f"{EPS:g}",
                *extra, "--json"]

    def sr_convert(self, src, dst, extra=()):
        return [self.py, "-m", "streamrank", "convert", src, "-o", dst, *extra, "--json"]

    def convert_once(self, src, dst, extra=()):
        """An untimed conversion (a file left by a failed or killed one is made again)."""
        dst = Path(dst)
        ok = dst.with_name(dst.name + ".done")
        if dst.exists() and ok.exists():
            return True
        dst.unlink(missing_ok=True)
        res = run_timed(self.sr_convert(src, dst, extra), self.logs / f"convert.{dst.stem}", env=self.env,
                        timeout=self.args.timeout)
        if res["error"]:
            print(f"streamrank convert of {src} failed ({res['error']}); rows using {dst} will fail")
            return False
        ok.write_text("")
        return True

    # each tool: (row label, key, steps(r) -> [(name, cmd, env)], model path(r), note, kind)
    def run_section(self, section, tools, log_tag=None, repeats=None):
        """The tools' runs, interleaved over ``repeats`` (default --repeats) rounds (tool A, tool B, ...,
        then again): one row each, with its runs' records in ``ok``."""
        args = self.args
        res = {t[0]: [] for t in tools}
        for r in range(repeats or args.repeats):
            for label, key, steps, model_of, _, _ in tools:
                if steps is None:
                    continue
                for f in (model_of(r),):
                    Path(f).unlink(missing_ok=True)
                res[label].append(run_steps(steps(r), self.logs / f"{log_tag or section}.{key}.r{r}", args.timeout))
                res[label][-1]["model"] = model_of(r)
        out = []
        for label, key, steps, model_of, note, kind in tools:
            row = {"section": section, "tool": label, "note": note, "key": key, "kind": kind}
            if steps is None:
                out.append(row)
                continue
            row["ok"] = summarise(row, res[label])
            out.append(row)
        return out

    def prepare_big(self):
        """The generated set of big, convert and gbdt: written and converted once (untimed), after a
        small set of the same preset is converted and trained once (numba's cache)."""
        args, logs, models, env = self.args, self.logs, self.models, self.env
        bdir = self.work / "big"
        bdir.mkdir(exist_ok=True)
        stem = f"{BIG_PRESET}-s{args.big_scale:g}"
        btext, bbytes = generated_text(bdir / f"{stem}-train.txt", BIG_PRESET, args.big_scale)
        bh5 = bdir / f"{stem}-train.h5"
        # untimed: a small set of the same preset converted and trained once (numba's cache)
        wtext, _ = generated_text(bdir / f"{BIG_PRESET}-warm.txt", BIG_PRESET, 0.002)
        wh5 = bdir / f"{BIG_PRESET}-warm.h5"
        wh5.unlink(missing_ok=True)
        run_timed(self.sr_convert(wtext, wh5), logs / "big.warm.convert", env=env, timeout=args.timeout)
        run_timed(self.sr_train(wh5, models / "big.warm.h5"), logs / "big.warm.train", env=env, timeout=args.timeout)
        if self.convert_once(btext, bh5):
            x_bytes, n_rows = h5_x_bytes(bh5)
            self.big = {"text": btext, "bytes": bbytes, "h5": bh5, "x_bytes": x_bytes, "rows": n_rows, "dir": bdir,
                        "stem": stem}
            print(f"big: {btext}: {n_rows:,} rows, {BIG_D} features, {bbytes / 1e6:,.0f} MB of text ({BIG_PRESET} "
                  f"preset, scale {args.big_scale:g}, seed 0); {bh5}: X {x_bytes / 1e6:,.0f} MB (float32)")
        else:
            self.status = 2
        return self.big
