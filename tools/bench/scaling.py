"""scaling: linear RankSVM's time and peak RSS against rows, on generated MSLR-WEB30K-like text
(streamrank.synthetic's ``mslr30k`` preset, seed 0) at several sizes: streamrank from HDF5
(converted beforehand, untimed) and from the text (convert + train), LIBLINEAR ranksvm ``train -s
8`` and SVMrank (``svm_rank_learn -c C*n_queries``, only on the sizes up to
--scaling-svmrank-rows: its time grows fast with the queries), each a whole process, interleaved
over the rounds of one size. The squared-hinge objective of every squared-hinge model is computed
here from the text in float64 (as the big section does), so "faster" reads as "to the same
objective or lower"."""
import statistics
import time

from _benchutil import record, table

from .common import BIG_D, BIG_PRESET, C, EPS
from .generated import generated_text
from .models import read_liblinear_model, read_streamrank_model
from .objectives import pair_hinge_sums, settle_objectives, text_scores
from .run import add_note, data_rows, json_value, last_json, mark_empty, run_timed

SCALING_ROWS = (10_000, 30_000, 100_000, 300_000)
SCALING_SVMRANK_ROWS = 30_000
ROWS_AT_SCALE_1 = 2_270_300  # the mslr30k preset's rows at scale 1 (1,000,065 at 0.4405)
SVMRANK = "SVMrank (-c C x queries)"

COLUMNS = [("tool", "tool", None), ("rows", "rows", "{:,}"), ("queries", "queries", "{:,}"),
           ("mb", "text MB", "{:,.0f}"), ("seconds", "median s (whole process)", "{:.2f}"),
           ("solve", "solver s (--json)", "{:.2f}"), ("runs", "each run s", None), ("rss", "peak RSS MB", "{:,.0f}"),
           ("objective", "sq-hinge primal objective", "{:.4f}"), ("rel", "rel. to lowest", "{:.2e}"),
           ("note", "note", None)]
RSS_COLUMNS = [("tool", "tool", None), ("rows", "rows", "{:,}"), ("rss", "peak RSS MB", "{:,.0f}"),
               ("seconds", "median s (whole process)", "{:.2f}")]
PLOT_TIME = {"file": "bench-scaling-time.svg",
             "title": "Linear RankSVM: time against rows (generated MSLR-like data, C = 1)",
             "x": "rows", "y": "seconds", "series": "tool", "xlabel": "rows", "ylabel": "seconds (whole process)",
             "logx": True, "logy": True}
PLOT_RSS = {"file": "bench-scaling-rss.svg",
            "title": "Linear RankSVM: peak RSS against rows (generated MSLR-like data, C = 1)",
            "x": "rows", "y": "rss", "series": "tool", "xlabel": "rows", "ylabel": "peak RSS MB (whole process)",
            "logx": True, "logy": True}


def h5_shape(path):
    """(rows, queries) of a streamrank HDF5 dataset."""
    import h5py
    with h5py.File(path, "r") as f:
        return int(f["X"].shape[0]), int(f["query_ptr"].shape[0] - 1)


def objectives(rows, text):
    """The squared-hinge objective of every streamrank and LIBLINEAR model of one size, from one
    float64 pass over its text; rel. to the lowest."""
    import numpy as np
    cols, W = [], []
    for row in rows:
        for res in row.get("ok", []):
            try:
                w = (read_streamrank_model(res["model"], "identity")[0] if row["kind"] == "streamrank"
                     else read_liblinear_model(res["model"], BIG_D) if row["kind"] == "liblinear" else None)
                if w is None:
                    continue
                if w.size != BIG_D:
                    raise ValueError(f"{res['model']}: {w.size} weights, expected {BIG_D}")
                cols.append(row)
                W.append(w)
            except (OSError, ValueError, KeyError, IndexError) as exc:
                add_note(row, f"model unreadable: {exc}")
    if not W:
        return
    Wm = np.stack(W, axis=1)
    S, y, qid = text_scores(text, Wm, BIG_D)
    tot, _ = pair_hinge_sums(S, y, qid)
    objs = {}
    for k, row in enumerate(cols):
        objs.setdefault(id(row), []).append(0.5 * float(Wm[:, k] @ Wm[:, k]) + C * float(tot[k]))
    settle_objectives(rows, objs)


def run(ctx):
    """Runs every size (generated, converted, timed, then removed unless --workdir keeps it); returns
    the function that prints and records the table."""
    args, logs, models, env = ctx.args, ctx.logs, ctx.models, ctx.env
    repeats, keep = args.scaling_repeats, args.workdir is not None
    ll, ll_why = ctx.peers["liblinear"]
    sr, sr_why = ctx.peers["svmrank"]
    sdir = ctx.work / "scaling"
    sdir.mkdir(exist_ok=True)
    t_start = time.perf_counter()
    # untimed: a small set of the same preset converted and trained once (numba's cache)
    wtext, _ = generated_text(sdir / f"{BIG_PRESET}-warm.txt", BIG_PRESET, 0.002)
    wh5 = sdir / f"{BIG_PRESET}-warm.h5"
    wh5.unlink(missing_ok=True)
    run_timed(ctx.sr_convert(wtext, wh5), logs / "scaling.warm.convert", env=env, timeout=args.timeout)
    run_timed(ctx.sr_train(wh5, models / "scaling.warm.h5"), logs / "scaling.warm.train", env=env,
              timeout=args.timeout)
    out, skipped = [], []
    for n in sorted(args.scaling_rows):
        text, nbytes = generated_text(sdir / f"{BIG_PRESET}-{n}.txt", BIG_PRESET, n / ROWS_AT_SCALE_1)
        h5 = sdir / f"{BIG_PRESET}-{n}.h5"
        if not ctx.convert_once(text, h5):
            out.append({"section": "scaling", "tool": "(all)", "rows": n, "note": "skipped: streamrank convert failed"})
            ctx.status = 2
            continue
        n_rows, n_q = h5_shape(h5)
        conv_h5 = sdir / "converted.h5"
        c_sr = C * n_q
        tag = f"scaling.{n}"

        def text_steps(r, text=text, conv_h5=conv_h5, tag=tag):
            conv_h5.unlink(missing_ok=True)  # a fresh conversion every round (convert resumes otherwise)
            return [("convert", ctx.sr_convert(text, conv_h5), env),
                    ("train", ctx.sr_train(conv_h5, models / f"{tag}.sr_text.r{r}.h5"), env)]

        svm_ok = sr is not None and n_rows <= args.scaling_svmrank_rows
        if sr is not None and not svm_ok:
            skipped.append(n_rows)
        tools = [("streamrank (HDF5)", "sr_h5",
                  lambda r, h5=h5, tag=tag: [("train", ctx.sr_train(h5, models / f"{tag}.sr_h5.r{r}.h5"), env)],
                  lambda r, tag=tag: models / f"{tag}.sr_h5.r{r}.h5", "", "streamrank"),
                 ("streamrank (text: convert + train)", "sr_text", text_steps,
                  lambda r, tag=tag: models / f"{tag}.sr_text.r{r}.h5", "", "streamrank"),
                 ("LIBLINEAR ranksvm -s 8", "liblinear",
                  (lambda r, text=text, tag=tag: [("train", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{EPS:g}", text,
                                                             models / f"{tag}.liblinear.r{r}.model"], env)])
                  if ll else None,
                  lambda r, tag=tag: models / f"{tag}.liblinear.r{r}.model", ll_why or "", "liblinear")]
        if svm_ok or sr is None:
            tools.append((SVMRANK, "svmrank",
                          (lambda r, text=text, tag=tag, c_sr=c_sr: [
                              ("learn", [sr, "-c", f"{c_sr:g}", text, models / f"{tag}.svmrank.r{r}.model"], env)])
                          if sr else None,
                          lambda r, tag=tag: models / f"{tag}.svmrank.r{r}.model",
                          sr_why or f"-c {c_sr:g}; L1 hinge: a different objective, not comparable", "svmrank"))
        print(f"scaling: {n_rows:,} rows, {n_q:,} queries, {nbytes / 1e6:,.0f} MB of text ({BIG_PRESET} preset, "
              f"scale {n / ROWS_AT_SCALE_1:.6g}, seed 0), {repeats} round(s) ...", flush=True)
        rows = ctx.run_section("scaling", tools, log_tag=tag, repeats=repeats)
        conv_h5.unlink(missing_ok=True)
        for row in rows:
            row.update(rows=n_rows, queries=n_q, mb=nbytes / 1e6, seconds=row.get("median"))
            if row.get("ok") and row["kind"] == "streamrank":
                solves = [s for s in (json_value(r, "seconds", "train") for r in row["ok"]) if s is not None]
                if solves:
                    row["solve"] = statistics.median(solves)
                j = last_json(row["ok"][-1]["steps"]["train"][2])
                if j and "objective" in j:
                    row["own"] = j["objective"]
        objectives(rows, text)
        mark_empty(rows)
        out.extend(rows)
        if not keep:  # the largest size's text is about 0.5 GB
            for f in [text, h5, h5.with_name(h5.name + ".done")] + [r["model"] for row in rows
                                                                    for r in row.get("ok", [])]:
                f.unlink(missing_ok=True)
    if skipped:
        ran = [r for r in out if r.get("kind") == "svmrank" and r.get("seconds") is not None]
        here = "; here " + ", ".join(f"{r['seconds']:.0f} s at {r['rows']:,}" for r in ran) if ran else ""
        out.append({"section": "scaling", "tool": SVMRANK,
                    "note": "not run on " + ", ".join(f"{n:,}" for n in skipped) + " rows (--scaling-svmrank-rows "
                            f"{args.scaling_svmrank_rows:,}: its time grows fast with the rows and queries{here})"})
    took = time.perf_counter() - t_start
    notes = [f"scaling: generated {BIG_PRESET}-like text (streamrank.synthetic, seed 0, part train, {BIG_D} "
             f"features, about 120 rows a query) at {len(args.scaling_rows)} sizes; C = {C:g}, eps = {EPS:g}; "
             f"streamrank: train X.h5 --C {C:g} --tol {EPS:g} --json (X.h5 converted once beforehand, untimed), and "
             f"from the text: convert + train (two processes, seconds summed, peak RSS the larger); LIBLINEAR: "
             f"train -s 8 -c {C:g} -e {EPS:g} TEXT MODEL; SVMrank: svm_rank_learn -c C*queries TEXT MODEL (L1 "
             f"hinge: no squared-hinge objective)",
             f"scaling: seconds are medians of {repeats} round(s), the tools interleaved within a size; peak RSS the "
             f"largest over the rounds, MB = 10^6 bytes; objectives: 1/2||w||^2 + C sum over pairs max(0, 1 - "
             f"w.(x_i - x_j))^2 in float64 from each model file and the text; the section took {took:.0f} s"]
    params = {"preset": BIG_PRESET, "seed": 0, "rows": list(args.scaling_rows), "repeats": repeats, "C": C,
              "eps": EPS, "svmrank_rows": args.scaling_svmrank_rows}

    def print_scaling():
        print()
        table(out, COLUMNS)
        print()
        for ln in notes:
            print(ln)
        rows = data_rows(out)
        record("peers", "scaling", rows, COLUMNS, notes=notes, params=params, plot=PLOT_TIME)
        record("peers", "scaling: peak RSS", [r for r in rows if r.get("rss") is not None], RSS_COLUMNS,
               notes=notes[:1], params=params, plot=PLOT_RSS)
    return print_scaling
