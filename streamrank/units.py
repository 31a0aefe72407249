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


def machine_memory():
    """Bytes of memory this process can have: the machine's physical memory, or less where its
    cgroup sets a limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); 0 when unknown."""
    import os
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        have = 0
    limit = _cgroup_limit()
    return min(have, limit) if have and limit else have or limit


def _cgroup_limit():
    """This process's cgroup memory limit in bytes, the smallest set on its cgroup or an ancestor,
    or 0 (none, or not Linux)."""
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return 0
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = "/sys/fs/cgroup", "memory.max"
        elif "memory" in controllers.split(","):
            base, name = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for k in range(len(parts), -1, -1):
            try:
                with open("/".join([base, *parts[:k], name])) as fh:
                    text = fh.read().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < MAX_SIZE:  # "max", or v1's 2^63 rounded to pages: no limit
                limits.append(int(text))
    return min(limits, default=0)


def budget_bytes(value, name="memory_budget"):
    """``value`` (a size, :func:`parse_size`) as a memory budget in bytes: refused when it is more
    than :func:`machine_memory`, since a plan made for it allocates what the system cannot give
    (blocks, chunks: a MemoryError or the kernel's OOM killer, instead of a plan that holds)."""
    n = parse_size(value, name)
    have = machine_memory()
    if have and n > have:
        raise ParameterError(f"{name} {format_size(n)} is more than the {format_size(have)} of memory this process "
                             f"can have here (the machine's, or its cgroup's limit): a plan made for it would "
                             f"allocate what the system cannot give. Use {name}={_suggest(have)}")
    return n


def _suggest(have):
    """Half of ``have`` in whole GB (or MB below 2 GB), as a budget to pass."""
    half = have // 2
    return f"{half // 1000**3}GB" if half >= 1000**3 else f"{max(1, half // 1000**2)}MB"


def format_size(n):
    """Human-readable bytes, decimal units (as parse_size reads them back)."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
