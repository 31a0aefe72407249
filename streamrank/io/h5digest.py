"""sha256 over everything a small HDF5 file holds: every group's and dataset's attributes and every
dataset's dtype, shape and bytes, in name order. Model files carry it (``content_sha256``), so a
flipped bit anywhere in them is found when they load; ``declared_bytes`` lets a reader refuse a
file whose datasets claim more bytes than the file has before it reads any of them."""

import hashlib

import h5py
import numpy as np

DIGEST_ATTR = "content_sha256"


def _canonical(value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    a = np.asarray(value)
    if a.dtype.kind == "O":
        return repr(a.tolist()).encode()
    return str(a.dtype).encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes()


def _objects(f):
    out = [("/", f)]
    f.visititems(lambda name, obj: out.append(("/" + name, obj)))
    return sorted(out, key=lambda t: t[0])


def file_digest(f):
    """The digest of an open h5py File (its own ``content_sha256`` attribute left out)."""
    h = hashlib.sha256()
    for name, obj in _objects(f):
        h.update(name.encode() + b"\0" + (b"D" if isinstance(obj, h5py.Dataset) else b"G"))
        for key in sorted(obj.attrs):
            if name == "/" and key == DIGEST_ATTR:
                continue
            h.update(key.encode() + b"=" + _canonical(obj.attrs[key]) + b"\0")
        if isinstance(obj, h5py.Dataset):
            h.update(_canonical(obj[()]))
    return h.hexdigest()


def declared_bytes(f):
    """Bytes the datasets of an open file declare (elements x item size), before reading any."""
    total = 0
    for _, obj in _objects(f):
        if isinstance(obj, h5py.Dataset):
            total += int(np.prod(obj.shape, dtype=np.float64)) * obj.dtype.itemsize
    return total
