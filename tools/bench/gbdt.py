"""gbdt: LightGBM and XGBoost rankers beside streamrank linear on the big set: time, peak RSS and
test NDCG@10 on a held-out generated set."""
import statistics

from _benchutil import record, table

from .common import BIG_D, BIG_PRESET, C, EPS
from .children import GBDT
from .generated import generated_text, head_lines
from .models import h5_x_bytes, read_scores, read_streamrank_model
from .objectives import ndcg_at, text_scores
from .run import add_note, data_rows, echoed, json_value, mark_empty


def run(ctx):
    """Runs the section's tools (interleaved rounds), computes its figures; returns the function that
    prints (and records) its table, or None when it cannot run."""
    if ctx.big is None:
        return None
    import numpy as np
    args, models, env, py = ctx.args, ctx.models, ctx.env, ctx.py
    run_section, sr_train, convert_once = ctx.run_section, ctx.sr_train, ctx.convert_once
    ll, ll_why = ctx.peers["liblinear"]
    big = ctx.big
    import importlib.util
    gtext, gh5 = big["text"], big["h5"]
    if args.gbdt_rows and args.gbdt_rows < big["rows"]:
        gtext = head_lines(big["text"], big["dir"] / f"{big['stem']}-head{args.gbdt_rows}rows.txt",
                           rows=args.gbdt_rows)
        gh5 = gtext.with_suffix(".h5")
        convert_once(gtext, gh5, ("--n-features", str(BIG_D)))
    g_rows = h5_x_bytes(gh5)[1] if gh5.exists() else None
    ttext, tbytes = generated_text(big["dir"] / f"{BIG_PRESET}-s{args.test_scale:g}-test.txt", BIG_PRESET,
                                   args.test_scale, part="test")
    tools = [("streamrank linear (HDF5)", "sr", lambda r: [("train", sr_train(gh5, models / f"gbdt.sr.r{r}.h5"),
                                                              env)],
              lambda r: models / f"gbdt.sr.r{r}.h5", "", "streamrank")]
    for key, label, mod in (("lightgbm", "LightGBM lambdarank, 100 trees, num_threads=2", "lightgbm"),
                            ("xgboost", "XGBoost rank:ndcg, 100 trees, n_jobs=2", "xgboost")):
        have = importlib.util.find_spec(mod) is not None
        tools.append((label, key,
                      (lambda r, key=key: [("fit", [py, "-c", GBDT, key, gh5, ttext,
                                                    models / f"gbdt.{key}.r{r}.scores", str(BIG_D)], env)])
                      if have else None,
                      lambda r, key=key: models / f"gbdt.{key}.r{r}.scores",
                      "" if have else f"not available ({mod} is not installed in {py})", key))
    grows = run_section("gbdt", tools)
    sr_cols, W = [], []
    for row in grows:
        for res in row.get("ok", []):
            if row["kind"] == "streamrank":
                try:
                    W.append(read_streamrank_model(res["model"], "identity")[0])
                    sr_cols.append(row)
                except (OSError, ValueError, KeyError) as exc:
                    add_note(row, f"model unreadable: {exc}")
    Wm = np.stack(W, axis=1) if W else np.zeros((BIG_D, 1))
    S, yt, qt = text_scores(ttext, Wm, BIG_D)
    for row in grows:
        nd = []
        if row["kind"] == "streamrank":
            nd = [ndcg_at(S[:, k], yt, qt) for k in range(len(W))]
            if row.get("ok"):
                row["fit"] = statistics.median([s for s in (json_value(r, "seconds") for r in row["ok"])
                                                if s is not None] or [float("nan")])
        else:
            for res in row.get("ok", []):
                try:
                    sc = read_scores(res["model"])
                    if sc.size != yt.size:
                        raise ValueError(f"{sc.size} scores for {yt.size} test rows")
                    nd.append(ndcg_at(sc, yt, qt))
                except (OSError, ValueError) as exc:
                    add_note(row, f"scores unreadable: {exc}")
            if row.get("ok"):
                row["fit"] = statistics.median(json_value(r, "fit_seconds") or float("nan") for r in row["ok"])
                row["load"] = statistics.median(json_value(r, "load_seconds") or float("nan") for r in row["ok"])
                v = json_value(row["ok"][-1], "version")
                if v:
                    add_note(row, f"version {v}")
        if nd:
            row["ndcg"] = statistics.median(nd)
        mark_empty([row])
    n_test_q = int(np.unique(qt).size)

    def print_gbdt():
        print()
        cols = [("section", "section", None), ("tool", "tool", None),
                ("median", "median s (whole process)", "{:.2f}"), ("fit", "fit s (its own clock)", "{:.2f}"),
                ("load", "read HDF5 s", "{:.2f}"), ("runs", "each run s", None),
                ("rss", "peak RSS MB", "{:,.0f}"), ("ndcg", "test NDCG@10", "{:.4f}"),
                ("note", "note", None)]
        table(grows, cols)
        notes = []
        with echoed(notes):
            print()
            print(f"gbdt: trained on {gh5.name} ({g_rows if g_rows is None else f'{g_rows:,}'} rows of the big set"
                  f"{'' if gh5 == big['h5'] else f', its first {args.gbdt_rows:,} rows cut at a query boundary'}); "
                  f"tested on {ttext.name} ({yt.size:,} rows, {n_test_q:,} queries: {BIG_PRESET}, scale "
                  f"{args.test_scale:g}, seed 0, part test = other queries of the same relevance model; a different "
                  f"seed would be a different relevance model); streamrank: train --C {C:g} --tol {EPS:g}, its test "
                  f"scores computed here from w and the text in float64; LightGBM LGBMRanker(n_estimators=100, "
                  f"num_threads=2) and XGBoost XGBRanker(n_estimators=100, objective='rank:ndcg', n_jobs=2), defaults "
                  f"otherwise, each a process that reads the HDF5 with h5py (X float32), fits, and scores the test "
                  f"text (parsed by scikit-learn, included in the whole-process seconds); NDCG@10 as in nystroem")
        record("peers", "gbdt", data_rows(grows), cols, notes=notes,
               params={"preset": BIG_PRESET, "scale": args.big_scale, "gbdt_rows": args.gbdt_rows,
                       "test_scale": args.test_scale, "repeats": args.repeats})
    return print_gbdt
