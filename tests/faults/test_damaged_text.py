"""Damaged compressed text: a clear error naming the file, and no dataset left behind."""

import bz2
import gzip

import numpy as np
import pytest

from streamrank.cli import main
from streamrank.errors import InputError
from streamrank.io.convert import convert


def letor_text(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    return "".join(f"{rng.integers(3)} qid:{i // 25} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(rng.random(12)))
                   + "\n" for i in range(n)).encode()


@pytest.mark.parametrize("pack", [gzip.compress, bz2.compress], ids=["gzip", "bzip2"])
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_compressed_input_is_refused(tmp_path, capsys, pack, damage):
    data = bytearray(pack(letor_text()))
    if damage == "truncate":
        data = data[:len(data) * 2 // 3]
    else:
        for k in range(len(data) // 3, len(data) // 3 + 64):
            data[k] ^= 0x5A
    src = tmp_path / "in.txt.gz"
    src.write_bytes(bytes(data))
    out = tmp_path / "d.h5"
    with pytest.raises(InputError, match=r"in.txt.gz: "):
        convert([src], out, quiet=True)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["in.txt.gz"]
    assert main(["convert", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "in.txt.gz" in err and "Traceback" not in err


def test_a_huge_feature_index_is_refused_before_allocating(tmp_path):
    """One line with index 99,999,999 once made a 400 MB-a-row matrix (44 s, 955 MB) before it was refused."""
    import resource
    src = tmp_path / "wide.txt"
    src.write_text("1 qid:1 1:0.5 2:0.25\n0 qid:1 1:0.1 99999999:1\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InputError, match=r"wide.txt:2: feature index 99999999 makes 99,999,999 features"):
        convert([src], tmp_path / "d.h5", quiet=True)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KB: no 400 MB row was made
