"""Feature maps read back from model files: every map kind, by the ``kind`` its group records.

The maps themselves (:mod:`~streamrank.features.maps`, :mod:`~streamrank.features.exact_map`,
:mod:`~streamrank.features.basis_map`) know nothing of each other; this registry sits above them
and names them all, so no map module imports another's subclass back.
"""

from streamrank.features.basis_map import KernelBasisMap
from streamrank.features.exact_map import ExactKernelMap
from streamrank.features.maps import IdentityMap, Nystroem, RandomFourier, _attr_str, _format_error

# kind attribute -> map class: identity (the linear model), Nystroem and random Fourier features
# (paper 000), the exact kernel's support rows (paper 004), CLSRRank's basis rows (paper 002)
MAP_CLASSES = {c.kind: c for c in (IdentityMap, Nystroem, RandomFourier, ExactKernelMap, KernelBasisMap)}


def load_map(group):
    """The feature map saved in an HDF5 group by ``to_h5`` (dispatch on its ``kind`` attr)."""
    kind = _attr_str(group.attrs.get("kind"))
    if kind not in MAP_CLASSES:
        raise _format_error(group, f"unknown feature map kind {kind!r} (this streamrank knows "
                                   f"{', '.join(MAP_CLASSES)}); upgrade streamrank")
    if kind == "identity" and "params" not in group.attrs:
        # model files written before feature maps existed carry only kind="identity"
        return IdentityMap()
    return MAP_CLASSES[kind].from_h5(group)
