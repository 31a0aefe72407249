"""The solvers' finiteness checks: a non-finite objective, gradient or Hessian product ends a run at
once with :class:`~streamrank.errors.NumericError`, which names what was not finite, where, and the
likely causes.

Why at once: every test a solver loop makes is a comparison, and a comparison with NaN is False, so
a loop that asks ``actred > eta prered`` or ``||r|| > tol`` of a NaN neither accepts nor stops (it
would log ``iter 0 f nan |g| nan (rejected)`` without end). No loop may see a value that has not
passed through here.

The error carries attributes for the training layer, which adds the data's file, row and feature or
the parameter that overflows and the largest value that works:

- ``quantity``: ``"f"``, ``"g"``, ``"hessp"`` (a Hessian product H d), ``"hessian"`` (a dense H),
  ``"preconditioner"`` (M^-1 r or u^T M v), ``"line"`` (a line search's phi(t) and derivatives),
  ``"direction"`` (a Newton direction), ``"reduction"`` (f(w) - f(w + s) or its model), ``"radius"``,
  ``"residual"`` (CG's z.r), ``"step"`` (a CG step to the trust region's boundary);
- ``where``: ``"start"`` (the first point, a resumed point or the reference point w = 0),
  ``"trial"`` (a trial point), ``"accepted"`` (the gradient of an accepted point), ``"cg"`` (a CG
  step), ``"line search"``, ``"direction"``, ``"direct solve"`` (CLSRRank's one linear system);
- ``iteration``: accepted steps before it; ``step``: the trial step it belongs to (1-based; 0 at
  the start); ``cg_step``: the CG step (1-based) or None; ``value``: the offending number.
"""

import math

import numpy as np

from streamrank.errors import NumericError

# the causes every message names: the solvers see only a function object, so which one it is (and
# which row or parameter) is the training layer's to add
CAUSES = "a non-finite value in the data, or parameters whose scale overflows float64"

_NAMES = {"f": "the objective f", "g": "the gradient g", "hessp": "the Hessian product H d",
          "hessian": "the Hessian H", "preconditioner": "the preconditioner's product",
          "line": "the line search's phi(t)", "direction": "the Newton direction",
          "reduction": "the reduction f(w) - f(w + s)", "radius": "the trust-region radius",
          "residual": "the CG residual's z.r = r^T M^-1 r", "step": "the CG step"}


def _where_text(where, iteration, step, cg_step, point):
    if where == "start":
        return f"at {point or 'the starting point'}"
    if where == "direct solve":
        return "in the direct solve"
    at = f"step {step} (after {iteration} accepted)" if step else f"iteration {iteration}"
    if where == "cg":
        return f"in CG step {cg_step} of {at}" if cg_step else f"at the start of CG in {at}"
    if where == "accepted":
        return f"at the point accepted at {at}"
    if where == "trial":
        return f"at the trial point of {at}"
    return f"in the {where} of {at}"


def numeric_error(quantity, where, value=None, *, iteration=0, step=0, cg_step=None, detail="", point="",
                  state="not finite"):
    """The NumericError for ``quantity`` not finite ``where`` (module docstring); ``detail`` says
    more about the value (e.g. which entry), ``point`` names a start point other than w0, ``state``
    what is wrong when it is not non-finiteness (a matrix "not positive definite in float64")."""
    shown = "" if value is None else f" ({value!r})" if isinstance(value, float) else f" ({value})"
    msg = (f"{_NAMES.get(quantity, quantity)} is {state}{shown} "
           f"{_where_text(where, iteration, step, cg_step, point)}"
           f"{'; ' + detail if detail else ''}: likely causes: {CAUSES}")
    err = NumericError(msg)
    err.quantity, err.where, err.value = quantity, where, value
    err.iteration, err.step, err.cg_step = int(iteration), int(step), cg_step
    return err


def vector_detail(v):
    """What is wrong with a vector whose norm is not finite: its first non-finite entry, or (all
    entries finite) the largest entry, whose square overflows the norm."""
    v = np.asarray(v)
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        return f"{bad.size} of its {v.size} entries are not finite, the first at index {bad[0]} ({v[bad[0]]!r})"
    return f"its entries are finite but their squares overflow (max |entry| = {float(np.max(np.abs(v))):.3g})"


def check_f(f, where, **at):
    """``f`` as a float, or NumericError when it is not finite."""
    f = float(f)
    if not math.isfinite(f):
        raise numeric_error("f", where, f, **at)
    return f


def check_g(g, where, **at):
    """||g|| (finite), or NumericError when g has a non-finite entry or its norm overflows (an
    infinite ||g|| would make the radius and the stopping rule's reference infinite: the
    ``--C 1e300`` run that "converged" at 0 iterations with |g| inf)."""
    with np.errstate(over="ignore", invalid="ignore"):  # the error below says it, without a numpy warning
        gn = float(np.linalg.norm(g))
    if not math.isfinite(gn):
        raise numeric_error("g", where, gn, detail=vector_detail(g), **at)
    return gn
