"""exact: exact kernel RankSVM (rbf, gamma = 2^-5, C = 1, eps = 1e-3) on MQ2008 Fold1: streamrank
against libsvm-ranksvm."""
import math

from .common import C, EPS, GAMMA
from .run import last_json, run_timed


def run(ctx):
    """Appends the section's rows to the first table (``ctx.rows``); sets ``ctx.exact_ref`` (the
    untimed --tol 1e-7 run's objective)."""
    if ctx.data is None:
        return
    args, logs, models, env = ctx.args, ctx.logs, ctx.models, ctx.env
    rows, data, peers = ctx.rows, ctx.data, ctx.peers
    run_section, sr_train = ctx.run_section, ctx.sr_train
    h5, text = data["h5"], data["text"]
    exact = ("--method", "exact", "--kernel", "rbf", "--gamma", f"{GAMMA:g}")
    # the untimed warm-up runs to --tol 1e-7: its objective is the f* of the "f* (1 + 1e-3)" note
    # (when lower than the timed runs' own final objective at eps 1e-3)
    w = run_timed(sr_train(h5, models / "exact.warm.h5", exact + ("--tol", "1e-7")), logs / "exact.warm",
                  env=env, timeout=args.timeout)
    if w["error"]:
        print(f"streamrank's untimed exact warm-up run failed: {w['error']}")
    ctx.exact_ref = (last_json(w["out"]) or {}).get("objective") if not w["error"] else None
    n = data["X"].shape[0]
    cache_mb = (math.ceil(8.0 * n * n / 2 ** 20) + 1 if args.libsvm_cache_mb == "whole"
                else float(args.libsvm_cache_mb))
    tools = [("streamrank --method exact", "sr_exact",
              lambda r: [("train", sr_train(h5, models / f"sr_exact.r{r}.h5", exact), env)],
              lambda r: models / f"sr_exact.r{r}.h5", "", "streamrank")]
    ls, why = peers["libsvm_ranksvm"]
    omp_env = dict(env, OMP_NUM_THREADS=str(args.omp_threads))
    tools.append((f"libsvm-ranksvm -m {cache_mb:g} (OMP {args.omp_threads})", "libsvm",
                  (lambda r: [("train", [ls, "-s", "0", "-t", "2", "-g", f"{GAMMA:g}", "-c", f"{C:g}", "-e",
                                         f"{EPS:g}", "-m", f"{cache_mb:g}", text,
                                         models / f"libsvm.r{r}.model"], omp_env)]) if ls else None,
                  lambda r: models / f"libsvm.r{r}.model", why or "", "libsvm"))
    rows.extend(run_section("exact", tools))
