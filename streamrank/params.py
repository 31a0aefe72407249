"""The one table of parameter ranges: every numeric setting the CLI, the Python API and the
estimators take is checked here, against its own range, before any work (DESIGN.md, "Guarantees":
parameter intake).

Each entry says whether the value is a whole number, its bounds (open or closed), a value that works
(the fix a message proposes) and, where it can overflow on some data, where that begins. ``inf``
and ``nan`` are refused everywhere; 0 and negatives only where the range excludes them (``coef0``
may be 0 or negative, a seed may be 0). Messages are in the library's terms ("C must be a finite
number > 0; got inf. Use C=0.5"); the CLI shows its flags (:func:`streamrank.cli.common.translate`).

Ranges hold whatever the data. A value inside its range can still overflow float64 on particular
data (C = 1e300 with a few thousand pairs): that needs the data's statistics, so the training
path checks it after its statistics pass, before the first iteration (:func:`c_limit`).
"""

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

from streamrank.errors import ParameterError

INF = math.inf
# The largest scale of the objective whose solver arithmetic stays finite: truncated CG forms
# d.Hd with d ~ g, which is of the order of (C sum(lambda mu) 4 max||x||^2)^3 (||g||^2 ||H||; see
# c_limit), so the scale must stay below the cube root of float64's largest value (5.6e102), here
# with a margin of 10^3 for the sums beyond the bound's terms
FLOAT64_ROOM = 1.7976931348623157e308 ** (1.0 / 3.0) / 1e3
# --method exact's default gap_tol. Its gradient rule in beta (||g|| <= 1e-3 ||g0||) stopped the 300
# candidates of MQ2008's five-fold default grid at estimated gaps of 2e-14 to 3e-5 (median 1e-10,
# 10 above 1e-6): since f is not strongly convex in beta, ||g|| does not measure the gap there
# (docs/methods.md, "Kernel approximation, solvers, the exact kernel")
EXACT_GAP_TOL = 1e-6


@dataclass(frozen=True)
class Range:
    """One parameter's range: ``low`` / ``high`` with ``open_low`` / ``open_high``; ``integer``
    for whole numbers; ``example`` a value that works; ``overflow``: where it begins, if it can."""

    low: float = -INF
    high: float = INF
    open_low: bool = False
    open_high: bool = False
    integer: bool = False
    example: str = "1"
    overflow: str = ""
    # how the example is written where it is not a number the check takes: "size" (512MB, read by
    # units.parse_size), "list" (values of workflow.values), "pairs" (label pair costs); and
    # words the callers take in place of a number (eta's "auto")
    form: str = "number"
    words: tuple = ()

    def describe(self):
        what = "an integer" if self.integer else "a finite number"
        if self.low == -INF and self.high == INF:
            return what
        if self.high == INF:
            return f"{what} {'>' if self.open_low else '>='} {_num(self.low)}"
        if self.low == -INF:
            return f"{what} {'<' if self.open_high else '<='} {_num(self.high)}"
        lo, hi = "(" if self.open_low else "[", ")" if self.open_high else "]"
        return f"{what} in {lo}{_num(self.low)}, {_num(self.high)}{hi}"

    def holds(self, v):
        above = v > self.low if self.open_low else v >= self.low
        below = v < self.high if self.open_high else v <= self.high
        return above and below


def _num(v):
    return f"{int(v)}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:g}"


_INT32 = 2**31 - 1

# name -> Range. Names are the library's (the CLI's flags come from cli.common.FLAGS).
RANGES = {
    # the loss weight of paper 000 / 001 / 004; f(0) = C sum(lambda mu) and the Hessian's scale
    # C sum(lambda mu) 4 max||x||^2 must stay finite: c_limit
    "C": Range(0, INF, open_low=True, example="0.5",
               overflow="C sum(lambda mu) 4 max||x||^2 must stay below float64's range (checked on the data)"),
    # kernel width; rbf/laplacian underflow harmlessly at large gamma, poly/sigmoid saturate
    "gamma": Range(0, INF, open_low=True, example="0.03125",
                   overflow="poly: (gamma x.y + coef0)^degree must stay finite on the data"),
    "coef0": Range(example="1"),
    "degree": Range(1, 64, integer=True, example="3",
                    overflow="poly: (gamma x.y + coef0)^degree must stay finite on the data"),
    # the smooth hinge's band half-width (paper 001): inside (0, 1)
    "eta": Range(0, 1, open_low=True, open_high=True, example="auto", words=("auto",)),
    # CLSRRank's coefficient penalty (paper 002): > 0 keeps its system positive definite
    "lam": Range(0, INF, open_low=True, example="1e-3"),
    "tol": Range(0, INF, open_low=True, example="1e-3"),
    "gap_tol": Range(0, 1, open_low=True, open_high=True, example="1e-6", words=("off",)),
    "abs_gtol": Range(0, INF, open_low=True, example="1e-4"),
    "abs_dtol": Range(0, INF, open_low=True, example="1e-4"),
    "max_iter": Range(1, _INT32, integer=True, example="1000"),
    "components": Range(1, _INT32, integer=True, example="1000"),
    "n_components": Range(1, _INT32, integer=True, example="1000"),
    "rank": Range(1, _INT32, integer=True, example="100"),
    "seed": Range(0, 2**32 - 1, integer=True, example="0"),
    "tradeoff": Range(0, INF, example="0.5"),
    "k": Range(1, _INT32, integer=True, example="10"),
    "n_features": Range(1, _INT32, integer=True, example="46"),
    "workers": Range(1, 1024, integer=True, example="2"),
    # rows: beyond 2^40 no dataset has them, and qp[q] + rows must stay inside int64
    "partition_rows": Range(1, 2**40, integer=True, example="262144"),
    # seconds between commits of a conversion or a selection's pass (0: after every block)
    "commit_seconds": Range(0, INF, example="60"),
    # bytes (memory_budget, block_bytes, cache_size are parsed by units.parse_size, then checked)
    "memory_budget": Range(1, 2**62, integer=True, example="2GB", form="size"),
    "block_bytes": Range(1, 2**62, integer=True, example="64MB", form="size"),
    "cache_size": Range(1, 2**62, integer=True, example="10GB", form="size"),
    # a label pair's cost lambda (paper 001) and a query's weight
    "pair_cost": Range(0, INF, open_low=True, example="0-1:1,1-2:1.3,0-2:2", form="pairs"),
    "folds": Range(1, _INT32, integer=True, example="1,2,3,4,5", form="list"),
}


def check(name, value, *, shown=None):
    """``value`` as the parameter ``name`` takes it (int or float), or :class:`ParameterError`
    naming ``shown`` (default ``name``), its range and a value that works. Strings are read as
    numbers (``"0.5"``); bools, nan and inf are refused."""
    r = RANGES[name]
    label = shown or name
    v = _number(value)
    if v is None or (r.integer and not float(v).is_integer()) or not r.holds(v):
        fix = suggest(name, value)
        raise ParameterError(f"{label} must be {r.describe()}; got {value!r}." + (f" Use {name}={fix}" if fix else ""))
    return int(v) if r.integer else float(v)


def suggest(name, value):
    """The fix a refusal of ``value`` for parameter ``name`` proposes, as text, or None: a value
    that the same parameter takes (:func:`accepts`), never the refused one.

    Derived from the value where one slip explains it: a sign (-0.5 -> 0.5) or a fraction where a
    whole number is needed (2.7 -> 3), when the result is in range; otherwise (nan, inf, text, a
    value past a bound) the table's example, the value that works. ``value`` as a user wrote it
    (a number or its text)."""
    r = RANGES[name]
    v = _number(value)
    if v is not None and r.form in ("number", "list"):
        for cand in (v, abs(v)):
            if r.integer and not float(cand).is_integer():
                cand = round(cand)  # to the nearest whole number (half to even)
            if cand != v and r.holds(cand):
                if r.integer or (float(cand).is_integer() and abs(cand) < 1e15):
                    return str(int(cand))
                return repr(float(cand))  # every digit: a value just inside an open bound stays inside
    return r.example if accepts(name, r.example) else None


def accepts(name, text):
    """Whether parameter ``name`` takes ``text`` as its callers read it: a number in its range, one
    of its words, a size (``2GB``), a list of values, or label pair costs (``0-1:1,1-2:2``)."""
    r = RANGES[name]
    text = str(text).strip()
    if text in r.words:
        return True
    try:
        if r.form == "size":
            from streamrank.units import parse_size
            check(name, parse_size(text, name))
        elif r.form == "list":
            check_all(name, [t for t in text.split(",")])
        elif r.form == "pairs":
            for item in text.split(","):
                pair, sep, cost = item.partition(":")
                low, dash, high = pair.partition("-")
                if not (sep and dash) or _number(low) is None or _number(high) is None:
                    return False
                check(name, cost)
        else:
            check(name, text)
    except ParameterError:
        return False
    return True


def check_all(name, values, *, shown=None):
    """:func:`check` of each of ``values``: one number (a 0-d array too), or a non-empty sequence of
    them (list, tuple, set, 1-D array). An empty sequence or a mapping (keys or values?) is refused
    as a :class:`ParameterError` naming the parameter, like any value out of range."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or getattr(values, "ndim", 1) == 0:
        return [check(name, values, shown=shown)]
    items = [] if isinstance(values, Mapping) else list(values)
    if not items:
        r = RANGES[name]
        raise ParameterError(f"{shown or name} must be {r.describe()}, or a non-empty list of them; got {values!r}. "
                             f"Use {name}={suggest(name, None)}")
    return [check(name, v, shown=shown) for v in items]


def _number(value):
    """``value`` as a finite int or float, or None (bool, nan, inf, text that is not a number,
    anything else)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        try:
            v = float(value)
        except (OverflowError, TypeError, ValueError):
            return None
        return v if math.isfinite(v) else None
    try:  # a 0-d numpy array, a numpy scalar of another kind
        import numpy as np
        a = np.asarray(value)
        if a.ndim == 0 and a.dtype.kind in "iuf" and np.isfinite(a):
            return int(a) if a.dtype.kind in "iu" else float(a)
    except Exception:  # noqa: BLE001 - not a number of any kind we read
        pass
    return None


def c_limit(weight_sum, max_sq_norm):
    """The largest C whose objective stays finite in float64 on data with sum of pair weights
    ``weight_sum`` (sum over preference pairs of lambda mu) and largest squared row norm
    ``max_sq_norm`` (after normalisation and the feature map).

    With d_ij = x_i - x_j (||d_ij||^2 <= 4 max||x||^2) the squared hinge's value at w = 0 is
    C sum(lambda mu); its gradient and Hessian (paper 004 eq. 3.13, appendix B) are sums of
    2 C lambda mu d_ij and 2 C lambda mu d_ij d_ij^T, so with S = 2 C sum(lambda mu) max(1, 4 max||x||^2)
    f(0) <= S, ||g|| <= S and ||H|| <= 1 + S. The solver forms ||g||^2 and, in CG, d.Hd with d = -g
    first: at most S^3. S <= FLOAT64_ROOM (the cube root of float64's range, with a margin) keeps
    every one of them finite at w = 0 and in the region the solver searches (the loss only falls
    from f(0)).
    """
    scale = 2.0 * max(float(weight_sum), 1.0) * max(1.0, 4.0 * float(max_sq_norm))
    return FLOAT64_ROOM / scale if math.isfinite(scale) else 0.0


def check_c_on_data(Cs, weight_sum, max_sq_norm, data_name):
    """Refuse, before the first iteration, a C whose objective overflows float64 on this data
    (:func:`c_limit`), naming the limit."""
    limit = c_limit(weight_sum, max_sq_norm)
    bad = [C for C in Cs if C > limit]
    if bad:
        raise ParameterError(
            f"C={max(bad):g} overflows float64 on {data_name}: C * 2 * (sum of pair weights {weight_sum:.4g}) * "
            f"4 * (largest squared row norm {max_sq_norm:.4g}) must stay below {FLOAT64_ROOM:.3g} (the solver "
            f"forms its cube), so C must be at most {limit:.4g} on these data. Use C={_round_down(limit)}")


def _round_down(v):
    """A round value at most ``v`` (a power of ten), for a message's fix."""
    if not v > 0:
        return "1"
    return f"{10.0 ** math.floor(math.log10(v)):g}"
