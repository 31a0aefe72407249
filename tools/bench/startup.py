"""startup: the interpreter, the import floor (numpy, numba), ``import streamrank`` and ``python -m
streamrank --help``, each a whole process."""
from .run import run_timed, summarise


def run(ctx):
    """Appends the section's rows to the first table (``ctx.rows``)."""
    args, logs, env, py, rows = ctx.args, ctx.logs, ctx.env, ctx.py, ctx.rows
    cmds = [("python -c pass", [py, "-c", "pass"]),
            ('python -c "import numpy, numba" (floor)', [py, "-c", "import numpy, numba"]),
            ('python -c "import streamrank"', [py, "-c", "import streamrank"]),
            ("python -m streamrank --help", [py, "-m", "streamrank", "--help"])]
    for n, (_, cmd) in enumerate(cmds):  # untimed: page cache, numba's own first-import work
        run_timed(cmd, logs / f"startup{n}.warm", env=env, timeout=args.timeout)
    res = {n: [] for n in range(len(cmds))}
    for r in range(args.repeats):
        for n, (_, cmd) in enumerate(cmds):
            res[n].append(run_timed(cmd, logs / f"startup{n}.r{r}", env=env, timeout=args.timeout))
    for n, (what, _) in enumerate(cmds):
        row = {"section": "startup", "tool": what}
        summarise(row, res[n])
        rows.append(row)
