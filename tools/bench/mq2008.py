"""MQ2008 Fold1 for the startup, firstuse, linear and exact sections: the data (copied, converted,
parsed here in float64 with its pairs), the objectives of every model after the timed runs, and the
first table (printed, and recorded one section at a time)."""
import math
import statistics
from pathlib import Path

from _benchutil import record, table

from .common import C, EPS, GAMMA, find_text, first_time_at, plain_copy, solver_trace
from .models import read_libsvm_model, read_liblinear_model, read_streamrank_model, read_svmrank_model
from .objectives import kernel_objective, linear_objective, pairs_of, read_letor
from .run import data_rows, last_json, mark_empty, run_timed

COLUMNS = [("section", "section", None), ("tool", "tool", None), ("median", "median s", "{:.2f}"),
           ("runs", "each run s", None), ("x_fastest", "x fastest", "{:.2f}"),
           ("rss", "peak RSS MB", "{:,.0f}"), ("objective", "sq-hinge primal objective", "{:.4f}"),
           ("rel", "rel. to lowest", "{:.2e}"), ("l1", "L1-hinge objective (own loss)", "{:.4f}"),
           ("note", "note", None)]


def load(ctx):
    """Sets ``ctx.data`` (and ``ctx.fold``) when a section needs MQ2008 Fold1."""
    import numpy as np
    args, logs, env, py, work, only, rows = ctx.args, ctx.logs, ctx.env, ctx.py, ctx.work, ctx.only, ctx.rows
    ctx.fold = fold = Path(args.data) / "Fold1"
    if not ("linear" in only or "exact" in only or "nystroem" in only or "firstuse" in only):
        return
    src = find_text(fold, "train") if fold.is_dir() else None
    if src is None:
        msg = (f"MQ2008 not found: no {fold}/train.txt or train.txt.gz (LETOR 4.0 text); pass --data DIR, "
               f"the folder holding Fold1..Fold5")
        print(msg)
        ctx.status = 2
        for sec in ("linear", "exact", "nystroem", "firstuse"):
            if sec in only:
                rows.append({"section": sec, "tool": "(all)", "note": "skipped: MQ2008 not found"})
    else:
        ddir = work / "data"
        ddir.mkdir(exist_ok=True)
        text = plain_copy(src, ddir / "train.txt")
        h5 = ddir / "fold1.h5"
        h5.unlink(missing_ok=True)
        conv = run_timed([py, "-m", "streamrank", "convert", text, "-o", h5, "--json"], logs / "convert.once",
                         env=env, timeout=args.timeout)
        if conv["error"]:
            print(f"streamrank convert of {text} failed ({conv['error']}); streamrank rows will fail too")
        X, y, qid = read_letor(text)
        I, J = pairs_of(y, qid)
        n_q = len(np.unique(qid))
        ctx.data = {"text": text, "h5": h5, "X": X, "I": I, "J": J, "n_q": n_q}
        print(f"MQ2008 Fold1 train ({src}): {X.shape[0]:,} rows, {n_q} queries, {X.shape[1]} features, "
              f"{I.size:,} pairs; copied uncompressed to {text}")
        del X, y, qid, I, J


def objectives(ctx):
    """Every model's objective, computed here after the section's timed runs; the exact section's
    times to reach libsvm-ranksvm's objective and f* (1 + 1e-3); ratios to the fastest."""
    data, rows, notes, exact_ref = ctx.data, ctx.rows, ctx.notes, ctx.exact_ref
    if not data:
        return
    X, I, J = data["X"], data["I"], data["J"]
    d = X.shape[1]
    for row in rows:
        if not row.get("ok"):
            continue
        objs, own, l1 = [], [], []
        for res in row["ok"]:
            try:
                if row["kind"] == "streamrank":
                    expect = "exact" if row["section"] == "exact" else "identity"
                    w, S, params = read_streamrank_model(res["model"], expect)
                    if row["section"] == "exact":
                        if params.get("kernel") != "rbf" or not math.isclose(params.get("gamma"), GAMMA):
                            raise ValueError(f"{res['model']}: kernel {params.get('kernel')} gamma "
                                             f"{params.get('gamma')}")
                        objs.append(kernel_objective(w, S, GAMMA, X, I, J, C))
                    else:
                        objs.append(linear_objective(w, X, I, J, C))
                    j = last_json(res["out"])
                    if j and "objective" in j:
                        own.append(j["objective"])
                elif row["kind"] == "liblinear":
                    objs.append(linear_objective(read_liblinear_model(res["model"], d), X, I, J, C))
                elif row["kind"] == "svmrank":
                    l1.append(linear_objective(read_svmrank_model(res["model"], d), X, I, J, C, loss="l1"))
                elif row["kind"] == "libsvm":
                    coef, S, g = read_libsvm_model(res["model"], d)
                    if not math.isclose(g, GAMMA):
                        raise ValueError(f"{res['model']}: gamma {g}")
                    objs.append(kernel_objective(coef, S, GAMMA, X, I, J, C))
            except (OSError, ValueError, KeyError, IndexError) as exc:
                row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + f"model unreadable: {exc}"
        if objs:
            row["objective"] = statistics.median(objs)
            if max(objs) - min(objs) > 1e-12 * abs(row["objective"]):
                notes.append((row["section"], f"{row['tool']}: the objective changed between rounds: "
                             + ", ".join(f"{o:.6f}" for o in objs) + " (the table shows the median)"))
        if l1:
            row["l1"] = statistics.median(l1)
        if own:
            rel = abs(own[-1] - objs[-1]) / abs(objs[-1])
            why = (" (its data are float32 in HDF5, the text's are read here in float64)"
                   if row["section"] == "linear" else
                   " (it reports the function it minimises, with Q' = float32(K) + jitter I in place of K: "
                   "streamrank/cache/kernel_cache.py)")
            notes.append((row["section"], f"{row['tool']}: its own reported objective {own[-1]:.6f}, this bench's "
                         f"{objs[-1]:.6f}, relative difference {rel:.1e}{why}"))
    # exact: when streamrank's run reached libsvm-ranksvm's final objective and f* (1 + 1e-3)
    sr_row = next((r for r in rows if r["section"] == "exact" and r.get("kind") == "streamrank"
                   and r.get("objective") is not None and r.get("ok")), None)
    ls_row = next((r for r in rows if r["section"] == "exact" and r.get("kind") == "libsvm"
                   and r.get("objective") is not None), None)
    if sr_row is not None:
        reach_ls, reach_opt = [], []
        for res in sr_row["ok"]:
            trace = solver_trace(res["err"])
            j = last_json(res["out"])
            if not trace or not j or "objective" not in j:
                continue
            # streamrank logs the function it minimises (Q' = float32(K) + jitter I): targets
            # in this bench's units are scaled by its final own / this bench's objective
            scale = j["objective"] / sr_row["objective"]
            # the whole process's rest: start-up, Q and the preconditioner before the solve,
            # saving the model after it (counted as if before: an upper bound); the solve's
            # own seconds, not its last iteration's, so its final gap estimate is not
            solve_s = (j.get("candidates") or [{}])[-1].get("seconds", trace[-1][1])
            setup = res["wall_s"] - solve_s
            if ls_row is not None:
                reach_ls.append(first_time_at(trace, ls_row["objective"] * scale, setup))
            f_star = min(j["objective"], exact_ref) if exact_ref is not None else j["objective"]
            reach_opt.append(first_time_at(trace, f_star * (1 + 1e-3), setup))
        reach_ls = [x for x in reach_ls if x is not None]
        reach_opt = [x for x in reach_opt if x is not None]
        if reach_ls and ls_row is not None and ls_row.get("median"):
            t = statistics.median(reach_ls)
            notes.append(("exact", f"exact: streamrank reached libsvm-ranksvm's final objective "
                                   f"{ls_row['objective']:.4f} "
                         f"after {t:.2f} s of its process (median; {t / ls_row['median']:.2f}x libsvm-ranksvm's "
                         f"{ls_row['median']:.2f} s run): " + ", ".join(f"{x:.2f}" for x in reach_ls) + " s"))
        if reach_opt:
            notes.append(("exact", "exact: streamrank reached f* (1 + 1e-3), f* the lower of its own final objective "
                                   "and "
                         "its untimed warm-up's at --tol 1e-7"
                         + (f" ({exact_ref:.6f} in its own units)" if exact_ref is not None else "") + ", after "
                         + ", ".join(f"{x:.2f}" for x in reach_opt) + " s of its process"))
    for sec in ("linear", "exact"):
        comp = [r for r in rows if r["section"] == sec and r.get("objective") is not None]
        if comp:
            low = min(r["objective"] for r in comp)
            for r in comp:
                r["rel"] = (r["objective"] - low) / abs(low)
        timed = [r for r in rows if r["section"] == sec and r.get("median") is not None
                 and r.get("kind") != "svmrank"]
        if timed:
            fastest = min(r["median"] for r in timed)
            for r in timed:
                r["x_fastest"] = r["median"] / fastest


def print_table(ctx):
    """The first table (startup, firstuse, linear, exact rows), its notes, and one record a section."""
    args, only, data, rows, notes = ctx.args, ctx.only, ctx.data, ctx.rows, ctx.notes
    mark_empty(rows)
    text = {}
    if rows:
        print()
        table(rows, COLUMNS)
        print()
    if "linear" in only and data:
        text["linear"] = [
            f"linear: MQ2008 Fold1 train, C = {C:g}, eps = {EPS:g} (||g|| <= eps ||g(0)||); streamrank: train "
            f"DATA -o MODEL --C {C:g} --tol {EPS:g} --json (DATA converted once, untimed, or, in the text row, "
            f"convert TEXT -o DATA then train: two processes, seconds summed, peak RSS the larger); LIBLINEAR: "
            f"train -s 8 -c {C:g} -e {EPS:g} TEXT MODEL; SVMrank: svm_rank_learn -c {C * data['n_q']:g} TEXT "
            f"MODEL, which minimises 1/2||w||^2 + (C'/{data['n_q']} queries) sum of L1 hinges = the L1-hinge "
            f"objective at C = {C:g}: a different function, so it has no squared-hinge objective here"]
        print(text["linear"][0])
    if "exact" in only and data:
        text["exact"] = [
            f"exact: rbf gamma = {GAMMA:g}, C = {C:g}, eps = {EPS:g}; streamrank: train DATA --method exact --kernel "
            f"rbf --gamma {GAMMA:g}; libsvm-ranksvm: svm-train -s 0 -t 2 -g {GAMMA:g} -c {C:g} -e {EPS:g} -m MB "
            f"TEXT MODEL with OMP_NUM_THREADS={args.omp_threads}; objective 1/2 beta^T K beta + C sum max(0, 1 - "
            f"(K beta)_i + (K beta)_j)^2 from each model's coefficients and support rows (K in float64)"]
        print(text["exact"][0])
    if data and ("linear" in only or "exact" in only):
        line = ("objectives: computed by this bench in float64 from each model file over the explicit pairs of the "
                "text file; rel. to lowest = (f - lowest f of the section) / lowest f")
        print(line)
        for sec in ("linear", "exact"):
            if sec in text:
                text[sec].append(line)
    for sec, n in notes:
        print("note: " + n)
        text.setdefault(sec, []).append("note: " + n)
    footer = (f"seconds: wall-clock medians of {args.repeats} round(s), interleaved; peak RSS: the largest over the "
              f"rounds, MB = 10^6 bytes; x fastest: median over the section's fastest (SVMrank left out)")
    params = {"repeats": args.repeats, "C": C, "eps": EPS}
    for sec in ("startup", "firstuse", "linear", "exact"):
        sec_rows = data_rows(rows, sec)
        if sec_rows:
            p = dict(params, gamma=GAMMA) if sec == "exact" else params
            if sec == "firstuse":
                p = dict(params, commands=args.firstuse_commands)
            record("peers", sec, sec_rows, COLUMNS, notes=text.get(sec, []) + [footer], params=p)
