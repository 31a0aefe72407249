"""Byte sizes written the way people write them: 512MB, 4GiB, 2g, 1000000."""

import numbers
import re

from streamrank.errors import ParameterError

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4,
}
# 2^62 bytes: beyond any machine, and still exact in an int64 and a float64 product with a share
MAX_SIZE = 2**62
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text, name="memory_budget"):
    """Return the number of bytes in ``text`` (an int passes through unchanged)."""
    try:
        if isinstance(text, numbers.Real) and not isinstance(text, bool):
            value = int(text)  # inf, nan: OverflowError, ValueError
        else:
            m = _SIZE_RE.match(str(text))
            unit = m.group(2).lower() if m else None
            if m is None or unit not in _UNITS:
                raise ParameterError(
                    f"{name} must be a size such as 512MB, 2GB or 4GiB; got {text!r}. Use {name}=2GB"
                )
            value = int(float(m.group(1)) * _UNITS[unit])
    except (OverflowError, ValueError):  # inf, nan, 1e999MB
        raise ParameterError(f"{name} must be a size such as 512MB, 2GB or 4GiB; got {text!r}. "
                             f"Use {name}=2GB") from None
    if not 0 < value <= MAX_SIZE:
        raise ParameterError(f"{name} must be a size in (0, {format_size(MAX_SIZE)}]; got {text!r}. Use {name}=2GB")
    return value


def format_size(n):
    """Human-readable bytes, decimal units (as parse_size reads them back)."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
