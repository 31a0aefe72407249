"""A software prefetch for the row passes: ``llvm.prefetch`` as a numba intrinsic.

The fused passes read X a query at a time: its rows stream from memory for the scores, then the
pair sweep and the X^T product work in cache while no row is read. The hardware's prefetchers
follow a stream only within a 4 KB page and stop when the reads stop, so every query's rows would
begin cold. Asking for the rows some kilobytes ahead while the current ones are scored keeps the
stream running across pages and across the sweep (``tools/bench_pass.py`` times the passes).

A prefetch is a hint: it changes no value and cannot fault, and the callers keep its addresses
inside the array anyway.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, address):
    """Ask for the cache line holding byte ``address`` (an integer address) for reading, to be
    kept in every cache level (``llvm.prefetch(ptr, rw=0, locality=3, data cache)``)."""
    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        i8p = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic("llvm.prefetch",
                                              fnty=ir.FunctionType(ir.VoidType(), (i8p, i32, i32, i32)))
        builder.call(fn, (builder.inttoptr(args[0], i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)))
        return context.get_dummy_value()
    return types.void(types.intp), codegen
