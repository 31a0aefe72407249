"""streamrank's kernels: compiled with their own LLVM settings, loaded without numba's compiler
registries.

Each module that defines numba kernels ends with ``numba_cache.adopt(globals())``, which gives
every kernel of the module (each numba dispatcher, not numba's classes) two things:

- Its compiles run with LLVM's SLP vectoriser on. numba leaves it off by default
  (``NUMBA_SLP_VECTORIZE=0``), and without it the row dots' interleaved partial sums
  (``_native.fused``) compile to scalar multiply-adds, a pass bound by arithmetic, not bandwidth.
  With SLP on, the same sums run several lanes at a time. SLP only packs independent operations of
  the same kind; with no fastmath anywhere LLVM may not reassociate a sum, so every kernel gives the
  same bits either way (tools/check_bit_identity.py). numba reads
  ``numba.core.config.SLP_VECTORIZE`` when it optimises a function's module, so the value is set
  around the kernel's compile, under numba's compiler lock, and put back after: other numba code in
  the process compiles as it would without streamrank. ``NUMBA_SLP_VECTORIZE`` set in the
  environment is obeyed instead.

- Its cache (numba's ``cache=True`` files, the same files) is a :class:`KernelCache`, which differs
  from numba's in two ways. numba keys a cached function by its signature, the CPU and its bytecode,
  not by how LLVM was told to compile it, so code compiled under other settings (slower row dots)
  would be loaded by every later run; the key adds the settings the code was compiled with
  (:func:`compile_settings`), and code compiled otherwise sits beside it under its own key. And
  numba's load refreshes the target context first: the first load in a process imports and installs
  every typing and lowering registry numba has (``numba.np.linalg`` imports ``scipy.linalg`` on the
  way), which a compile needs and a load does not. A load needs the object code, the function's
  environment and numba's runtime (NRT, whose symbols the code links against); loading only these
  makes a warm MQ2008 training about a fifth shorter (docs/design.md, Measurements). A compile still
  refreshes the contexts itself, so a process that loads some kernels and compiles others gets the
  registries when it first compiles.

A cache miss can also take the kernel's compile lock (:data:`compile_lock`, which
``warmup.install_compile_locks`` sets) so that two processes never compile one kernel at once.
"""

import contextlib
import os

from numba.core import caching, config
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

try:
    from numba.core.runtime import rtsys
except ImportError:  # another numba layout: numba's own loads, unchanged
    rtsys = None

# the lean load needs these of numba's Cache; a numba built otherwise keeps its own loads
_LEAN = rtsys is not None and all(hasattr(caching.Cache, a)
                                  for a in ("_load_overload", "_guard_against_spurious_io_errors"))
SLP_ENV = "NUMBA_SLP_VECTORIZE"

# (acquire, release) of an exclusive lock named by a path, taken on a cache miss until the compiled
# code is saved; None: no locks (warmup.install_compile_locks sets it)
compile_lock = None


def slp_vectorize():
    """Whether streamrank's kernels compile with LLVM's SLP vectoriser: yes, unless
    ``NUMBA_SLP_VECTORIZE`` is set in the environment, whose value numba read is then obeyed."""
    return bool(config.SLP_VECTORIZE) if SLP_ENV in os.environ else True


def compile_settings():
    """The numba settings that shape a streamrank kernel's machine code, as its compiles use
    them."""
    return ("opt", int(config.OPT), "slp", slp_vectorize(), "loop", bool(config.LOOP_VECTORIZE))


@contextlib.contextmanager
def _compile_scope():
    """numba's compiler lock held and ``config.SLP_VECTORIZE`` as :func:`slp_vectorize` says; put
    back on the way out, however the compile ends."""
    with global_compiler_lock:
        # numba re-reads NUMBA_* variables when one changed: here, not inside the compile
        config.reload_config()
        before = config.SLP_VECTORIZE
        config.SLP_VECTORIZE = int(slp_vectorize())
        try:
            yield
        finally:
            config.SLP_VECTORIZE = before


class KernelCache(caching.FunctionCache):
    """numba's cache of one streamrank kernel (its files, its locator), keyed by the compile
    settings too, loading with numba's runtime alone, and taking the compile lock on a miss."""

    @classmethod
    def of(cls, cache):
        """This class's view of numba's cache object ``cache`` (the same state, none rebuilt)."""
        own = cls.__new__(cls)
        own.__dict__.update(vars(cache))
        return own

    def load_overload(self, sig, target_context):
        cres = self._load(sig, target_context)
        if cres is not None or compile_lock is None or not self._enabled:
            return cres
        self._impl.locator.ensure_cache_path()
        path = self._lock_path()
        compile_lock[0](path)
        cres = self._load(sig, target_context)  # the other process may have just saved it
        if cres is not None:
            compile_lock[1](path)
        return cres

    def save_overload(self, sig, data):
        try:
            return super().save_overload(sig, data)
        finally:
            if compile_lock is not None:
                compile_lock[1](self._lock_path())

    def _index_key(self, sig, codegen):
        return super()._index_key(sig, codegen) + (compile_settings(),)

    def _lock_path(self):
        return self._cache_file._index_path + ".compiling"

    def _load(self, sig, target_context):
        if not _LEAN:
            return super().load_overload(sig, target_context)
        try:
            rtsys.initialize(target_context)  # the runtime's symbols, before the code is linked
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - what this load lacks: numba's own, registries and all
            return super().load_overload(sig, target_context)


def _with_settings(compile):
    def compile_with_settings(sig):
        with _compile_scope():
            return compile(sig)
    compile_with_settings.streamrank_settings = True
    return compile_with_settings


def adopt(namespace):
    """Give each numba kernel defined in the module whose ``globals()`` is ``namespace`` its
    compile settings and, where it caches (``cache=True``), a :class:`KernelCache` over numba's
    files. Each module that defines kernels calls it last; a second call changes nothing."""
    module = namespace["__name__"]
    for obj in list(namespace.values()):
        if not isinstance(obj, Dispatcher) or getattr(obj.py_func, "__module__", None) != module:
            continue
        if not getattr(obj.compile, "streamrank_settings", False):
            obj.compile = _with_settings(obj.compile)
        if type(obj._cache) is caching.FunctionCache:
            obj._cache = KernelCache.of(obj._cache)


def adopted(dispatcher):
    """Whether ``dispatcher`` compiles with streamrank's settings and, if it caches, through a
    :class:`KernelCache` (for tests)."""
    settings = getattr(dispatcher.compile, "streamrank_settings", False)
    return settings and type(dispatcher._cache) in (KernelCache, caching.NullCache)
