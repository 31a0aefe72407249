"""firstuse: the first run after ``pip install`` (an empty numba cache), with the first-use helper
and without it, and a second run on the warm cache, beside the floor every run pays (the
interpreter importing numpy and numba). Issue 34's target 4: the demo at most 8 s, the first
``train`` and ``select-features`` on MQ2008 Fold1 at most 5 s each; a note per command says how
far it is.

The commands run the copy pip installed into the venv (``python -P``: the checkout in the current
folder is not on the path), so that a file changed in the checkout while the bench runs changes
neither the code measured nor numba's cache. The venv is made once; the checkout is installed
again (its dependencies kept) whenever its files differ from those installed."""
import hashlib
import shutil

from _benchutil import REPO

from .common import C
from .run import run_timed, summarise

# issue 34, target 4: a first run's seconds at most
TARGETS = {"demo": 8.0, "train": 5.0, "select": 5.0}


def tree_digest():
    """The digest of what ``pip install`` copies from the checkout: the package's files and its
    build settings."""
    h = hashlib.sha256()
    files = sorted(p for p in (REPO / "streamrank").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    for p in files + [REPO / "pyproject.toml"]:
        if p.exists():
            h.update(str(p.relative_to(REPO)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def install(ctx, venv):
    """The venv with this checkout installed; returns its python, or None when the install failed."""
    args, logs, env, py, rows = ctx.args, ctx.logs, ctx.env, ctx.py, ctx.rows
    vpy = venv / "bin" / "python"
    stamp = venv / "streamrank-tree"
    digest = tree_digest()
    if not (venv / "bin" / "streamrank").exists():
        shutil.rmtree(venv, ignore_errors=True)
        mk = run_timed([py, "-m", "venv", venv], logs / "firstuse.venv", env=env, timeout=args.timeout)
        inst = mk if mk["error"] else run_timed([vpy, "-m", "pip", "install", "--quiet", REPO],
                                                logs / "firstuse.pip", env=env, timeout=args.timeout)
        row = {"section": "firstuse", "tool": "python -m venv + pip install . (once)"}
        summarise(row, [dict(inst, wall_s=(mk["wall_s"] or 0) + (inst["wall_s"] or 0))])
        rows.append(row)
        if not inst["error"]:
            stamp.write_text(digest)
    elif not stamp.exists() or stamp.read_text() != digest:  # the checkout changed since: its files again
        inst = run_timed([vpy, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", REPO],
                         logs / "firstuse.reinstall", env=env, timeout=args.timeout)
        if inst["error"]:
            print(f"firstuse: reinstalling the checkout failed ({inst['error']})")
            return None
        stamp.write_text(digest)
    return vpy if (venv / "bin" / "streamrank").exists() else None


def run(ctx):
    """Appends the section's rows to the first table (``ctx.rows``) and a note per command."""
    args, logs, models, env, work = ctx.args, ctx.logs, ctx.models, ctx.env, ctx.work
    rows, data = ctx.rows, ctx.data
    vpy = install(ctx, work / "firstuse-venv")
    if vpy is None:
        rows.append({"section": "firstuse", "tool": "(all)", "note": "skipped: the venv's install failed"})
        return
    sr = [vpy, "-P", "-m", "streamrank"]  # -P: the installed copy, not the checkout in the current folder
    runs = [("streamrank demo", "demo", sr + ["demo", "--workdir", work / "firstuse-demo", "--quiet"])]
    if data:
        runs.append(("streamrank train fold1.h5 --C 1", "train",
                     sr + ["train", data["h5"], "--C", f"{C:g}", "-o", models / "firstuse.h5", "--quiet"]))
        runs.append(("streamrank select-features fold1.h5 -k 10 --importance map --tradeoff 0.5", "select",
                     sr + ["select-features", data["h5"], "-k", "10", "--importance", "map", "--tradeoff", "0.5",
                           "-o", models / "firstuse-gas.h5", "--quiet"]))
    chosen = {c.strip() for c in args.firstuse_commands.split(",")}
    runs = [r for r in runs if r[1] in chosen]
    floor_what = 'python -c "import numpy, numba" (floor)'
    floor = []
    kinds = [("first run", {}), ("first run, helper off", {"STREAMRANK_NO_WARMUP": "1"}), ("warm", None)]
    res = {(key, kind): [] for _, key, _ in runs for kind, _ in kinds}
    for r in range(args.repeats):
        floor.append(run_timed([vpy, "-c", "import numpy, numba"], logs / f"firstuse.floor.r{r}", env=env,
                               timeout=args.timeout))
        for _, key, cmd in runs:
            for i, (kind, extra) in enumerate(kinds):
                # an empty cache for a first run; the warm run uses the one the first filled
                cache = work / f"firstuse-cache-{key}-{i if extra is not None else 0}"
                if extra is not None:
                    shutil.rmtree(cache, ignore_errors=True)
                run_env = dict(env, NUMBA_CACHE_DIR=str(cache), **(extra or {}))
                res[(key, kind)].append(run_timed(cmd, logs / f"firstuse.{key}.k{i}.r{r}", env=run_env,
                                                  timeout=args.timeout))
    row = {"section": "firstuse", "tool": floor_what}
    floor_ok = summarise(row, floor)
    rows.append(row)
    floor_s = row.get("median")
    for what, key, _ in runs:
        medians = {}
        for kind, _ in kinds:
            row = {"section": "firstuse", "tool": f"{what} ({kind})"}
            summarise(row, res[(key, kind)])
            rows.append(row)
            medians[kind] = row.get("median")
        first, warm = medians["first run"], medians["warm"]
        if first is None:
            continue
        target = TARGETS[key]
        text = (f"firstuse {key}: first run {first:.2f} s against the target {target:g} s "
                f"({'met' if first <= target else f'{first - target:.2f} s over'})")
        if floor_ok and floor_s is not None:
            text += f"; {first - floor_s:.2f} s above the floor ({floor_s:.2f} s)"
        if warm:
            text += f", {first - warm:.2f} s above the warm run ({warm:.2f} s): numba's compiles, mostly"
        if medians["first run, helper off"]:
            text += f"; the helper saves {medians['first run, helper off'] - first:.2f} s"
        ctx.notes.append(("firstuse", text))
