"""Loading streamrank's cached kernels without numba's compiler registries.

numba's ``Cache.load_overload`` refreshes the target context before it loads a cached function:
the first load in a process imports and installs every typing and lowering registry numba has
(its NumPy, random, typed containers, ...; ``numba.np.linalg`` imports ``scipy.linalg`` on the
way), which a compile needs and a load does not. A load only needs the object code, the
function's environment and numba's runtime (NRT, whose symbols the code links against). Measured
on this project's 2-core machine (interleaved runs), a warm ``streamrank train`` on MQ2008 Fold1
took 0.87 s with numba's loads and 0.70 s with these (``python tools/bench_peers.py --only
linear`` times the whole process).

:func:`install` makes the loads of streamrank's own functions initialise the runtime alone and
leaves every other function's load as numba has it. A compile still refreshes the contexts
itself (numba's ``CompilerBase``), so a process that loads some kernels and compiles others gets
the registries when it first compiles. Each module that defines kernels imports this one.

numba keys a cached function by its signature, the CPU and its bytecode, not by how LLVM was
told to compile it. streamrank switches LLVM's SLP vectoriser on when it is imported before
numba (:mod:`streamrank._native.memory`); a process that imported numba first (a notebook that
loaded another numba user, a test module) compiled the kernels without it and cached them, and
every later run, however it started, loaded that code: the row dots 2.5x slower (measured,
issue 34). :func:`install` adds the settings that shape the code (``NUMBA_OPT``,
``NUMBA_SLP_VECTORIZE``, ``NUMBA_LOOP_VECTORIZE``) to the key of streamrank's functions, so code
compiled under other settings sits beside it under its own key and is never loaded for it.
"""

from numba.core import caching

try:
    from numba.core.runtime import rtsys
except ImportError:  # another numba layout: its own loads, unchanged
    rtsys = None

_PACKAGE = __name__.split(".")[0] + "."


def _ours(cache):
    return getattr(cache._py_func, "__module__", "").startswith(_PACKAGE)


def install():
    """Idempotent; composes with wrappers installed later (``warmup.install_compile_locks``)."""
    cls = caching.Cache
    if getattr(cls, "_streamrank_fast", False):
        return
    if rtsys is None or not all(hasattr(cls, a) for a in ("_load_overload", "_guard_against_spurious_io_errors")):
        return  # a numba whose cache is built otherwise keeps its own loads
    numba_load = cls.load_overload

    def load_overload(self, sig, target_context):
        if not _ours(self):
            return numba_load(self, sig, target_context)
        try:
            rtsys.initialize(target_context)  # the runtime's symbols, before the code is linked
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - anything this load lacks: numba's own, registries and all
            return numba_load(self, sig, target_context)

    load_overload._streamrank_fast = True
    cls.load_overload = load_overload
    if hasattr(cls, "_index_key"):
        numba_key = cls._index_key

        def _index_key(self, sig, codegen):
            key = numba_key(self, sig, codegen)
            return key + (compile_settings(),) if _ours(self) else key

        cls._index_key = _index_key
    cls._streamrank_fast = True


def compile_settings():
    """The numba settings that change the machine code of a kernel, as read at compile time."""
    from numba.core import config
    return ("opt", int(config.OPT), "slp", bool(config.SLP_VECTORIZE), "loop", bool(config.LOOP_VECTORIZE))



