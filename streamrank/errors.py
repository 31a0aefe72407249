"""Exceptions that carry a message meant for the person who ran the command."""


class StreamrankError(Exception):
    """Base class: the CLI prints the message (no traceback) and exits non-zero."""


class InputError(StreamrankError, ValueError):
    """Bad input text: the message names the file, the line, the offending text and what is wrong."""


class FormatError(StreamrankError, ValueError):
    """A file that is not a streamrank file of a version this package can read."""


class ParameterError(StreamrankError, ValueError):
    """A parameter out of range: the message names the parameter, the value and the fix."""


class CheckpointMismatch(StreamrankError):
    """A saved state that does not continue here: a checkpoint from other data or other settings, or
    a solver state whose objective evaluates differently in this numeric environment."""


class StorageError(StreamrankError, OSError):
    """The system refused a write (disk full, read-only file system, quota, permissions): the
    message names the file and the cause; nothing half-written was left under the file's name."""


class StoreError(StreamrankError, OSError):
    """An object store did not give or take bytes (unreachable, stalled past its deadline,
    refused): the message names the URL and the store's error. Not bad input: what was stored or
    committed before is intact, and a run with a checkpoint continues from it with resume=True
    once the store answers."""


class NumericError(StreamrankError, ArithmeticError):
    """A value that is not finite where a solver needs one (f, g or a Hessian product), or a
    parameter whose scale overflows float64 on this data: the message names the cause (the data's
    file, row and feature, or the parameters and the largest value that works)."""


class KernelRangeError(NumericError):
    """A kernel's or feature map's values past the float range they are kept in (float32 mapped
    rows, float32 Q) on these data: the message names the row or value, the kernel's settings and
    the fix (a smaller gamma, coef0 or degree, or z-scored features); C plays no part in it."""
