"""Record which numba kernels each command compiles on first use (every level: callees too), and rewrite
``streamrank/_native/warm_manifest.py`` (the lists the first-use helper compiles from the back).

Every scenario runs in its own child process with an empty numba cache, so the list holds every
kernel the command compiles, callees before their callers, with the argument types of each
call, the seconds its own compile took (without its callees'), its direct callees (the libraries
numba linked into it) and when it ended. Run it after changing a kernel's arguments; ``tests/native/test_warmup.py`` fails while the
lists are stale.

    python tools/kernel_manifest.py              # all scenarios, rewrite the manifest
    python tools/kernel_manifest.py --print      # print, do not write
    python tools/kernel_manifest.py --times      # also print each kernel's compile seconds
    python tools/kernel_manifest.py --only select-features   # record these lists, keep the others
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "streamrank" / "_native" / "warm_manifest.py"

RECORD = """
import json, time
from numba.core import event
from streamrank._native import warmup
t_start = time.time()
with event.install_recorder("numba:compile") as rec:
    exec({code!r})
out, stack, where = [], [], {{}}
for ts, ev in rec.buffer:
    if ev.is_start:
        stack.append([ts, 0.0])
        continue
    t0, inner = stack.pop()
    if stack:
        stack[-1][1] += ts - t0
    d = ev.data["dispatcher"]
    try:
        sig = warmup.encode(ev.data["args"])
    except ValueError:  # literal or tuple arguments: compiled with the caller that passes them
        continue
    if not d.py_func.__module__.startswith("streamrank."):  # numba's own overloads are not cached
        continue
    cres = d.overloads.get(tuple(ev.data["args"]))
    if cres is not None:
        where[id(cres.library)] = len(out)
    out.append([d.py_func.__module__, d.py_func.__qualname__, sig, round(ts - t0 - inner, 3), cres,
                round(ts - t_start, 3)])
for e in out:  # direct callees: the libraries numba linked into the entry's (private, numba 0.6x)
    cres = e[4]
    libs = getattr(getattr(cres, "library", None), "_linking_libraries", [])
    e[4] = sorted({{where[id(lib)] for lib in libs if id(lib) in where}})
print("MANIFEST" + json.dumps(out))
"""


# what each list was recorded from: a command's first run on small generated data (``{work}``
# holds t.h5 / v.h5 and their text, made by PREPARE in another process and cache)
SCENARIOS = {
    "demo": "from streamrank.demo import run_demo; run_demo(quiet=True)",
    "convert": "from streamrank.cli.main import main; main(['convert', '{work}/t.txt', '-o', '{work}/c.h5', '--quiet'])",
    "train": ("from streamrank.cli.main import main; main(['train', '{work}/t.h5', '--valid', '{work}/v.h5', "
              "'--C', '0.5,1', '-o', '{work}/m.h5', '--quiet'])"),
    # each method's first run, z-scored as users train, in memory and with its caches or Q on disk
    # (a budget below the process puts Q on disk and maps blocks again: the streaming kernels too)
    **{f"train-{m}": ("from streamrank.cli.main import main; "
                      + "; ".join(f"main(['train', '{{work}}/t.h5', '-o', '{{work}}/m-{m}{i}.h5', '--method', '{m}', "
                                  f"'--normalize', 'zscore', '--max-iter', '3', '--cache-dir', '{{work}}/cc{i}', "
                                  f"'--quiet'{extra}])" for i, extra in enumerate(("", ", '--memory-budget', '32MB'"))))
       for m in ("primal", "nystroem", "rff", "exact", "clsr")},
    "select-features": ("from streamrank.cli.main import main; "
                        "main(['select-features', '{work}/t.h5', '-k', '5', '--importance', 'map', '--tradeoff', '0.5', "
                        "'-o', '{work}/g.h5', '--quiet']); "
                        "main(['select-features', '{work}/t.h5', '-k', '5', '--importance', 'pairwise', '--signed', "
                        "'--quiet'])"),
}
PREPARE = """
from streamrank.synthetic import write_text
from streamrank.io.convert import convert
for part, name in (("train", "t"), ("valid", "v")):
    write_text("{work}/" + name + ".txt", preset="small", seed=0, part=part)
    convert(["{work}/" + name + ".txt"], "{work}/" + name + ".h5", quiet=True)
"""


def run(code, work, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), STREAMRANK_NO_WARMUP="1")
    p = subprocess.run([sys.executable, "-c", code.replace("{work}", str(work))], env=env, cwd=str(work),
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"child failed:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def record(name, work):
    out = run(RECORD.format(code=SCENARIOS[name].replace("{work}", str(work))), work, Path(work) / f"cache-{name}")
    line = next(ln for ln in out.splitlines() if ln.startswith("MANIFEST"))
    return json.loads(line[len("MANIFEST"):])


def current_lists():
    """The manifest's lists as :func:`record` gives them (read from its text: importing the package
    would import numba here)."""
    scope = {}
    exec(compile(MANIFEST.read_text(), str(MANIFEST), "exec"), scope)
    return {name: [list(e) for e in entries] for name, entries in scope["KERNELS"].items()}


def render(lists):
    body = []
    for name, entries in lists.items():
        body.append(f"    {name!r}: [")
        keep, index = [], {}
        for i, (module, qualname, sig, sec, callees, end) in enumerate(entries):
            key = (module, qualname, tuple(sig))
            if key not in index:
                index[key] = len(keep)
                keep.append(i)
        remap = {i: index[(entries[i][0], entries[i][1], tuple(entries[i][2]))] for i in range(len(entries))}
        for i in keep:
            module, qualname, sig, sec, callees, end = entries[i]
            calls = tuple(sorted({remap[j] for j in callees}))
            body.append(f"        ({module!r}, {qualname!r}, {tuple(sig)!r}, {sec!r}, {calls!r}, {end!r}),")
        body.append("    ],")
    return textwrap.dedent('''\
        """The numba kernels each command compiles on its first run, in the order their compiles
        end (callees before callers): module, name, argument types, the seconds the compile took
        without its callees', the positions of its direct callees in the list and when it ended,
        in seconds from the command's start (generated by tools/kernel_manifest.py; do not edit)."""

        KERNELS = {
        ''') + "\n".join(body) + "\n}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print the manifest instead of writing it")
    ap.add_argument("--times", action="store_true", help="print each top-level compile's seconds")
    ap.add_argument("--only", default=",".join(SCENARIOS),
                    help=f"comma-separated lists to record, the others kept as the manifest has them (default all: "
                         f"{','.join(SCENARIOS)})")
    args = ap.parse_args()
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    if not only or any(n not in SCENARIOS for n in only):
        ap.error(f"--only takes a comma-separated subset of {','.join(SCENARIOS)}; got {args.only!r}")
    with tempfile.TemporaryDirectory(prefix="streamrank-manifest-") as work:
        run(PREPARE, work, Path(work) / "cache-prepare")
        recorded = {name: record(name, work) for name in only}
    kept = current_lists() if set(only) != set(SCENARIOS) else {}
    lists = {name: recorded[name] if name in recorded else kept.get(name, []) for name in SCENARIOS}
    if args.times:
        for name, entries in recorded.items():
            print(f"{name}: {len(entries)} compiles, {sum(e[3] for e in entries):.1f} s")
            for module, qualname, _, sec, callees, _ in entries:
                print(f"  {sec:6.2f}  {module}.{qualname} calls {callees}")
    text = render(lists)
    if args.print:
        print(text)
    else:
        MANIFEST.write_text(text)
        print(f"wrote {MANIFEST.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
