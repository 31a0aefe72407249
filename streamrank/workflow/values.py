"""The grammar of hyper-parameter values, shared by ``train`` and ``grid`` (as LIBSVM's grid.py and
SVMrank users write them).

    0.1,1,10        a list
    2^-5:2^5        powers of two, exponents -5..5 in steps of one (11 values)
    2^-5:2^5:2      the same exponents in steps of two (-5, -3, ..., 5)
    10^-3:10^1      powers of ten likewise
    2^-3            one power; items of any kind can be mixed: 0.5,2^-5:2^-1:2

Values keep the order written (duplicates dropped); a range is computed as ``base ** k`` with an
integer ``k``, so ``2^-5`` is exactly 0.03125.
"""

import re

from streamrank import params
from streamrank.errors import ParameterError

_NUM = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_POW = re.compile(rf"^({_NUM})\^([+-]?\d+)$")
_RANGE = re.compile(rf"^({_NUM})\^([+-]?\d+):({_NUM})\^([+-]?\d+)(?::(\d+))?$")


def parse_values(text, name, *, integer=False):
    """The values of ``text`` (see the module docstring), each > 0; ``name`` is the parameter the
    errors name. ``integer``: whole numbers only (e.g. components)."""
    out = []
    for item in str(text).replace(" ", "").split(","):
        if not item:
            continue
        vals = _item(item, name)
        for v in vals:
            key = name.replace("-", "_")
            r = params.RANGES.get(key)
            if r is not None:
                # the parameter's own range and a fix that range takes, from the one table
                # (streamrank.params): eta lies in (0, 1), so -2 is not mended to 2; components
                # are whole, so 2.5 is mended to 2, never to a negative
                whole = (r.integer or integer) and v != int(v)
                if whole or not r.holds(v):
                    fix = params.suggest(key, v)
                    what = f"whole numbers ({r.describe()})" if whole else r.describe()
                    raise ParameterError(f"{name} must be {what}; got {v:g} (from {item!r})"
                                         + (f". Use {name}={fix}" if fix is not None else ""))
            elif integer and v != int(v):
                raise ParameterError(f"{name} must be whole numbers; got {v:g} (from {item!r}). "
                                     f"Use {name}={max(int(abs(v)), 1)}")
            elif not v > 0:
                raise ParameterError(f"{name} must be > 0; got {v:g} (from {item!r}). Use {name}={abs(v) or 1:g}")
            if integer:
                v = int(v)
            if v not in out:
                out.append(v)
    if not out:
        raise ParameterError(f"{name} needs at least one value; got {text!r}. Use {name}=0.1,1,10 or {name}=2^-5:2^5")
    return out


def _item(item, name):
    m = _RANGE.match(item)
    if m:
        b1, e1, b2, e2, step = m.groups()
        if float(b1) != float(b2) or not float(b1) > 0:
            raise ParameterError(f"{name}: a range runs over powers of one positive base, as 2^-5:2^5; got {item!r}")
        e1, e2, step = int(e1), int(e2), int(step or 1)
        if step < 1 or e2 < e1:
            raise ParameterError(f"{name}: in {item!r} the exponents must rise ({e1} to {e2}) in steps >= 1. "
                                 f"Use {name}={b1}^{min(e1, e2)}:{b1}^{max(e1, e2)}")
        base = float(b1)
        if (e2 - e1) // step > MAX_RANGE_VALUES:
            raise ParameterError(f"{name}: {item!r} has {(e2 - e1) // step + 1:,} values; a range holds at most "
                                 f"{MAX_RANGE_VALUES + 1}. Use {name}={b1}^{e1}:{b1}^{e1 + 10}")
        return [_finite(_power(base, k, item, name), item, name) for k in range(e1, e2 + 1, step)]
    m = _POW.match(item)
    if m:
        return [_finite(_power(float(m.group(1)), int(m.group(2)), item, name), item, name)]
    try:
        v = float(item)
    except ValueError:
        raise ParameterError(f"{name}: {item!r} is not a number, a power such as 2^-3, or a range such as "
                             f"2^-5:2^5 or 10^-3:10^1:1") from None
    return [_finite(v, item, name)]


# a range of more values than this is a typo (2^-5:2^500), not a grid anybody means to train
MAX_RANGE_VALUES = 200


def _power(base, k, item, name):
    try:
        return base ** k
    except OverflowError:  # 2^2000: beyond float64
        raise ParameterError(f"{name}: {item!r} is beyond float64's range (about 1.8e308); "
                             f"use {name}=2^-5:2^5") from None


def _finite(v, item, name):
    """``v``, unless it is inf or nan (which float() reads from 'inf', 'nan', '1e999'), or 0 from
    an underflow (2^-2000): the values of a path are finite and > 0."""
    import math
    if not math.isfinite(v):
        raise ParameterError(f"{name} must be finite numbers > 0; got {item!r}. Use {name}=0.1,1,10")
    return v
