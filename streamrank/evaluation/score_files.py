"""``streamrank eval``: score files against a dataset's labels (LETOR conventions)."""

import logging
import re
from pathlib import Path

import numpy as np

from streamrank.errors import InputError, NumericError
from streamrank.evaluation.metrics import evaluate
from streamrank.io.budget import resident_bytes
from streamrank.io.data_files import open_data
from streamrank.settings import DEFAULT_MEMORY_BUDGET
from streamrank.units import budget_bytes, format_size

log = logging.getLogger("streamrank.evaluation.score_files")

# the longest line of a score file: %.17g of a float64 (at most 24 characters) and its newline
SCORE_LINE_BYTES = 25


# a score: ASCII decimal with an optional sign, fraction and exponent (no inf, nan, "1_0" or
# non-ASCII digits, which Python's float would take)
_NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def read_scores(path, n_rows):
    """One number per line, in the input's row order; errors name the file and its line (from 1)."""
    from streamrank.io.text_source import open_raw
    s = np.empty(n_rows)
    k, blank = 0, None
    with open_raw(path) as f:
        for line_no, line in enumerate(f, 1):
            text = line.strip()
            if not text:  # blank lines may end the file, nowhere else
                blank = blank or line_no
                continue
            if blank is not None:
                raise InputError(f"{path}:{blank}: a blank line among the scores; give one number per line")
            k = line_no
            if not _NUMBER.fullmatch(text):
                raise InputError(f"{path}:{k}: expected one number, got {text[:60].decode('utf-8', 'replace')!r}")
            v = float(text)
            if not np.isfinite(v):
                raise InputError(f"{path}:{k}: the score {text[:60].decode()} is beyond float64's range")
            if k > n_rows:
                break
            s[k - 1] = v
    if k != n_rows:
        raise InputError(f"{path}: {'more than ' + str(n_rows) if k > n_rows else k} scores but the data has "
                         f"{n_rows} rows; give one score per row, in the order of the input text")
    return s


def write_scores(path, scores, data_name, *, stdout=None):
    """Write ``scores`` (input row order) to ``path``, one per line in ``%.17g`` (every float64
    digit), whole or not at all (``io.atomic.written``); ``-``: to ``stdout`` (default
    ``sys.stdout``). A score that is not finite is refused before anything is written
    (:class:`~streamrank.errors.NumericError` naming ``data_name``'s row): no score file holds
    one. Every score file streamrank writes is written here."""
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        i = int(bad[0])
        raise NumericError(f"{data_name}: data row {i + 1} scores {float(scores[i])!r} "
                           f"({bad.size:,} of {scores.size:,} rows are not finite); no scores were written. "
                           f"Its feature values lie beyond what the "
                           f"model can score (a kernel value past float32's range): check that row, or train on rows "
                           f"that span the values to be scored (normalize=zscore)")
    if str(path) == "-":
        import sys
        out = stdout or sys.stdout
        np.savetxt(out, scores, fmt="%.17g")
        out.flush()
        return
    from streamrank.faultpoints import faultpoint
    from streamrank.io.atomic import ensure_space, temp_name, written
    from streamrank.io.urls import is_url
    if is_url(path):
        ensure_space(path, SCORE_LINE_BYTES * scores.size)
    elif not Path(path).exists() or Path(path).is_file():
        ensure_space(temp_name(path), SCORE_LINE_BYTES * scores.size, shown=path)
    with written(path, special_ok=True) as tmp:
        np.savetxt(tmp, scores, fmt="%.17g")  # round-trips every float64
        faultpoint("scores-write")


# per row evaluated: its label (float32 read, float64 used), its score and the score in query order
# (float64), its input position (int64) and the pair counts' part (metrics.PAIRWISE_PART_ROWS)
EVAL_BYTES_PER_ROW = 4 + 8 + 8 + 8 + 8 + 12


def evaluate_file(data, scores_path, *, convention="letor4", cache_dir=None, query_file=None,
                  memory_budget=DEFAULT_MEMORY_BUDGET):
    """Evaluate a score file (input row order) against DATA; returns a metrics Report. Every row's
    label and score are held (``EVAL_BYTES_PER_ROW``); a log line says when that passes
    ``memory_budget``."""
    with open_data(data, cache_dir, query_file=query_file, memory_budget=memory_budget) as ds:
        budget, need = budget_bytes(memory_budget), EVAL_BYTES_PER_ROW * ds.n_rows
        if resident_bytes(kernels=False) + need > budget:
            log.warning("eval holds %s for the labels and scores of %d rows, beyond memory budget %s",
                        format_size(need), ds.n_rows, format_size(budget))
        y = np.empty(ds.n_rows, np.float32)
        ds.y.read_direct(y)
        row = ds.row
        qid = ds.query_ids
        ptr = ds.query_ptr
    s = read_scores(scores_path, len(y))
    # the dataset groups rows by query; row[i] is row i's line position in the input text
    return evaluate(y, s[row], ptr, convention=convention, qid=qid)
