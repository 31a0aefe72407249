"""bench_papers.py's parts for papers 002 (CLSRRank, ``--clsr``) and 003 (GAS, ``--gas``).

``--clsr``: five folds of MQ2008; CLSRRank with the rbf and the sigmoid kernel, 2,000 basis rows
drawn from the training rows (all 9,600 would need a 0.7 GB system and 2 TFLOP per gamma), lambda in
1e-12..1e-3 by decades and gamma in 2^-7, 2^-5, 2^-3, 2^-1 chosen on vali by MeanNDCG, against RankSVM
(linear, C by the two-stage rule on vali); letor4 test NDCG@10, MeanNDCG, MAP; training seconds.

``--gas``: five folds; GAS-E (MAP importance), GAS-L (pairwise importance) and importance alone
(c = 0) choose the top 5, 10 and 20 features on the training data (``--signed``), the tradeoff c of
GAS-E / GAS-L in 0.1, 0.3, 1 chosen on vali; a RankSVM on the chosen features (C two-stage on vali),
and on all 46; letor4 test NDCG@10 and MAP; the GAS pass's seconds.

``--gas`` (and ``--only gas-topk``) also: the selection a user gets from ``streamrank select-features
train.h5 -k K`` (GAS-E with MAP importance, tradeoff c = 0.5, unsigned: the command's defaults), K = 5
and 10, on each fold's training data; RankSVM (C two-stage on vali) on those features and on all 46;
letor4 test metrics in the columns of docs/benchmarks-archive.md's five-fold table, mean and std over folds.

Check: GAS on the whole of MQ2008 Fold1 train against brute force (scipy.stats.kendalltau per
query and pair of features, the letor4 evaluator per feature), printed with the largest differences.

Time against rows: the nested subsets S1 .. S1-S5 of MQ2008 (as ``--cs-srsvm``'s timing part), the
one CLSRRank pass (m = 500) and the GAS pass, each the median of 3 runs.

Out of core: generated data larger than the budget, both from the command line in a fresh process
with their peak RSS (``--only out-of-core``).
"""

import statistics
import time
from pathlib import Path

import numpy as np

from _benchutil import args_params, table_record

LAMBDAS = [10.0 ** -k for k in range(12, 2, -1)]
GAMMAS = [2.0 ** -7, 2.0 ** -5, 2.0 ** -3, 2.0 ** -1]
TOPS = (5, 10, 20)
TRADEOFFS = (0.1, 0.3, 1.0)
CLSR_BASIS = 2000


def _test_metrics(model, tds):
    from streamrank.evaluation.metrics import evaluate
    from streamrank.training.problem import read_labels
    sc = model.predict_dataset(tds)
    m = evaluate(read_labels(tds), sc[tds.row], tds.query_ptr, convention="letor4", qid=tds.qid).means
    return {"NDCG@10": m["NDCG@10"], "MeanNDCG": m["MeanNDCG"], "MAP": m["MAP"]}


def _summarise(rows, models, keys):
    out = []
    for name in models:
        mine = [r for r in rows if r["model"] == name]
        out.append({"fold": "mean", "model": name, **{k: float(np.mean([r[k] for r in mine])) for k in keys},
                    "seconds": float(np.mean([r["seconds"] for r in mine]))})
    return out


def clsr_quality(args, converted, have_mq2008):
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.training.clsr import train_clsr
    from streamrank.training.linear import train_linear
    folds = [int(f) for f in args.folds.split(",")]
    if not have_mq2008(args.data, folds):
        return
    print(f"\n== CLSRRank (paper 002) on MQ2008: {CLSR_BASIS} basis rows, lambda x gamma chosen on vali (MeanNDCG), "
          f"against RankSVM; letor4 test ==")
    rows = []
    for fold in folds:
        paths = {p: converted(args.workdir, args.data, fold, p) for p in ("train", "vali", "test")}
        with streamrank.open_dataset(paths["train"]) as ds, streamrank.open_dataset(paths["vali"]) as vds, \
                streamrank.open_dataset(paths["test"]) as tds:
            runs = [("RankSVM", lambda: train_linear(ds, valid=vds, C="two-stage", tol=1e-3))]
            for kern in ("rbf", "sigmoid"):
                runs.append((f"CLSRRank {kern}", lambda kern=kern: train_clsr(
                    ds, valid=vds, lam=LAMBDAS, kernel=kern, gamma=GAMMAS, components=CLSR_BASIS, seed=0,
                    memory_budget="8GB")))
            for name, run in runs:
                t = time.perf_counter()
                model, s = run()
                secs = time.perf_counter() - t
                r = {"fold": fold, "model": name, **_test_metrics(model, tds), "seconds": secs,
                     "setting": (f"C={s['C']:g}" if name == "RankSVM" else f"lambda={s['lambda']:g} gamma={s['gamma']:g}")}
                rows.append(r)
                print(f"  Fold{fold} {name}: {r['setting']} NDCG@10 {r['NDCG@10']:.4f} MAP {r['MAP']:.4f} "
                      f"({secs:.1f} s)", flush=True)
    rows += _summarise(rows, ["RankSVM", "CLSRRank rbf", "CLSRRank sigmoid"], ("NDCG@10", "MeanNDCG", "MAP"))
    print()
    table_record("papers", "clsr quality",
        rows, [("fold", "fold", None), ("model", "model", None), ("setting", "chosen", None),
                 ("NDCG@10", "NDCG@10", "{:.4f}"), ("MeanNDCG", "MeanNDCG", "{:.4f}"), ("MAP", "MAP", "{:.4f}"),
                 ("seconds", "train s (all candidates)", "{:.1f}")], params=args_params(args))


def gas_quality(args, converted, have_mq2008):
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.io.feature_subset import FeatureSubset
    from streamrank.selection.gas import gas_scores
    from streamrank.training.linear import train_linear
    from streamrank.training.problem import metric_value, read_labels
    from streamrank.evaluation.metrics import evaluate
    folds = [int(f) for f in args.folds.split(",")]
    if not have_mq2008(args.data, folds):
        return
    print("\n== GAS (paper 003) on MQ2008: top 5 / 10 / 20 features by GAS-E (MAP), GAS-L (pairwise) and importance "
          "alone (c = 0), signed; c of GAS-E / GAS-L in 0.1, 0.3, 1 chosen on vali; RankSVM (C two-stage on vali) "
          "on them; letor4 test ==")
    rows = []
    for fold in folds:
        paths = {p: converted(args.workdir, args.data, fold, p) for p in ("train", "vali", "test")}
        with streamrank.open_dataset(paths["train"]) as ds, streamrank.open_dataset(paths["vali"]) as vds, \
                streamrank.open_dataset(paths["test"]) as tds:
            vy = read_labels(vds)
            t = time.perf_counter()
            scores = {"GAS-E": gas_scores(ds, importance="map", signed=True),
                      "GAS-L": gas_scores(ds, importance="pairwise", signed=True)}
            gas_s = (time.perf_counter() - t) / 2
            scores["importance"] = scores["GAS-E"]

            def ranksvm(cols):
                sub, vsub = FeatureSubset(ds, cols), FeatureSubset(vds, cols)
                model, _ = train_linear(sub, valid=vsub, C="two-stage", tol=1e-3)
                from streamrank.training.problem import attach_features
                attach_features(model, cols, ds.n_features)
                v = metric_value(evaluate(vy, model.predict_dataset(vds)[vds.row], vds.query_ptr), "map")
                return model, v

            full, _ = ranksvm(np.arange(ds.n_features))
            rows.append({"fold": fold, "model": "all 46", "top": 46, **_test_metrics(full, tds), "seconds": 0.0})
            for name, res in scores.items():
                for top in TOPS:
                    cands = [0.0] if name == "importance" else TRADEOFFS
                    best = None
                    for c in cands:
                        cols = res.greedy(top, tradeoff=c)[0]
                        model, v = ranksvm(cols)
                        if best is None or v > best[0]:
                            best = (v, c, model)
                    r = {"fold": fold, "model": f"{name} top {top}", "top": top, "c": best[1],
                         **_test_metrics(best[2], tds), "seconds": gas_s}
                    rows.append(r)
            print(f"  Fold{fold}: GAS pass {gas_s:.1f} s; " + "; ".join(
                f"{r['model']} MAP {r['MAP']:.4f}" for r in rows if r["fold"] == fold), flush=True)
    names = ["all 46"] + [f"{n} top {t}" for n in ("GAS-E", "GAS-L", "importance") for t in TOPS]
    rows += _summarise(rows, names, ("NDCG@10", "MeanNDCG", "MAP"))
    print()
    table_record("papers", "gas quality",
        [r for r in rows if r["fold"] == "mean"], [("model", "features", None), ("NDCG@10", "NDCG@10", "{:.4f}"),
                                                    ("MeanNDCG", "MeanNDCG", "{:.4f}"), ("MAP", "MAP", "{:.4f}")], params=args_params(args))
    print("  (mean over the folds; the paper's observation: selection helps most when features differ in importance "
          "and are redundant)")


TOPK_COLUMNS = ("NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "P@1", "P@3", "P@5", "P@10", "MAP", "MeanNDCG")


def gas_topk(args, converted, have_mq2008):
    """RankSVM on the top 5 and top 10 features of ``select-features -k K`` (map, c = 0.5) beside all
    46, five folds (module docstring)."""
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.evaluation.metrics import evaluate
    from streamrank.io.feature_subset import FeatureSubset
    from streamrank.selection.gas import gas_scores
    from streamrank.training.linear import train_linear
    from streamrank.training.problem import attach_features, read_labels
    folds = [int(f) for f in args.folds.split(",")]
    if not have_mq2008(args.data, folds):
        return
    print("\n== RankSVM on the features of `streamrank select-features train.h5 -k K` (GAS-E: MAP importance at its "
          "expected value over tie orders, c = 0.5, unsigned; constant features never selected), K = 5 and 10, "
          "beside all 46 features; C two-stage on vali; letor4 test ==")
    rows, models = [], ["RankSVM, all 46", "RankSVM, GAS top 10", "RankSVM, GAS top 5"]
    for fold in folds:
        paths = {p: converted(args.workdir, args.data, fold, p) for p in ("train", "vali", "test")}
        with streamrank.open_dataset(paths["train"]) as ds, streamrank.open_dataset(paths["vali"]) as vds, \
                streamrank.open_dataset(paths["test"]) as tds:
            t = time.perf_counter()
            res = gas_scores(ds, importance="map", tradeoff=0.5)
            gas_s = time.perf_counter() - t
            ty = read_labels(tds)
            for name, cols in ((models[0], np.arange(ds.n_features)), (models[1], res.greedy(10)[0]),
                               (models[2], res.greedy(5)[0])):
                t = time.perf_counter()
                model, s = train_linear(FeatureSubset(ds, cols), valid=FeatureSubset(vds, cols), C="two-stage",
                                        tol=1e-3)
                attach_features(model, cols, ds.n_features)
                secs = time.perf_counter() - t
                m = evaluate(ty, model.predict_dataset(tds)[tds.row], tds.query_ptr, convention="letor4",
                             ks=range(1, 11), qid=tds.qid).means
                rows.append({"fold": fold, "model": name, **{k: m[k] for k in TOPK_COLUMNS}, "C": s["C"],
                             "seconds": secs,
                             "features": "all" if len(cols) == ds.n_features else ",".join(str(c + 1) for c in cols)})
            print(f"  Fold{fold}: GAS pass {gas_s:.2f} s; constant within every query: "
                  f"{[int(f) + 1 for f in np.flatnonzero(res.constant)]}; " + "; ".join(
                      f"{r['model']} [{r['features']}] C={r['C']:g} MAP {r['MAP']:.4f} NDCG@10 {r['NDCG@10']:.4f}"
                      for r in rows if r["fold"] == fold), flush=True)
    out = []
    for name in models:
        mine = [r for r in rows if r["model"] == name]
        for stat, f in (("mean", np.mean), ("std", lambda v: np.std(v, ddof=1) if len(v) > 1 else float("nan"))):
            out.append({"model": name, "fold": stat, **{k: float(f([r[k] for r in mine])) for k in TOPK_COLUMNS}})
    print()
    table_record("papers", "gas topk",
        out, [("model", "method", None), ("fold", "fold", None)] + [(k, k, "{:.4f}") for k in TOPK_COLUMNS], params=args_params(args))
    print("  (std: the sample standard deviation over the folds, ddof = 1, as streamrank cv prints it)")


def gas_check(args, converted, have_mq2008):
    """GAS on the whole of MQ2008 Fold1 train against brute force: scipy.stats.kendalltau per query
    and pair of features; importance against the NumPy twin of the expected MAP over tie orders
    (tests/selection/tie_oracle.py, itself checked there against every order of small ties), per
    feature and per negated feature."""
    import streamrank
    streamrank.configure()  # the command line's process settings
    import sys
    from scipy.stats import kendalltau
    from streamrank.selection.gas import gas_scores
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "selection"))
    import tie_oracle
    if not have_mq2008(args.data, (1,)):
        return
    path = converted(args.workdir, args.data, 1, "train")
    with streamrank.open_dataset(path) as ds:
        t = time.perf_counter()
        res = gas_scores(ds, importance="map", signed=True)
        ours = time.perf_counter() - t
        X, y = ds.read(0, ds.n_rows)
        qp = ds.query_ptr
    y = y.astype(np.float64)
    d = X.shape[1]
    t = time.perf_counter()
    imp = np.array([[np.mean([tie_oracle.expected_measure(sgn * X[a:b, f], y[a:b], "map")
                              for a, b in zip(qp[:-1], qp[1:])]) for f in range(d)] for sgn in (1.0, -1.0)])
    sign = np.where(imp[1] > imp[0], -1, 1)
    w = np.where(sign > 0, imp[0], imp[1])
    sums, counts = np.zeros((d, d)), np.zeros((d, d))
    for a, b in zip(qp[:-1], qp[1:]):
        if b - a < 2:
            continue
        for i in range(d):
            for j in range(i + 1, d):
                tau = kendalltau(X[a:b, i], X[a:b, j]).statistic
                if not np.isnan(tau):
                    sums[i, j] += tau
                    counts[i, j] += 1
    brute_s = time.perf_counter() - t
    iu = np.triu_indices(d, 1)
    with np.errstate(invalid="ignore"):
        E = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan) * np.outer(sign, sign)
    mine = res.similarity[iu]
    same_nan = bool(np.array_equal(np.isnan(mine), np.isnan(E[iu])))
    ok = ~np.isnan(mine)
    print(f"\n== GAS on the whole of MQ2008 Fold1 train ({ds.n_rows:,} rows, {len(qp) - 1} queries, {d} features) "
          f"against brute force ==")
    print(f"  importance (expected MAP over tie orders, signed; constant features {np.flatnonzero(res.constant) + 1} "
          f"never selected): largest difference {np.abs(res.importance - w).max():.1e}; signs equal: "
          f"{bool(np.array_equal(res.sign, sign))}")
    print(f"  similarity ({iu[0].size} pairs): undefined pairs equal: {same_nan}; largest difference "
          f"{np.abs(mine[ok] - E[iu][ok]).max():.1e}")
    print(f"  streamrank's pass {ours:.2f} s; the brute force {brute_s:.0f} s")


def timing(args, subsets):
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.selection.gas import gas_scores
    from streamrank.training.clsr import train_clsr
    print("\n== one-pass methods, time against training rows (MQ2008 S1 .. S1-S5), median of 3 ==")
    rows = []
    for p in subsets(args):
        with streamrank.open_dataset(p) as ds:
            train_clsr(ds, lam=1e-3, gamma=2.0 ** -5, components=500)  # kernels loaded before the clock
            tc, tg = [], []
            for _ in range(3):
                t = time.perf_counter()
                _, s = train_clsr(ds, lam=1e-3, gamma=2.0 ** -5, components=500)
                tc.append(time.perf_counter() - t)
                t = time.perf_counter()
                gas_scores(ds, importance="map", signed=True)
                tg.append(time.perf_counter() - t)
            rows.append({"rows": ds.n_rows, "queries": ds.n_queries, "clsr": statistics.median(tc),
                         "gas": statistics.median(tg)})
    for r in rows:
        r["clsr_us"] = 1e6 * r["clsr"] / r["rows"]
        r["gas_us"] = 1e6 * r["gas"] / r["rows"]
    table_record("papers", "clsr gas timing",
        rows, [("rows", "rows", "{:,}"), ("queries", "queries", "{:,}"), ("clsr", "CLSRRank m=500 s", "{:.3f}"),
                 ("clsr_us", "us/row", "{:.1f}"), ("gas", "GAS pass s", "{:.3f}"), ("gas_us", "us/row", "{:.1f}")], params=args_params(args))


def out_of_core(args):
    from _rss import cli_peak_rss
    from streamrank.synthetic import write_hdf5
    from streamrank.units import parse_size
    import streamrank
    streamrank.configure()  # the command line's process settings
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"\n== out of core: CLSRRank and GAS on generated data larger than --memory-budget {args.ooc_budget} ==")
    rows = []
    for name, preset, scale, cmd in (
            ("CLSRRank m=500", "mslr30k", args.ooc_scale, ["train", "{d}", "-o", "{w}/clsr.h5", "--method", "clsr",
                                                           "--components", "500", "--gamma", "0.01", "--lambda",
                                                           "0.001", "--quiet"]),
            ("GAS (map, signed)", "mq2007", args.gas_ooc_scale, ["select-features", "{d}", "-k", "10", "--signed",
                                                                 "-o", "{w}/gas.h5", "--quiet"])):
        data = work / f"{preset}-{scale:g}.h5"
        if not data.exists():
            write_hdf5(data, preset, scale=scale, seed=0)
        with streamrank.open_dataset(data) as ds:
            x_mb = 4 * ds.n_rows * ds.n_features / 1e6
            shape = f"{ds.n_rows:,} x {ds.n_features}"
        argv = [a.format(d=data, w=work) for a in cmd] + ["--memory-budget", args.ooc_budget]
        peak, wall, rc, err = cli_peak_rss(argv)
        if rc != 0:
            raise RuntimeError(f"{name} failed:\n{err[-2000:]}")
        rows.append({"what": name, "data": f"{preset} x{scale:g} ({shape}, X {x_mb:.0f} MB)", "peak": peak,
                     "wall": wall, "under": peak <= parse_size(args.ooc_budget) / 1e6})
    table_record("papers", "clsr gas out of core",
        rows, [("what", "command", None), ("data", "data", None), ("peak", "peak RSS MB", "{:.0f}"),
                 ("wall", "wall s", "{:.1f}"), ("under", "under budget", None)], params=args_params(args))
