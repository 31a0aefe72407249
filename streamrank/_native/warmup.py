"""First use: the kernels a command needs are compiled before it plans its memory.

numba compiles a kernel on its first call and keeps the machine code in its on-disk cache
(``cache=True``), so the first run after an install pays for all of a command's kernels. Compiling
takes memory a cached run never holds: numba's typing and lowering registries and LLVM's working
set, 100-200 MB a compiling process (measured: ``COMPILER_BYTES``). A plan made while kernels
were still to be compiled in the same process, or beside a helper compiling them, would leave
that out: the process tree of a first run would peak far above ``--memory-budget``, and whether a
budget is accepted would depend on what is cached.

So when a command starts on a cold cache, :func:`start` runs ``python -m streamrank._native.warmup
LIST...`` and waits for it: the helper compiles the lists' kernels (``warm_manifest.KERNELS``,
recorded from real runs by ``tools/kernel_manifest.py``: callees before callers, each with its
compile seconds and callees) into the cache while the command, which has imported neither numba
nor its data yet, holds a few tens of MB. Then the command goes on as a cached run: it loads every
kernel, plans, accepts or refuses exactly as the next run will, and peaks where that run peaks.
Two helpers compile at once, one from each end of the lists (:func:`helper_order`: of two
orders, the one the recorded seconds say meets the other sooner), where the memory plan says two
fit the budget (``first_use_compilers``); else one compiles them all. A list whose
helper finished leaves a stamp (:func:`stamp_path`), and a command whose lists are stamped starts
no helper.

Two processes never compile one function at the same time: each takes the function's lock
before compiling it and looks in the cache again once it holds it (:func:`install_compile_locks`),
so a process waits for a kernel the other is compiling instead of compiling it too.

``STREAMRANK_NO_WARMUP=1`` turns the helper off (the command then compiles what it calls itself,
and its first run's peak includes the compiler).
"""

import logging
import os
import re
import sys
import threading
import time

from streamrank._native.memory import resident_now

_log = logging.getLogger("streamrank.warmup")

ENV_OFF = "STREAMRANK_NO_WARMUP"
ENV_PARENT = "STREAMRANK_WARMUP_PARENT"  # the command's pid, for the helper

# a process waits at most this long for the other's compile of a function, then compiles it
LOCK_WAIT = 120.0

_helper = None
_held = {}  # lock path -> [open file, depth]
_ARRAY = re.compile(r"^(readonly )?array\((\w+), (\d)d, ([CFA])\)$")


def encode(argtypes):
    """numba argument types -> strings (arrays and plain scalars only)."""
    out = []
    for t in argtypes:
        s = str(t)
        if not _ARRAY.match(s) and s not in ("int64", "int32", "float64", "float32", "bool", "uint8"):
            raise ValueError(f"argument type {s!r} has no encoding")
        out.append(s)
    return out


def decode(strings):
    """Strings from :func:`encode` -> a tuple of numba types."""
    from numba.core import types
    out = []
    for s in strings:
        m = _ARRAY.match(s)
        if m:
            out.append(types.Array(getattr(types, m[2]), int(m[3]), m[4], readonly=bool(m[1])))
        else:
            out.append(types.boolean if s == "bool" else getattr(types, s))
    return tuple(out)


def _kernel(module, qualname):
    import importlib
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def stamp_path(command):
    """The file the helper leaves when it has compiled ``command``'s whole list, named after the
    list's contents, Python's and streamrank's versions: a command whose stamp exists starts no
    helper, and the check imports nothing heavy. It lies beside numba's cache (``NUMBA_CACHE_DIR``, else this package's
    ``__pycache__``), or in ``$XDG_CACHE_HOME/streamrank`` where the package is read-only (numba
    then caches in the user's folder too)."""
    import hashlib

    from streamrank._native import warm_manifest
    from streamrank._version import __version__
    with open(warm_manifest.__file__, "rb") as f:
        digest = hashlib.sha256(f.read() + sys.version.encode() + __version__.encode()).hexdigest()[:16]
    where = os.environ.get("NUMBA_CACHE_DIR")
    if not where:
        here = os.path.dirname(os.path.abspath(__file__))
        where = os.path.join(here, "__pycache__")
        if not os.access(where if os.path.isdir(where) else here, os.W_OK):
            home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            where = os.path.join(home, "streamrank")
    return os.path.join(where, f"streamrank-warm-{command}-{digest}")


def _acquire(path):
    """Hold the exclusive lock ``path`` (re-entrant in this process); waits at most
    ``LOCK_WAIT`` seconds for the other process, then goes on without it."""
    import fcntl
    import time
    held = _held.get(path)
    if held is not None:
        held[1] += 1
        return
    try:
        f = open(path, "ab")
    except OSError:
        _held[path] = [None, 1]
        return
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
    _held[path] = [f, 1]


def _release(path):
    held = _held.get(path)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _held[path]
        if held[0] is not None:
            held[0].close()  # closing the file releases the lock


def release_all():
    for path in list(_held):
        _held[path][1] = 1
        _release(path)


def install_compile_locks():
    """One compiler per kernel at a time across processes (POSIX ``flock``): on a cache miss of a
    streamrank kernel (``numba_cache.KernelCache``) a process takes the kernel's lock before it
    compiles, and looks in the cache once more when it has it; the lock goes when the result is
    saved. So the command never compiles what the helper is compiling at that moment: it waits
    for it and loads it. This also makes numba's index updates safe: numba saves an index by
    reading it, taking the first free data-file name and writing it back, and two processes
    saving different signatures of one function at once would lose one entry or give two keys one
    file. Only streamrank's kernels take the locks; numba's classes are left alone."""
    from streamrank._native import numba_cache
    numba_cache.compile_lock = (_acquire, _release)


def helper_command(lists, from_back=False, cap=None, skip=0):
    """``(argv, cwd)`` of a helper compiling ``lists`` (names of ``warm_manifest.KERNELS``) from
    their front or their back, skipping the first ``skip`` kernels of that order (an earlier helper
    compiled them) and ending with :data:`RESTART` once its resident set passes ``cap`` bytes. It
    runs from the folder that holds this very ``streamrank`` package, so that it compiles the same
    source files (numba's cache is per source file) even when the current folder holds another copy,
    such as a checkout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    names = [lists] if isinstance(lists, str) else list(lists)
    opts = (["@back"] if from_back else []) + ([f"@cap={int(cap)}"] if cap else [])
    opts += [f"@skip={int(skip)}"] if skip else []
    return [sys.executable, "-m", "streamrank._native.warmup", *opts, *names], root


def cold_lists(lists):
    """The names among ``lists`` whose kernels are not known to be cached: [] when the helper is
    turned off, numba's JIT is, or this is not POSIX."""
    names = [lists] if isinstance(lists, str) else [n for n in (lists or ()) if n]
    if not names or os.environ.get(ENV_OFF) or os.name != "posix" or os.environ.get("NUMBA_DISABLE_JIT", "0") != "0":
        return []
    return [n for n in dict.fromkeys(names) if not os.path.exists(stamp_path(n))]


# A first run compiles its kernels before it plans (_native.warmup.start): helper processes compile
# them into numba's cache while the command waits, holding only the interpreter and its parsed
# arguments, and the command then loads every kernel as a cached run does. A helper's resident set
# (measured on Linux x86-64, numba 0.68, with tools/_rss.py): 161 MB once numpy and numba are
# imported (LLVM's code, touched by its static constructors), 210-216 MB once the first kernel has
# compiled (the compiler's typing and lowering registries), then 1-5 MB more for each kernel it
# keeps (the train-exact list's 46 kernels: 355 MB), at most 20 MB for one (qprod.hess_block).
COMPILER_BYTES = 220 * 10 ** 6   # a helper that has compiled its first kernel
COMPILE_STEP = 24 * 10 ** 6      # the most one more kernel adds to it
# two helpers side by side only where each has room for this many kernels beyond its first
KERNELS_PER_HELPER = 8


def first_use_compilers(budget, resident=None):
    """``(helpers, cap)``: how many processes compile a first run's kernels at once beside this one
    (``resident`` bytes, default its resident set now) within ``budget`` bytes (None: the default
    2GB), and the resident set past which a helper hands over to a fresh one (it may grow
    COMPILE_STEP more with the kernel it has started). Two where each has room for
    KERNELS_PER_HELPER kernels, else one; below ``resident + COMPILER_BYTES + COMPILE_STEP`` no
    compile fits: said, and one helper compiles a kernel at a time. Whatever it returns, the run
    plans afterwards with every kernel cached, so what it accepts or refuses does not depend on what
    was cached before it started."""
    budget = 2 * 10 ** 9 if budget is None else int(budget)
    from streamrank.units import format_size
    resident = resident_now() if resident is None else resident
    room = budget - resident
    n = 2 if room // 2 >= COMPILER_BYTES + KERNELS_PER_HELPER * COMPILE_STEP else 1
    cap = room // n - COMPILE_STEP
    if cap < COMPILER_BYTES:
        _log.warning("memory budget %s is below what compiling this command's kernels on its first run takes (%s "
                    "beside %s resident): its peak will exceed it until they are cached", format_size(budget),
                    format_size(COMPILER_BYTES + COMPILE_STEP), format_size(resident))
    return n, max(cap, 1)


def start(lists, budget=None):
    """Compile the kernels of ``lists`` (a name or names of ``warm_manifest.KERNELS``) not yet
    cached, in helper processes, and wait for them: on return every listed kernel loads from the
    cache. ``first_use_compilers`` says how many compile at once beside this process
    within ``budget`` bytes (None: the default) and the resident set each may reach; a helper past
    it ends after its kernel and a fresh one goes on from the next. A helper that fails changes
    nothing else (the command compiles what is missing itself); a signal stops the helpers
    (:func:`stop`). The lists are stamped when every helper has compiled them all."""
    global _helper
    if _helper is not None:
        return
    # every command takes a kernel's lock on a cache miss, helpers or not: another process compiling
    # the same kernel into the same cache (a helper, a concurrent command) is waited for, not repeated
    install_compile_locks()
    try:
        todo = cold_lists(lists)
        if not todo:
            return
        n, cap = first_use_compilers(budget)
        from streamrank._native.parallel import usable_cpus
        n = min(n, usable_cpus())  # a second compiler on one core only shares it
        _helper = []
        if all(_run_helpers(todo, n, cap)):
            for name in todo:
                _stamp(name)
        install_compile_locks()  # another command's helpers may still be compiling into this cache
    except Exception:  # only a first use's compile: a failure to run it changes nothing else
        pass
    finally:
        stop()


RESTART = 75  # a helper's exit when it passed its resident-set cap with kernels left to compile
_POLL = 0.02
# a helper still running after this long is stopped, and the command compiles what is left itself:
# the longest list compiles in under a minute on one core; a helper stuck longer must not hold the
# command for ever
HELPER_WAIT = 600.0


def _spawn(lists, from_back, cap, skip):
    import subprocess  # here: a run whose kernels are compiled never starts one
    argv, cwd = helper_command(lists, from_back, cap, skip)
    env = dict(os.environ, **{ENV_OFF: "1", ENV_PARENT: str(os.getpid())})
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    _helper.append(p)
    return p


def _helper_steps(lists, from_back, cap):
    """A generator driving one helper slot: yields while a helper runs, returns True when the lists
    were compiled without a failed entry. Each helper writes '+' per kernel compiled (or loaded)
    and '!' per kernel that failed; one that ends with RESTART is followed by a fresh one that
    skips what it did, unless it did nothing."""
    done, ok = 0, True
    deadline = time.monotonic() + HELPER_WAIT
    while True:
        p = _spawn(lists, from_back, cap, done)
        while p.poll() is None:
            if time.monotonic() > deadline:
                p.kill()
                p.wait()
                _helper.remove(p)
                return False
            yield
        marks = p.stdout.read().decode("ascii", "replace")
        p.stdout.close()
        _helper.remove(p)
        ok = ok and "!" not in marks
        done += len(marks)
        if p.returncode != RESTART or not marks:
            return ok and p.returncode == 0


def _run_helpers(lists, n, cap):
    """n helper slots side by side (the second from the lists' back), each driven by
    :func:`_helper_steps`: their results."""
    slots = [_helper_steps(lists, k == 1, cap) for k in range(n)]
    results = [None] * n
    while any(r is None for r in results):
        for k, s in enumerate(slots):
            if results[k] is None:
                try:
                    next(s)
                except StopIteration as end:
                    results[k] = bool(end.value)
        time.sleep(_POLL)
    return results


def _stamp(name):
    try:
        path = stamp_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w"):
            pass
    except OSError:
        pass


def stop():
    """Stop the helpers (each after the kernel it is compiling: its cache files are written whole
    or not at all); returns at once. :func:`start` calls it, and cli.main when a command ends,
    however it ends (a SIGINT, SIGTERM or SIGHUP too); a helper whose command was killed stops by
    itself after its current kernel."""
    global _helper
    helpers, _helper = _helper or [], None
    for h in helpers:
        if h.poll() is None:
            h.terminate()
            threading.Thread(target=h.wait, daemon=True).start()  # reap it without waiting here


def backwards_order(entries):
    """Always the entry the command needs latest among those whose callees the helper has done
    (entries ``(module, qualname, sig, seconds, callees, end)``, callees by position): going
    backwards one small kernel at a time, it meets the command, which works forwards, at a small
    kernel rather than in the middle of a large one."""
    done, order, left = set(), [], list(range(len(entries)))
    while left:
        i = max(k for k in left if all(j in done for j in entries[k][4]))
        left.remove(i)
        done.add(i)
        order.append(i)
    return order


def tree_order(entries):
    """The latest-needed entry's whole tree first, callees before callers (latest-needed callee
    first), then the next: the helper does not start on a kernel the command needs soon (a
    callee of nothing late) while a late kernel's callees wait."""
    done, order = set(), []

    def visit(i):
        if i in done:
            return
        done.add(i)
        for j in sorted(entries[i][4], reverse=True):
            visit(j)
        order.append(i)

    for i in reversed(range(len(entries))):
        visit(i)
    return order


def simulated_end(entries, order):
    """When the command would end, by the recorded seconds, with the helper compiling ``order``
    (positions) beside it. The command works forwards: before entry i its other work (the gap
    between the recorded ends less the compile), then the compile unless the helper has it (it
    waits while the helper compiles it: the lock). The helper starts after the command's first
    gap (its imports) and skips what the command has compiled or is compiling (waiting for it)."""
    n = len(entries)
    sec = [e[3] for e in entries]
    gap = [max(0.0, entries[i][5] - (entries[i - 1][5] if i else 0.0) - sec[i]) for i in range(n)]
    finish = {}      # entry -> when its compile ends (whoever compiles it)
    tc, th = 0.0, gap[0] if n else 0.0
    ci, hi = 0, 0    # the command's next entry, the helper's next position in ``order``
    pending = False  # the command has done the gap before entry ci
    while ci < n:
        if hi < len(order) and th < tc:  # the helper moves while it is behind in time
            j = order[hi]
            hi += 1
            if j in finish:
                th = max(th, finish[j])  # done, or the command holds its lock
                continue
            th = max([th] + [finish.get(k, th) for k in entries[j][4]])
            finish[j] = th = th + sec[j]
            continue
        if not pending:
            tc += gap[ci]
            pending = True
            continue
        if ci in finish:
            tc = max(tc, finish[ci])  # loaded, or waited for while the helper compiled it
        else:
            finish[ci] = tc = tc + sec[ci]
        ci += 1
        pending = False
    return tc


def helper_order(entries):
    """The order the helper compiles ``entries`` in (each ``(module, qualname, sig, seconds,
    callees, end)``, callees given by their positions): of :func:`backwards_order` and
    :func:`tree_order`, the one the recorded seconds say the command ends sooner with
    (:func:`simulated_end`; the first on a tie)."""
    orders = [backwards_order(entries), tree_order(entries)]
    best = min(orders, key=lambda o: simulated_end(entries, o))
    return [entries[i] for i in best]


def _kernels_in_order(lists, from_back):
    """The entries of ``lists`` in the order a helper compiles them: each list in the manifest's
    order (callees first, as the command reaches them) from the front; from the back, the lists in
    reverse, each in :func:`helper_order`."""
    from streamrank._native.warm_manifest import KERNELS
    if from_back:
        return [e for name in reversed(lists) for e in helper_order(KERNELS.get(name, []))]
    return [e for name in lists for e in KERNELS.get(name, [])]


def main(argv=None):
    """Compile the kernels of the lists named in ``argv`` (and its options, as
    :func:`helper_command` writes them: ``@back``, ``@skip=N``, ``@cap=BYTES``): one mark a kernel
    on standard output ('+' compiled or loaded, '!' failed); exit RESTART after a kernel that leaves
    the resident set above the cap with kernels left."""
    import signal
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = {k: int(v) for k, _, v in (a[1:].partition("=") for a in argv if "=" in a and a.startswith("@"))}
    from_back = "@back" in argv
    entries = _kernels_in_order([a for a in argv if not a.startswith("@")], from_back)
    install_compile_locks()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    # a command that ended without stopping it (SIGKILL, even before this process got here) stops it too
    parent = int(os.environ.get(ENV_PARENT) or os.getppid())
    # STREAMRANK_WARMUP_LOG=FILE: one line per kernel started, for measuring the overlap
    log = open(os.environ["STREAMRANK_WARMUP_LOG"], "a") if os.environ.get("STREAMRANK_WARMUP_LOG") else None
    for i in range(opts.get("skip", 0), len(entries)):
        module, qualname, sig, *_ = entries[i]
        if log:
            print(f"{time.time():.3f} start {qualname}", file=log, flush=True)
        if stopping or os.getppid() != parent:
            return 0
        mark = "+"
        try:
            _kernel(module, qualname).compile(decode(sig))
        except Exception as exc:  # a stale entry: the command compiles that kernel itself
            mark = "!"
            print(f"warmup: {module}.{qualname}{tuple(sig)}: {exc}", file=sys.stderr)
        finally:
            release_all()
        sys.stdout.write(mark)
        sys.stdout.flush()
        if opts.get("cap") and i + 1 < len(entries) and resident_now() > opts["cap"]:
            return RESTART
    return 0


if __name__ == "__main__":
    sys.exit(main())
