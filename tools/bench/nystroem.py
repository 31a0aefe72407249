"""nystroem: streamrank's Nystroem RankSVM against scikit-learn's Nystroem + LIBLINEAR ranksvm on
MQ2008 Fold1, end to end, with each tool's test NDCG@10."""
import math
import statistics
from pathlib import Path

from _benchutil import record, table

from .common import C, EPS, GAMMA, N_FEATURES, NYS_M, find_text, plain_copy
from .children import SKLEARN_NYSTROEM
from .models import read_liblinear_model, read_nystroem_model, read_scores
from .objectives import linear_objective, ndcg_at, rbf_matrix, read_letor
from .run import add_note, data_rows, echoed, last_json, mark_empty, new_row, run_timed


def run(ctx):
    """Runs the section's tools (interleaved rounds), computes its figures; returns the function that
    prints (and records) its table, or None when it cannot run."""
    if ctx.data is None:
        return None
    import numpy as np
    args, logs, models, env, py = ctx.args, ctx.logs, ctx.models, ctx.env, ctx.py
    run_section, sr_train, convert_once = ctx.run_section, ctx.sr_train, ctx.convert_once
    ll, ll_why = ctx.peers["liblinear"]
    data, fold = ctx.data, ctx.fold
    h5, text = data["h5"], data["text"]
    ddir = Path(text).parent
    tsrc = find_text(fold, "test")
    nrows = []
    if tsrc is None:
        nrows.append(dict(new_row("nystroem", "(all)", f"skipped: no {fold}/test.txt[.gz]")))
    else:
        ttext = plain_copy(tsrc, ddir / "test.txt")
        th5 = ddir / "fold1.test.h5"
        convert_once(ttext, th5, ("--n-features", str(N_FEATURES)))
        nys = ("--method", "nystroem", "--kernel", "rbf", "--components", str(NYS_M), "--gamma", f"{GAMMA:g}")
        w = run_timed(sr_train(h5, models / "nys.warm.h5", nys), logs / "nystroem.warm", env=env,
                      timeout=args.timeout)
        if w["error"]:
            print(f"streamrank's untimed nystroem warm-up run failed: {w['error']}")
        svm = ddir / "nystroem.mapped.svm"
        tools = [(f"streamrank --method nystroem --components {NYS_M}", "sr_nys",
                  lambda r: [("train", sr_train(h5, models / f"nys.sr.r{r}.h5", nys), env)],
                  lambda r: models / f"nys.sr.r{r}.h5", "", "streamrank"),
                 (f"scikit-learn Nystroem({NYS_M}) + write SVMlight + LIBLINEAR -s 8", "sk_nys",
                  (lambda r: [("map", [py, "-c", SKLEARN_NYSTROEM, text, svm, models / f"nys.sk.r{r}.npz",
                                       repr(GAMMA), str(NYS_M), str(N_FEATURES)], env),
                              ("liblinear", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{EPS:g}", svm,
                                             models / f"nys.ll.r{r}.model"], env)]) if ll else None,
                  lambda r: models / f"nys.ll.r{r}.model", ll_why or "", "sklearn")]
        nrows = run_section("nystroem", tools)
        svm_mb = svm.stat().st_size / 1e6 if svm.exists() else None
        svm.unlink(missing_ok=True)
        X, I, J = data["X"], data["I"], data["J"]
        Xt, yt, qt = read_letor(ttext)
        for row in nrows:
            objs, nd, own, diff = [], [], [], []
            for n_r, res in enumerate(row.get("ok", [])):
                try:
                    if row["kind"] == "streamrank":
                        w, L, P, g = read_nystroem_model(res["model"])
                        if not math.isclose(g, GAMMA):
                            raise ValueError(f"{res['model']}: gamma {g}")
                        objs.append(linear_objective(w, rbf_matrix(X, L, g) @ P, I, J, C))
                        sc = models / f"nys.sr.r{n_r}.test.scores"
                        p = run_timed([py, "-m", "streamrank", "predict", res["model"], th5, "-o", sc],
                                      logs / f"nystroem.predict.r{n_r}", env=env, timeout=args.timeout)
                        if p["error"]:
                            raise ValueError(f"streamrank predict failed: {p['error']}")
                        s_pred = read_scores(sc)
                        s_here = rbf_matrix(Xt, L, g) @ P @ w
                        diff.append(float(np.max(np.abs(s_pred - s_here))))
                        nd.append(ndcg_at(s_pred, yt, qt))
                        j = last_json(res["out"])
                        if j and "objective" in j:
                            own.append(j["objective"])
                    else:
                        m = Path(res["model"])  # nys.ll.rR.model -> its round's nys.sk.rR.npz
                        m = m.with_name(m.name.replace("nys.ll.", "nys.sk.").replace(".model", ".npz"))
                        with np.load(m, allow_pickle=False) as a:
                            Lsk, Nsk = a["components"], a["normalization"]
                        Z = rbf_matrix(X, Lsk, GAMMA) @ Nsk.T
                        w = read_liblinear_model(res["model"], Z.shape[1])[:Z.shape[1]]
                        objs.append(linear_objective(w, Z, I, J, C))
                        nd.append(ndcg_at((rbf_matrix(Xt, Lsk, GAMMA) @ Nsk.T) @ w, yt, qt))
                except (OSError, ValueError, KeyError, IndexError) as exc:
                    add_note(row, f"model unreadable: {exc}")
            if row.get("ok") and row["kind"] == "sklearn":
                row["map_s"] = statistics.median(r["steps"]["map"][0] for r in row["ok"])
                row["ll_s"] = statistics.median(r["steps"]["liblinear"][0] for r in row["ok"])
                if svm_mb:
                    add_note(row, f"mapped file {svm_mb:,.0f} MB")
            if objs:
                row["objective"] = statistics.median(objs)
            if nd:
                row["ndcg"] = statistics.median(nd)
            if own:
                row["own"] = own[-1]
            if diff:
                add_note(row, f"predict's test scores vs this bench's from the model file: max |diff| "
                              f"{max(diff):.1e}")
            mark_empty([row])

    def print_nys():
        print()
        cols = [("section", "section", None), ("tool", "tool", None),
                ("median", "median s (end to end)", "{:.2f}"), ("map_s", "map + write s", "{:.2f}"),
                ("ll_s", "LIBLINEAR s", "{:.2f}"), ("runs", "each run s", None),
                ("rss", "peak RSS MB", "{:,.0f}"),
                ("objective", "objective on its own map (not comparable)", "{:.4f}"),
                ("own", "its own reported objective", "{:.4f}"), ("ndcg", "test NDCG@10", "{:.4f}"),
                ("note", "note", None)]
        table(nrows, cols)
        notes = []
        with echoed(notes):
            print()
            print(f"nystroem: MQ2008 Fold1 train, rbf gamma = {GAMMA:g}, m = {NYS_M} landmarks, C = {C:g}, eps = "
                  f"{EPS:g}; streamrank: train fold1.h5 --method nystroem --kernel rbf --components {NYS_M} --gamma "
                  f"{GAMMA:g} --C {C:g} --tol {EPS:g} (HDF5 in, model out); scikit-learn: load_svmlight_file, "
                  f"Nystroem(kernel='rbf', gamma={GAMMA:g}, n_components={NYS_M}, random_state=0) fitted on the "
                  f"training rows, dump_svmlight_file with qid (one process: 'map + write s'), then LIBLINEAR train -s "
                  f"8 -c {C:g} -e {EPS:g} on it ('LIBLINEAR s'); end to end = the sum; peak RSS the larger")
            print("nystroem objectives: 1/2||w||^2 + C sum over pairs max(0, 1 - w.(phi(x_i) - phi(x_j)))^2 in float64 "
                  "with each tool's own phi (streamrank: K(x, landmarks) projection from its model file; scikit-learn: "
                  "its Nystroem's transform, from the fitted arrays): two different maps, so the figures are not comparable. Test "
                  "NDCG@10 on Fold1 test.txt: streamrank predict's scores, scikit-learn's transform times LIBLINEAR's "
                  "w; NDCG@10 as LETOR 4.0's Eval-Score-4.0.pl computes it (gain 2^rel - 1, positions 1-2 undiscounted "
                  "then 1/log2(i), ties in file order, 0 for a query with fewer than 10 documents or no relevant "
                  "one, the mean over all queries: streamrank's letor4 convention)")
        record("peers", "nystroem", data_rows(nrows), cols, notes=notes,
               params={"gamma": GAMMA, "components": NYS_M, "C": C, "eps": EPS, "repeats": args.repeats})
    return print_nys
