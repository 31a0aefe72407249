"""big: linear RankSVM on a generated MSLR-WEB30K-like set (1M rows at the default --big-scale):
streamrank from HDF5, in half of X's memory, and from the text, against LIBLINEAR ranksvm; the
objectives from one float64 pass over the text."""
import math
import statistics
import time

from _benchutil import record, table

from .common import BIG_D, BIG_PRESET, C, EPS

NO_SOLVE_EPS = 1e30  # LIBLINEAR's -e that stops TRON before its first iteration
from .models import read_liblinear_model, read_streamrank_model
from .objectives import pair_hinge_sums, settle_objectives, text_scores
from .run import add_note, data_rows, echoed, json_value, last_json, mark_empty


def run(ctx):
    """Runs the section's tools (interleaved rounds), computes its figures; returns the function that
    prints (and records) its table, or None when it cannot run."""
    if ctx.big is None:
        return None
    import numpy as np
    args, models, env = ctx.args, ctx.models, ctx.env
    run_section, sr_train, sr_convert = ctx.run_section, ctx.sr_train, ctx.sr_convert
    ll, ll_why = ctx.peers["liblinear"]
    big = ctx.big
    bh5, btext = big["h5"], big["text"]
    budget = f"{big['x_bytes'] / 2 / 1e6:.0f}MB"
    conv_h5 = big["dir"] / "big.converted.h5"

    def text_steps(r):
        conv_h5.unlink(missing_ok=True)  # a fresh conversion every round (convert resumes otherwise)
        return [("convert", sr_convert(btext, conv_h5), env),
                ("train", sr_train(conv_h5, models / f"big.sr_text.r{r}.h5"), env)]

    tools = [("streamrank (HDF5)", "sr_h5",
              lambda r: [("train", sr_train(bh5, models / f"big.sr_h5.r{r}.h5"), env)],
              lambda r: models / f"big.sr_h5.r{r}.h5", "", "streamrank"),
             (f"streamrank (HDF5, --memory-budget {budget} = X/2)", "sr_budget",
              lambda r: [("train", sr_train(bh5, models / f"big.sr_budget.r{r}.h5", ("--memory-budget", budget)),
                          env)],
              lambda r: models / f"big.sr_budget.r{r}.h5", "", "streamrank"),
             ("streamrank (text: convert + train)", "sr_text", text_steps,
              lambda r: models / f"big.sr_text.r{r}.h5", "", "streamrank"),
             ("LIBLINEAR ranksvm -s 8 (whole run)", "liblinear",
              (lambda r: [("train", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{EPS:g}", btext,
                                     models / f"big.liblinear.r{r}.model"], env)]) if ll else None,
              lambda r: models / f"big.liblinear.r{r}.model", ll_why or "", "liblinear"),
             # LIBLINEAR's solve alone (issue 34): its whole run less this one, which reads the text,
             # builds its problem, computes f and the gradient at w = 0 and stops there (TRON's test
             # ||g|| <= eps ||g0|| holds at once for so large an eps), then writes its model
             (f"LIBLINEAR ranksvm -s 8 -e {NO_SOLVE_EPS:g} (read + one gradient: no solve)", "liblinear_parse",
              (lambda r: [("train", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{NO_SOLVE_EPS:g}", btext,
                                     models / f"big.liblinear_parse.r{r}.model"], env)]) if ll else None,
              lambda r: models / f"big.liblinear_parse.r{r}.model", ll_why or "", "liblinear_parse")]
    brows = run_section("big", tools)
    conv_h5.unlink(missing_ok=True)
    # objectives: every model's scores from one float64 pass over the text, then per query
    cols, W = [], []
    for row in brows:
        for res in (row.get("ok", []) if row["kind"] != "liblinear_parse" else []):
            try:
                if row["kind"] == "streamrank":
                    w = read_streamrank_model(res["model"], "identity")[0]
                else:
                    w = read_liblinear_model(res["model"], BIG_D)
                if w.size != BIG_D:
                    raise ValueError(f"{res['model']}: {w.size} weights, expected {BIG_D}")
                cols.append((row, res))
                W.append(w)
            except (OSError, ValueError, KeyError, IndexError) as exc:
                add_note(row, f"model unreadable: {exc}")
        if row.get("ok"):
            if row["kind"] == "streamrank":
                row["solve"] = statistics.median([s for s in (json_value(r, "seconds") for r in row["ok"])
                                                  if s is not None] or [float("nan")])
            if row["key"] == "sr_text":
                row["conv"] = statistics.median(r["steps"]["convert"][0] for r in row["ok"])
    if W:
        t = time.perf_counter()
        Wm = np.stack(W, axis=1)
        S, y, qid = text_scores(btext, Wm, BIG_D)
        tot, n_pairs = pair_hinge_sums(S, y, qid)
        objs = {}
        for k, (row, res) in enumerate(cols):
            objs.setdefault(id(row), []).append(0.5 * float(Wm[:, k] @ Wm[:, k]) + C * float(tot[k]))
            j = last_json(res["out"])
            if row["kind"] == "streamrank" and j and "objective" in j:
                row["own"] = j["objective"]
        settle_objectives(brows, objs)
        big["pairs"], big["obj_s"] = n_pairs, time.perf_counter() - t
        del S
    by = {r["key"]: r for r in brows}
    lib = by["liblinear"].get("median")
    ratios = []
    if lib:
        for key, what, val in (("sr_h5", "streamrank solve (HDF5, its --json seconds) / LIBLINEAR whole run",
                                by["sr_h5"].get("solve")),
                               ("sr_h5", "streamrank train (HDF5, whole process) / LIBLINEAR whole run",
                                by["sr_h5"].get("median")),
                               ("sr_budget", "streamrank train (HDF5, --memory-budget X/2, whole process) / "
                                "LIBLINEAR whole run", by["sr_budget"].get("median")),
                               ("sr_text", "streamrank text to model (convert + train) / LIBLINEAR whole run",
                                by["sr_text"].get("median"))):
            if val is not None and not math.isnan(val):
                ratios.append(f"{what}: {val:.2f} / {lib:.2f} = {val / lib:.2f}")
        parse = by["liblinear_parse"].get("median")
        sr_solve = by["sr_h5"].get("solve")
        if parse and sr_solve is not None and not math.isnan(sr_solve) and lib > parse:
            ratios.append(f"streamrank solve (HDF5, its --json seconds) / LIBLINEAR solve alone (whole run - "
                          f"read + one gradient): {sr_solve:.2f} / ({lib:.2f} - {parse:.2f}) = "
                          f"{sr_solve / (lib - parse):.2f} (issue 34's aim: 0.25)")
        lrss = by["liblinear"].get("rss")
        for key in ("sr_h5", "sr_budget", "sr_text"):
            if lrss and by[key].get("rss"):
                ratios.append(f"peak RSS {by[key]['tool']} / LIBLINEAR: {by[key]['rss']:,.0f} / {lrss:,.0f} MB = "
                              f"{by[key]['rss'] / lrss:.2f}")
    mark_empty(brows)

    took = f"; took {big['obj_s']:.0f} s" if "obj_s" in big else ""

    def print_big():
        print()
        cols = [("section", "section", None), ("tool", "tool", None),
                ("median", "median s (whole process)", "{:.2f}"), ("solve", "solver s (--json)", "{:.2f}"),
                ("conv", "convert s", "{:.2f}"), ("runs", "each run s", None),
                ("rss", "peak RSS MB", "{:,.0f}"), ("objective", "sq-hinge primal objective", "{:.4f}"),
                ("rel", "rel. to lowest", "{:.2e}"), ("own", "its own reported objective", "{:.4f}"),
                ("note", "note", None)]
        table(brows, cols)
        notes = []
        with echoed(notes):
            print()
            print(f"big: {big['text']} ({big['rows']:,} rows, {BIG_D} features, {big['bytes'] / 1e6:,.0f} MB, "
                  f"{big.get('pairs', 0):,} pairs), C = {C:g}, eps = {EPS:g}; streamrank: train {big['h5'].name} "
                  f"--C {C:g} --tol {EPS:g} --json (converted once, untimed; X in HDF5 {big['x_bytes'] / 1e6:,.0f} MB)"
                  f", then with --memory-budget {budget}, and from the text (convert + train: two processes, seconds "
                  f"summed, peak RSS the larger); LIBLINEAR: train -s 8 -c {C:g} -e {EPS:g} TEXT MODEL")
            print(f"big objectives: 1/2||w||^2 + C sum over pairs max(0, 1 - w.(x_i - x_j))^2 in float64, X parsed "
                  f"here from the text (scikit-learn's parser, 64 MB blocks), per query with a dense margin matrix "
                  f"(no list of pairs){took}")
            for ln in ratios:
                print("big ratio: " + ln)
        record("peers", "big", data_rows(brows), cols, notes=notes,
               params={"preset": BIG_PRESET, "scale": args.big_scale, "rows": big["rows"], "repeats": args.repeats,
                       "C": C, "eps": EPS})
    return print_big
