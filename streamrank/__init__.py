"""streamrank: pairwise ranking SVMs on learning-to-rank data larger than memory.

The public names load on first use (PEP 562), so ``import streamrank`` and ``streamrank --help``
import neither numba, scipy nor h5py: a command line that starts in a quarter of a second.

Importing the package changes nothing in the process: not the environment, not numpy's or numba's
settings. :func:`configure` applies the settings the ``streamrank`` program runs with (call it
before numpy is imported; :mod:`streamrank._native.process` says what each buys).
"""

from streamrank._native import startup_signals as _startup_signals

_startup_signals.install()  # the program alone: a signal before the command's own handlers ends it with a line

from streamrank._native.process import configure  # noqa: E402 - after the signals
from streamrank._version import __version__  # noqa: E402

# public name -> the module that defines it
_LAZY = {"Dataset": "streamrank.io.dataset", "open_dataset": "streamrank.io.dataset",
         "load_ranking": "streamrank.io.load",
         "RankSVM": "streamrank.estimator", "CLSRRank": "streamrank.estimator", "load": "streamrank.estimator"}

__all__ = ["__version__", "configure", "Dataset", "open_dataset", "load_ranking", "RankSVM",
           "CLSRRank", "load"]


def __getattr__(name):
    import importlib
    module = _LAZY.get(name)
    if module is None:  # a subpackage or module not imported yet (streamrank.errors, streamrank.io, ...)
        import importlib.util
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module 'streamrank' has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
