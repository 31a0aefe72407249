"""firstuse: the first run after ``pip install`` (an empty numba cache), with the first-use helper
and without it, and a second run on the warm cache."""
import shutil

from _benchutil import REPO

from .common import C
from .run import run_timed, summarise


def run(ctx):
    """Appends the section's rows to the first table (``ctx.rows``)."""
    args, logs, models, env, py, work = ctx.args, ctx.logs, ctx.models, ctx.env, ctx.py, ctx.work
    rows, data = ctx.rows, ctx.data
    venv = work / "firstuse-venv"
    vpy = venv / "bin" / "python"
    if not (venv / "bin" / "streamrank").exists():
        shutil.rmtree(venv, ignore_errors=True)
        mk = run_timed([py, "-m", "venv", venv], logs / "firstuse.venv", env=env, timeout=args.timeout)
        inst = mk if mk["error"] else run_timed([vpy, "-m", "pip", "install", "--quiet", REPO],
                                                logs / "firstuse.pip", env=env, timeout=args.timeout)
        row = {"section": "firstuse", "tool": "python -m venv + pip install . (once)"}
        summarise(row, [dict(inst, wall_s=(mk["wall_s"] or 0) + (inst["wall_s"] or 0))])
        rows.append(row)
    if not (venv / "bin" / "streamrank").exists():
        rows.append({"section": "firstuse", "tool": "(all)", "note": "skipped: the venv's install failed"})
    else:
        runs = [("streamrank demo", "demo", [vpy, "-m", "streamrank", "demo"])]
        if data:
            runs.append(("streamrank train fold1.h5 --C 1", "train",
                         [vpy, "-m", "streamrank", "train", data["h5"], "--C", f"{C:g}", "-o",
                          models / "firstuse.h5", "--quiet"]))
            runs.append(("streamrank select-features fold1.h5 -k 10 --importance map --tradeoff 0.5", "select",
                         [vpy, "-m", "streamrank", "select-features", data["h5"], "-k", "10", "--importance",
                          "map", "--tradeoff", "0.5", "-o", models / "firstuse-gas.h5", "--quiet"]))
        chosen = {c.strip() for c in args.firstuse_commands.split(",")}
        runs = [r for r in runs if r[1] in chosen]
        kinds = [("first run", {}), ("first run, helper off", {"STREAMRANK_NO_WARMUP": "1"}), ("warm", None)]
        res = {(key, kind): [] for _, key, _ in runs for kind, _ in kinds}
        for r in range(args.repeats):
            for _, key, cmd in runs:
                for i, (kind, extra) in enumerate(kinds):
                    # an empty cache for a first run; the warm run uses the one the first filled
                    cache = work / f"firstuse-cache-{key}-{i if extra is not None else 0}"
                    if extra is not None:
                        shutil.rmtree(cache, ignore_errors=True)
                    run_env = dict(env, NUMBA_CACHE_DIR=str(cache), **(extra or {}))
                    res[(key, kind)].append(run_timed(cmd, logs / f"firstuse.{key}.k{i}.r{r}", env=run_env,
                                                      timeout=args.timeout))
        for what, key, _ in runs:
            for kind, _ in kinds:
                row = {"section": "firstuse", "tool": f"{what} ({kind})"}
                summarise(row, res[(key, kind)])
                rows.append(row)
