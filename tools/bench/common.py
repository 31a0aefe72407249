"""The peers bench's settings and where things are: constants, the peers' programs, MQ2008's files,
and the solver log's trace."""
import gzip
import os
import shutil
from pathlib import Path

from _benchutil import REPO

DEFAULT_DATA = REPO.parent / "shared" / "data" / "MQ2008"
PEERS = REPO.parent / "peers"
DEFAULT_PEERS = {"liblinear": PEERS / "liblinear-ranksvm" / "train",
                 "libsvm_ranksvm": PEERS / "libsvm-ranksvm" / "svm-train",
                 "svmrank": PEERS / "svm_rank" / "svm_rank_learn"}
PEER_NAMES = {"liblinear": "LIBLINEAR ranksvm", "libsvm_ranksvm": "libsvm-ranksvm", "svmrank": "SVMrank"}
SECTIONS = ("startup", "firstuse", "linear", "exact", "big", "convert", "nystroem", "gbdt", "scaling", "export")
DEFAULT_ONLY = ("startup", "firstuse", "linear", "exact")  # the others on request: --only big,convert,...
BIG_PRESET, BIG_D = "mslr30k", 136  # streamrank.synthetic's MSLR-WEB30K-like preset
BIG_SCALE = 0.4405  # 1,000,065 rows, 8,334 queries, ~1.7 GB of text
NYS_M = 2000  # Nystroem landmarks
C, EPS, GAMMA = 1.0, 1e-3, 2.0 ** -5
N_FEATURES = 46


def peer_path(given, key):
    """(path or None, reason when None)."""
    p = Path(given) if given else DEFAULT_PEERS[key]
    if not given and not p.exists():
        return None, f"not available ({p} not found; pass --{key.replace('_', '-')} PATH)"
    if not p.is_file() or not os.access(p, os.X_OK):
        return None, f"not available ({p} is not an executable file)"
    return p, None


def peer_version(path):
    v = path.parent / "VERSION"
    try:
        return [ln.strip() for ln in v.read_text(errors="replace").splitlines()[:2]]
    except OSError:
        return [f"(no VERSION file beside {path})"]


def find_text(fold, stem):
    for name in (f"{stem}.txt", f"{stem}.txt.gz"):
        if (fold / name).is_file():
            return fold / name
    return None


def plain_copy(src, dst):
    """``src`` (text or .gz) written uncompressed to ``dst``, for the peers (and streamrank's text row)."""
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rb") as fi, open(dst, "wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
    return dst


def solver_trace(err_path):
    """(f, seconds since the solve began) of every solver iteration line in a log."""
    import re
    out = []
    try:
        for ln in Path(err_path).read_text(errors="replace").splitlines():
            m = re.search(r"iter\s+\d+ f ([-+0-9.eE]+) .* ([0-9.]+)s$", ln)
            if m:
                out.append((float(m[1]), float(m[2])))
    except OSError:
        pass
    return out


def first_time_at(trace, target, setup):
    """Process seconds when the trace's objective first was at most ``target`` (the log's
    seconds are since the solve began: ``setup`` is added); None if never."""
    for f, t in trace:
        if f <= target:
            return setup + t
    return None
