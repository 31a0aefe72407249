"""Reads that skip HDF5's checksum verification, for rows this process has verified already.

HDF5 checks a chunk's Fletcher-32 checksum on every read, at a cost comparable to the read
itself, and streamed training re-reads every block on every pass (docs/design.md, "Measurements
behind the code"). A dataset verifies each block the first time this process reads it; later
reads of the same rows use a transfer property list with error detection off
(``H5Pset_edc_check``, which h5py does not wrap: it is called on h5py's own HDF5 library).
Where that library cannot be found every read verifies, which is slower but never less safe.
"""

import ctypes
import glob
import os
import threading

import h5py

_DXPL = []  # [plist or None], made on first use


def _library():
    here = os.path.dirname(h5py.__file__)
    for pattern in (os.path.join(here, "..", "h5py.libs", "libhdf5-*.so*"),
                    os.path.join(here, ".dylibs", "libhdf5*.dylib")):
        for path in sorted(glob.glob(pattern)):
            if "_hl" not in os.path.basename(path):
                return ctypes.CDLL(path)
    return ctypes.CDLL(None)  # h5py linked against a system libhdf5: its symbols are global


def no_check_dxpl():
    """A dataset transfer property list with error detection off, or None where unavailable."""
    if not _DXPL:
        try:
            fn = _library().H5Pset_edc_check
            fn.argtypes, fn.restype = [ctypes.c_int64, ctypes.c_int], ctypes.c_int
            plist = h5py.h5p.create(h5py.h5p.DATASET_XFER)
            _DXPL.append(plist if fn(plist.id, h5py.h5z.DISABLE_EDC) >= 0 else None)
        except (OSError, AttributeError):
            _DXPL.append(None)
    return _DXPL[0]


def read_rows(dataset, out, start, stop, dxpl):
    """``out[:] = dataset[start:stop]`` (rows of a 1-D or 2-D dataset) through ``dxpl``."""
    space = dataset.id.get_space()
    shape = (stop - start,) + dataset.shape[1:]
    space.select_hyperslab((start,) + (0,) * (len(shape) - 1), shape)
    mem = h5py.h5s.create_simple(shape)
    if not out.flags.c_contiguous or out.shape != shape or out.dtype != dataset.dtype:
        # HDF5 writes the rows into the buffer's memory as they are: it must be exactly their shape
        raise ValueError(f"read_rows needs a C-contiguous {dataset.dtype} buffer of shape {shape}; got "
                         f"{out.dtype} {out.shape}")
    dataset.id.read(mem, space, out, dxpl=dxpl)


class RowReader:
    """``read_rows`` of one dataset with its dataspaces kept between calls (one set a thread: a
    selection is state, and two streams of one file may read from two threads). A first read of
    a block reads it in chunk-sized pieces, and a fresh file space and memory space for each would
    cost about half of a piece's read."""

    def __init__(self, dataset):
        self.dataset = dataset
        self._tail = tuple(dataset.shape[1:])
        self._local = threading.local()

    def read(self, out, start, stop, dxpl=None):
        """``out[:] = dataset[start:stop]``; ``out`` C-contiguous, exactly the rows' shape and dtype."""
        loc = self._local
        if not hasattr(loc, "space"):
            loc.space, loc.mems = self.dataset.id.get_space(), {}
        shape = (stop - start,) + self._tail
        if not out.flags.c_contiguous or out.shape != shape or out.dtype != self.dataset.dtype:
            raise ValueError(f"RowReader.read needs a C-contiguous {self.dataset.dtype} buffer of shape {shape}; "
                             f"got {out.dtype} {out.shape}")
        mem = loc.mems.get(shape)
        if mem is None:
            if len(loc.mems) >= 16:  # pieces have a few sizes: whole chunks, and a block's two ends
                loc.mems.clear()
            mem = loc.mems[shape] = h5py.h5s.create_simple(shape)
        loc.space.select_hyperslab((start,) + (0,) * len(self._tail), shape)
        self.dataset.id.read(mem, loc.space, out, dxpl=dxpl)
