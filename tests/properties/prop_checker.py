"""The one checker every property case goes through (issue 30, build item 8).

A case is a command line (run in this process through ``streamrank.cli.main.main``, or in a child
process for signals and a few end-to-end cases) or a Python estimator call, with its inputs and
outputs named. Every case must hold all of these:

1. it ends within a bound (a timer in this process, a timeout for a child);
2. it exits 0 with a finite result (a model: finite arrays, objective finite and at most f(0), every
   candidate converged or capped) or exits 2 with one error line and no traceback (a signal: 128 +
   its number with its one line); the Python API returns or raises a StreamrankError of one line;
3. every input file's sha256 is unchanged, and no file is left beside an output.

Cases are counted by command and by kind of input (``COUNTS``), for the reliability table of
``tools/bench_reliability.py --only properties``.
"""

import contextlib
import faulthandler
import hashlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

# seconds a case may take once numba's kernels are compiled: the data are a few rows, a run takes
# milliseconds; the bound is a hang detector, far above any run under load
BOUND = float(os.environ.get("STREAMRANK_PROPERTY_BOUND", "20"))
CHILD_BOUND = float(os.environ.get("STREAMRANK_PROPERTY_CHILD_BOUND", "120"))
# after a first hang, the same property's later (shrinking) examples get this bound
HUNG_BOUND = float(os.environ.get("STREAMRANK_PROPERTY_HUNG_BOUND", "4"))

# command -> {"tried", "exit 0", "exit 2", "signal", "other", "failed"}; the same by kind of input
# (an example has several kinds: each counts it once)
BY_COMMAND = defaultdict(lambda: defaultdict(int))
BY_KIND = defaultdict(lambda: defaultdict(int))
_hung = {"seen": False}
# STREAMRANK_PROPERTY_COUNT_ONLY=1: a broken rule is counted and kept (VIOLATIONS), not raised, so
# every property runs all its examples (to count every failing example, or to time the folder as it
# will run once every rule holds)
COUNT_ONLY = os.environ.get("STREAMRANK_PROPERTY_COUNT_ONLY") == "1"
VIOLATIONS = []

# the messages of a finished solve: converged, or the iteration cap, or the clear status of a step
# below float resolution (build item 1); anything else (no progress, unbounded) is not a result
ACCEPTED = re.compile(r"^(converged|reached max_iter|.*below float64 resolution|.*rounds to w in float64)")
ERROR_LINE = re.compile(r"^streamrank [\w-]+: error: \S")


class RunTimeout(BaseException):
    """Raised in the main thread when an in-process run passes its bound."""


class Violation(AssertionError):
    pass


@dataclass
class Result:
    rc: object  # int exit code; for the Python API: 0, or the exception raised
    out: str = ""
    err: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    warnings: list = field(default_factory=list)


def new_property():
    """Called at the start of each property: the full bound again."""
    _hung["seen"] = False


def _bound():
    return HUNG_BOUND if _hung["seen"] else BOUND


@contextlib.contextmanager
def _timer(bound):
    def ring(signum, frame):
        raise RunTimeout(f"still running after {bound:g} s")
    old = signal.signal(signal.SIGALRM, ring)
    # the last resort if a compiled loop never returns to Python: dump every thread and exit
    faulthandler.dump_traceback_later(max(120.0, 6 * bound), exit=True, file=sys.__stderr__)
    signal.setitimer(signal.ITIMER_REAL, bound)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, old)


def run_cli(argv):
    """``streamrank ARGV`` in this process: exit code, standard output and error."""
    from streamrank.cli.main import main
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    timed_out, rc = False, None
    bound = _bound()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _timer(bound):
            rc = main(argv)
    except RunTimeout:
        timed_out = True
        _hung["seen"] = True
    except SystemExit as e:
        rc = e.code
    except Exception as e:  # noqa: BLE001 - an escaped exception is a traceback to the user
        import traceback
        err.write("Traceback (escaped main):\n" + "".join(traceback.format_exception(e)))
        rc = 1
    return Result(0 if rc is None else rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0, timed_out)


def run_api(fn):
    """``fn()`` (a Python API call) within the bound: 0, or the exception it raised."""
    t0 = time.perf_counter()
    timed_out, rc = False, 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _timer(_bound()):
                fn()
        except RunTimeout:
            timed_out = True
            _hung["seen"] = True
        except Exception as e:  # noqa: BLE001
            rc = e
    return Result(rc, seconds=time.perf_counter() - t0, timed_out=timed_out,
                  warnings=[f"{w.category.__name__}: {w.message}" for w in caught])


def run_child(argv, sig=None, after="log", delay=0.0, checkpoint=None, env=None):
    """``python -m streamrank ARGV`` in a child process; with ``sig``, the signal is sent ``delay``
    seconds after the first line on standard error (``after="log"``) or after the first checkpoint
    file appears (``after="checkpoint"``)."""
    cmd = [sys.executable, "-m", "streamrank", *map(str, argv)]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **(env or {})})
    err_lines, first = [], threading.Event()

    def read_err():
        for line in p.stderr:
            err_lines.append(line)
            first.set()
    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    sent = None
    if sig is not None:
        deadline = time.perf_counter() + CHILD_BOUND
        if after == "log":
            while not first.wait(0.01) and p.poll() is None and time.perf_counter() < deadline:
                pass
        else:
            ck = Path(checkpoint) / "checkpoint.h5"
            while not ck.exists() and p.poll() is None and time.perf_counter() < deadline:
                time.sleep(0.005)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(sig)
            sent = sig
    out_parts = []
    out_reader = threading.Thread(target=lambda: out_parts.append(p.stdout.read()), daemon=True)
    out_reader.start()
    try:
        p.wait(timeout=CHILD_BOUND)
        timed_out = False
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        timed_out = True
    reader.join(10)
    out_reader.join(10)
    r = Result(p.returncode, "".join(out_parts), "".join(err_lines), time.perf_counter() - t0, timed_out)
    r.sent = sent
    return r


# -- files -------------------------------------------------------------------------------------------
def sha256_tree(paths):
    """{file: sha256} of every input file (files under an input directory included)."""
    out = {}
    for p in map(Path, paths):
        files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for q in files:
            if q.exists():
                out[str(q)] = hashlib.sha256(q.read_bytes()).hexdigest()
    return out


def listing(dirs):
    return {str(d): sorted(os.listdir(d)) if Path(d).is_dir() else None for d in dirs}


# -- f(0) and the objective, independently of the package -----------------------------------------------
def _pairs(y):
    """(i, j) with y_i > y_j."""
    y = np.asarray(y, np.float64)
    i, j = np.nonzero(y[:, None] > y[None, :])
    return i, j


def pair_cost_fn(spec, levels):
    """lambda(y_i, y_j) for the pair costs a case passed (none, graded, gain_difference, or
    "a-b:c,..."); graded from its definition: paper 001's table on grades within {0, 1, 2}, else
    log2(1 + |2^a - 2^b|)."""
    if spec in (None, "none"):
        return lambda a, b: np.ones_like(a)
    if spec == "graded":
        if set(levels) <= {0.0, 1.0, 2.0}:
            spec = "0-1:1,1-2:1.3,0-2:2"
        else:
            def graded(x, z):  # log2(1 + 2^hi - 2^lo), as written while 2^hi fits, else 2^hi factored out
                hi, lo = max(x, z), min(x, z)
                return (math.log2(1.0 + 2.0 ** hi - 2.0 ** lo) if hi <= 60
                        else hi + math.log2(1.0 - 2.0 ** (lo - hi) + 2.0 ** -hi))
            return lambda a, b: np.array([graded(float(x), float(z)) for x, z in zip(a, b)])
    if spec == "gain_difference":
        with np.errstate(over="ignore"):
            return lambda a, b: (np.exp2(a) - 1.0) - (np.exp2(b) - 1.0)
    table = {}
    for item in str(spec).split(","):
        pair, c = item.split(":")
        a, b = pair.split("-")
        table[(min(float(a), float(b)), max(float(a), float(b)))] = float(c)

    def cost(a, b):
        return np.array([table.get((min(x, z), max(x, z)), 1.0) for x, z in zip(a, b)])
    return cost


def weighted_pairs(data, pair_cost=None, query_weight=None):
    """sum_q mu_q sum_{(i,j) in P_q} lambda(y_i, y_j): f(0) / C of every pairwise loss (squared
    hinge and smooth hinge are both 1 at margin 1)."""
    qp, y = data.query_ptr, np.asarray(data.y, np.float64)
    levels = sorted(set(y.tolist()))
    try:
        lam = pair_cost_fn(pair_cost, levels)
    except ValueError:  # costs that are not numbers: no f(0), and no run may succeed with them
        return math.nan
    per_q = []
    with np.errstate(over="ignore", invalid="ignore"):
        for q in range(len(qp) - 1):
            yq = y[qp[q]:qp[q + 1]]
            i, j = _pairs(yq)
            per_q.append((len(i), float(np.sum(lam(yq[i], yq[j]))) if len(i) else 0.0))
        most = max([c for c, _ in per_q], default=0)
        total = 0.0
        for c, s in per_q:
            if c:
                mu = math.log1p(most / c) if query_weight == "log_ratio" else 1.0
                total += mu * s
    return total


def clsr_f0(data):
    """CLSRRank's J(0) = (1 / S) sum_q sum_{j,k in q} (y_j - y_k)^2, S = sum_q l_q^2, over the labels
    as the model reads them: float32, as a dataset stores them and the estimators keep them (a label
    of 3e38 is 3.0000000054977558e38 there, and J(0) 3.7e-10 higher than float64's)."""
    qp, y = data.query_ptr, np.asarray(np.asarray(data.y, np.float32), np.float64)
    S = float(sum((qp[q + 1] - qp[q]) ** 2 for q in range(len(qp) - 1)))
    tot = sum(float(((y[qp[q]:qp[q + 1]][:, None] - y[qp[q]:qp[q + 1]][None, :]) ** 2).sum())
              for q in range(len(qp) - 1))
    return tot / S if S else 0.0


def primal_objective(data, w, C, model_file):
    """f(w) of a linear model with the squared hinge, recomputed from the rows (normalize none or
    zscore as docs/formats.md section 2 states), or None where this oracle does not apply."""
    with h5py.File(model_file, "r") as f:
        kind = f["normalize"].attrs.get("kind", "none")
        X = np.asarray(data.X, np.float64)
        if kind == "zscore":
            X = (X - f["normalize"]["mean"][()]) * (1.0 / f["normalize"]["scale"][()])
        elif kind != "none":
            return None
        if f.attrs.get("version", 2) == 3:
            cols = np.array(json.loads(f.attrs["input_features"])) - 1
            X = X[:, cols]
    z = X @ np.asarray(w, np.float64)
    qp, y = data.query_ptr, np.asarray(data.y, np.float64)
    loss = 0.0
    for q in range(len(qp) - 1):
        zq, yq = z[qp[q]:qp[q + 1]], y[qp[q]:qp[q + 1]]
        i, j = _pairs(yq)
        m = (zq[j] - zq[i]) + 1.0
        loss += float(np.sum(np.where(m > 0, m * m, 0.0)))
    return 0.5 * float(w @ w) + C * loss


# -- the rules ------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One run: what it reads, what it writes, what its success must look like."""
    command: str  # the table's name: "train exact", "predict", "RankSVM.fit", ...
    kinds: list  # kinds of input, for the table
    argv: list = None  # a command line; None for the Python API
    inputs: list = field(default_factory=list)  # files or directories, byte-identical after the run
    outputs: list = field(default_factory=list)  # files or directories the run may write
    data: object = None  # the training Data (f(0)), or the data predicted / evaluated
    train: dict = field(default_factory=dict)  # pair_cost, query_weight, loss, method of a training run
    must_refuse: str = ""  # why this case must exit 2 ("" : 0 or 2 both fine)
    extra_ok: tuple = ()  # names that may appear beside an output (a run's kept checkpoint)

    def __post_init__(self):
        self.before = sha256_tree(self.inputs)
        self.existed = {str(o): Path(o).exists() for o in self.outputs}
        self.parents = listing({str(Path(o).parent) for o in self.outputs if o is not None})

    def describe(self):
        return (f"{self.command} {' '.join(map(str, self.argv)) if self.argv else ''} kinds={self.kinds}"
                + (f" data={self.data.describe()}" if self.data is not None and self.data.kinds != ["plain"] else ""))


def _fail(case, res, why):
    err = res.err[-1500:]
    for mark in ("Traceback", "Exception ignored"):
        i = res.err.find(mark)
        if 0 <= i < len(res.err) - 1500:  # a traceback before the tail: shown too (it is the evidence)
            err = res.err[max(0, i - 300):i + 2500] + "\n  ...\n" + err
            break
    raise Violation(f"{why}\n  case: {case.describe()}\n  exit: {res.rc!r} after {res.seconds:.2f} s"
                    f"{'' if getattr(res, 'sent', None) is None else f', signal {res.sent} sent'}\n"
                    f"  stderr: {err}\n  stdout: {res.out[-500:]}")


def check(case, res, sig=None):
    """All of the rules for one case; counts it; raises Violation naming the broken rule."""
    counted = "signal" if sig is not None and res.rc == 128 + sig else (
        "exit 0" if res.rc == 0 else "exit 2" if (res.rc == 2 or isinstance(res.rc, Exception)) else "other")
    tallies = [BY_COMMAND[case.command]] + [BY_KIND[k] for k in dict.fromkeys(case.kinds)]
    for t in tallies:
        t["tried"] += 1
        t[counted] += 1
    try:
        _check(case, res, sig)
    except Violation as v:
        for t in tallies:
            t["failed"] += 1
        if not COUNT_ONLY:
            raise
        VIOLATIONS.append(str(v)[:3000])


def _check(case, res, sig):
    if res.timed_out:
        _fail(case, res, "the run did not end within its bound (a hang)")
    # 3. inputs byte-identical; nothing left beside an output
    after = sha256_tree(case.before)  # the files that were there: a folder may gain files
    if after != case.before:
        changed = [p for p in case.before if after.get(p) != case.before[p]]
        _fail(case, res, f"input file(s) changed or removed: {changed}")
    allowed = {Path(o).name for o in case.outputs} | set(case.extra_ok)
    for d, names in case.parents.items():
        now = sorted(os.listdir(d)) if Path(d).is_dir() else []
        new = sorted(set(now) - set(names or []) - allowed)
        if new:
            _fail(case, res, f"file(s) left beside an output in {d}: {new}")
    # 2. the ending
    if case.argv is None:
        return _check_api(case, res)
    if sig is not None and res.rc == 128 + sig:
        return _check_signal(case, res, sig)
    if sig is not None and res.rc == -sig and case.outputs and Path(case.outputs[0]).exists():
        # the signal came after the command had finished and put its handlers back (the process's
        # last milliseconds): the default action ended it, with the result complete; it must be whole
        return SUCCESS[case.command.split(" ")[0]](case, res)
    if "Traceback" in res.err:
        _fail(case, res, "a traceback on standard error")
    if res.rc == 2:
        lines = [ln for ln in res.err.splitlines() if ln.strip()]
        errors = [k for k, ln in enumerate(lines) if ERROR_LINE.match(ln)]
        # the error is the last line; an indented continuation quoting the offending text (a LETOR
        # line) belongs to it
        if len(errors) != 1 or not all(ln[:1].isspace() for ln in lines[errors[0] + 1:]):
            _fail(case, res, "exit 2 without exactly one error line, last on standard error")
        for o in case.outputs:
            if not case.existed[str(o)] and Path(o).is_file():
                _fail(case, res, f"exit 2 but the output {o} was written")
        return
    if res.rc != 0:
        _fail(case, res, f"exit {res.rc}: neither 0 nor 2")
    if case.must_refuse:
        _fail(case, res, f"exit 0, but this must be refused: {case.must_refuse}")
    SUCCESS[case.command.split(" ")[0]](case, res)


def _check_signal(case, res, sig):
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    if "Traceback" in res.err:
        _fail(case, res, f"a traceback after signal {sig}")
    if not lines or "interrupted" not in lines[-1] or not lines[-1].startswith("streamrank "):
        _fail(case, res, f"exit {res.rc} after signal {sig} without its one line ('streamrank CMD: interrupted...')")
    for o in case.outputs:
        if not case.existed[str(o)] and Path(o).is_file():
            _fail(case, res, f"interrupted, but the output {o} was written")


def _check_api(case, res):
    from streamrank.errors import StreamrankError
    if isinstance(res.rc, Exception):
        e = res.rc
        if not isinstance(e, StreamrankError):
            import traceback
            tb = "".join(traceback.format_exception(e))[-2500:]
            _fail(case, res, f"raised {type(e).__name__}, not a StreamrankError: {e}\n{tb}")
        if "\n" in str(e).strip() or not str(e).strip():
            _fail(case, res, f"an error that is not one line: {str(e)!r}")
        return
    if case.must_refuse:
        _fail(case, res, f"returned, but this must be refused: {case.must_refuse}")
    bad = [w for w in res.warnings if w.startswith("RuntimeWarning") and
           re.search(r"(overflow|invalid value|divide by zero|underflow) encountered", w)]
    if bad:
        _fail(case, res, f"numpy RuntimeWarnings during a run that succeeded: {bad[:3]}")
    if getattr(case, "api_ok", None) is not None:  # what this call's success must look like
        why = case.api_ok()
        if why:
            _fail(case, res, why)
        return
    est = case.estimator
    check_summary(case, res, est.training_, "clsr" if type(est).__name__ == "CLSRRank" else est.method)
    coef = np.asarray(est.model_.w)
    if not np.isfinite(coef).all():
        _fail(case, res, "a fitted model with non-finite coefficients")


# -- what success must look like, by command -----------------------------------------------------------------
def _finite_h5(case, res, path, allow_nan=()):
    with h5py.File(path, "r") as f:
        bad = []

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f" and name not in allow_nan:
                if not np.isfinite(obj[()]).all():
                    bad.append(name)
        f.visititems(visit)
    if bad:
        _fail(case, res, f"{path}: non-finite values in {bad}")


def check_summary(case, res, summary, method, costs=None):
    """A training summary: objective finite and at most f(0) for its C (or lambda), every
    candidate finished as converged or capped. ``costs``: the pair_cost and query_weight the model
    was trained with (its config: a grid's default search tries paper 001's beside the case's)."""
    data, t = case.data, dict(case.train, **(costs or {}))
    objective = summary.get("objective")
    if objective is None or not math.isfinite(objective):
        _fail(case, res, f"objective {objective!r} is not finite")
    for c in summary.get("candidates", [{"objective": objective, "C": summary.get("C")}]):
        obj = c.get("objective")
        if obj is None or not math.isfinite(obj):
            _fail(case, res, f"a candidate's objective {obj!r} is not finite: {c}")
        if method == "clsr":
            f0 = clsr_f0(data) if data is not None else math.inf
        else:
            msg = c.get("message", "")
            if not ACCEPTED.match(msg or ""):
                _fail(case, res, f"a candidate ended with {msg!r}, neither converged nor capped")
            g = c.get("grad_norm")
            if g is None or not math.isfinite(g):
                _fail(case, res, f"a candidate's |g| {g!r} is not finite")
            with np.errstate(over="ignore", invalid="ignore"):
                f0 = float(c["C"]) * weighted_pairs(data, t.get("pair_cost"), t.get("query_weight")) \
                    if data is not None else math.inf
        if not obj <= f0 * (1 + 1e-9) + 1e-300:
            _fail(case, res, f"objective {obj!r} above f(0) = {f0!r} (C or lambda of {c})")


def check_model(case, res, path):
    if not Path(path).is_file():
        _fail(case, res, f"exit 0 without the model {path}")
    _finite_h5(case, res, path)
    with h5py.File(path, "r") as f:
        summary = json.loads(f.attrs["training"])
        config = json.loads(f.attrs["config"])
        method = summary.get("method") or config.get("method")
        w = f["w"][()]
    costs = {k: config[k] for k in ("pair_cost", "query_weight") if k in config}
    check_summary(case, res, summary, method, costs)
    t = dict(case.train, **costs)
    if method == "primal" and t.get("loss", "squared_hinge") == "squared_hinge" and case.data is not None \
            and t.get("pair_cost") in (None, "none") and t.get("query_weight") in (None, "none") \
            and not t.get("features"):
        f_w = primal_objective(case.data, w, float(summary["C"]), path)
        obj = summary["objective"]
        scale = max(abs(obj), 1e-300)
        if f_w is not None and not abs(f_w - obj) <= 1e-6 * scale + 1e-12:
            _fail(case, res, f"the model's objective is {f_w!r} on its data, the summary says {obj!r}")


def _train_ok(case, res):
    check_model(case, res, case.outputs[0])


def _grid_ok(case, res):
    run = Path(case.outputs[0])
    check_model(case, res, run / "model.h5")
    for m in run.glob("runs/*/model.h5"):
        check_model(case, res, m)


def _cv_ok(case, res):
    run = Path(case.outputs[0])
    models = list(run.glob("Fold*/*/model.h5"))
    if not models:
        _fail(case, res, "cv exited 0 without a model")
    for t in run.glob("Fold*/*/test.json"):
        means = json.loads(t.read_text())["means"]
        if not all(v is not None and math.isfinite(v) for v in means.values()):
            _fail(case, res, f"{t}: a test metric is not finite: {means}")
    saved = case.data
    case.data = None  # f(0) of each fold's data is not tracked here: finite, converged or capped
    try:
        for m in models:
            check_model(case, res, m)
    finally:
        case.data = saved


def _predict_ok(case, res):
    out = Path(case.outputs[0])
    vals = out.read_text().split()
    if len(vals) != case.data.n:
        _fail(case, res, f"{len(vals)} scores for {case.data.n} rows")
    if vals and not np.isfinite(np.array(vals, float)).all():
        _fail(case, res, "non-finite scores written with exit 0")


def _eval_ok(case, res):
    line = [ln for ln in res.out.splitlines() if ln.startswith("{")]
    means = json.loads(line[-1])["means"]
    # null: a measure that the data leave undefined (pairwise accuracy without pairs)
    bad = {k: v for k, v in means.items() if v is not None and not (math.isfinite(v) and -1e-12 <= v <= 1 + 1e-12)}
    if bad:
        _fail(case, res, f"metrics not finite or outside [0, 1]: {bad}")


def _select_ok(case, res):
    out = Path(case.outputs[0])
    _finite_h5(case, res, out, allow_nan=("similarity", "max_similarity"))
    with h5py.File(out, "r") as f:
        order, d = f["order"][()], len(f["importance"])
    if sorted(order.tolist()) != list(range(1, d + 1)) or (case.data is not None and d != case.data.d):
        _fail(case, res, f"the GAS order {order.tolist()} is not a permutation of the data's features 1..{d}")


def _info_ok(case, res):
    if not res.out.strip():
        _fail(case, res, "info printed nothing")
    if case.data is not None and not case.data.finite():
        said = (res.out + res.err).lower()
        if not any(w in said for w in ("nan", "inf", "finite")):
            _fail(case, res, "info on a file holding a non-finite value does not say so")


def _convert_ok(case, res):
    out = Path(case.outputs[0])
    with h5py.File(out, "r") as f:
        X, y = f["X"][()], f["y"][()]
        n = int(f.attrs["n_rows"])
    if X.shape[0] != n or not np.isfinite(X).all() or not np.isfinite(y).all():
        _fail(case, res, f"a converted dataset with non-finite values or {X.shape[0]} rows for n_rows {n}")


def _report_ok(case, res):
    out = Path(case.outputs[0])
    if not out.is_file() or out.stat().st_size == 0:
        _fail(case, res, "report exited 0 without its page")


def _export_ok(case, res):
    """The exported file read by its consumer's reader: ONNX by onnx's checker and onnxruntime (its
    scores those of the model), the JSON formats by a JSON parser, the peers' text as numbers."""
    argv = [str(a) for a in case.argv]
    fmt = argv[argv.index("--format") + 1].strip().lower()
    if argv[argv.index("-o") + 1] == "-":
        content = res.out.encode()
        if fmt != "onnx" and not content.strip():
            _fail(case, res, "export -o - printed nothing")
        return
    out = Path(case.outputs[0])
    content = out.read_bytes()
    if not content:
        _fail(case, res, "export exited 0 with an empty file")
    if fmt == "onnx":
        import onnx
        import onnxruntime as ort
        from streamrank.state.model import load
        m = onnx.load_from_string(content)
        onnx.checker.check_model(m)
        model = load(case.inputs[0])
        X = np.asarray(case.data.X, np.float32)
        sess = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: X}
        if len(sess.get_inputs()) > 1:
            feed[sess.get_inputs()[1].name] = np.repeat(np.arange(len(case.data.query_ptr) - 1),
                                                        np.diff(case.data.query_ptr)).astype(np.int64)
        got = sess.run(None, feed)[0].reshape(-1).astype(np.float64)
        want = model.decision_function(X, case.data.query_ptr)
        if got.shape != want.shape or np.abs(got - want).max(initial=0) > 1e-5 * max(np.abs(want).max(initial=0), 1e-30):
            _fail(case, res, f"onnxruntime's scores {got[:5]} differ from predict's {want[:5]}")
    elif fmt in ("json", "solr", "elasticsearch"):
        try:
            json.loads(content.decode("utf-8"))
        except ValueError as e:
            _fail(case, res, f"export wrote {fmt} that is not JSON: {e}")
    else:
        text = content.decode("utf-8")
        if not text.endswith("\n") or "\r" in text:
            _fail(case, res, f"{fmt}: a text file that does not end in a newline, or holds a carriage return")


SUCCESS = {"train": _train_ok, "grid": _grid_ok, "cv": _cv_ok, "predict": _predict_ok, "eval": _eval_ok,
           "select-features": _select_ok, "info": _info_ok, "convert": _convert_ok, "report": _report_ok,
           "export": _export_ok}


COLUMNS = ("tried", "exit 0", "exit 2", "signal", "other", "failed")


def counts_table():
    """{"by_command": [{"command", "tried", "exit 0", ...}], "by_kind": [{"kind", ...}]}."""
    return {"by_command": [{"command": c, **{n: v.get(n, 0) for n in COLUMNS}} for c, v in sorted(BY_COMMAND.items())],
            "by_kind": [{"kind": k, **{n: v.get(n, 0) for n in COLUMNS}} for k, v in sorted(BY_KIND.items())]}
