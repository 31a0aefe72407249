"""``streamrank info``: what a dataset holds, from the labels, the query index and one scan of
the values.

Every value is scanned (one pass over the rows, :meth:`streamrank.io.dataset.Dataset.non_finite`)
because ``info`` is where a user looks when a file is refused: a file with a NaN or an infinity is
still described in full, with a ``values`` line that counts them and names the first (row,
feature, value) and what to do, and the command still exits 0 (the description is its result;
train, predict, eval and select-features are the commands that refuse the file, exit 2).
``--json`` gives the same under ``non_finite``."""

import os

import numpy as np

from streamrank.units import format_size


def preference_pairs_per_query(y, query_ptr):
    """|P_q| = #{(i, j) in q : y_i > y_j} per query, without forming pairs.

    With n_k documents at label level k in a query, |P_q| = (n^2 - sum_k n_k^2) / 2.
    """
    n_q = len(query_ptr) - 1
    if n_q == 0:
        return np.zeros(0, np.int64)
    q_of_row = np.repeat(np.arange(n_q), np.diff(query_ptr))
    _, level = np.unique(y, return_inverse=True)
    n_levels = int(level.max()) + 1 if level.size else 1
    counts = np.bincount(q_of_row * n_levels + level.ravel(), minlength=n_q * n_levels)
    counts = counts.reshape(n_q, n_levels).astype(np.int64)
    n = counts.sum(axis=1)
    return (n * n - (counts * counts).sum(axis=1)) // 2


def dataset_info(ds):
    """A dict of the facts ``streamrank info`` prints (JSON-ready)."""
    # labels of all rows (4 bytes per row), as stored: a non-finite one is shown, not refused
    y = ds.labels(check=False)
    labels, counts = np.unique(y, return_counts=True)
    sizes = np.diff(ds.query_ptr)
    pairs = preference_pairs_per_query(y, ds.query_ptr)
    return {
        "path": ds.path.shown if getattr(ds, "_remote", None) is not None else str(ds.path),
        "format": f"{ds.attrs['format']} v{int(ds.attrs['version'])}",
        "rows": ds.n_rows,
        "queries": ds.n_queries,
        "features": ds.n_features,
        "labels": {f"{float(v):g}": int(c) for v, c in zip(labels, counts)},
        "docs_per_query": {"min": int(sizes.min()) if sizes.size else 0,
                           "median": float(np.median(sizes)) if sizes.size else 0.0,
                           "max": int(sizes.max()) if sizes.size else 0},
        "queries_without_pairs": int((pairs == 0).sum()),
        "preference_pairs": int(pairs.sum()),
        "file_bytes": ds._remote.size if getattr(ds, "_remote", None) is not None else os.path.getsize(ds.path),
        "compression": str(ds.attrs.get("compression", "")),
        "index_base": ds.index_base,
        "fingerprint": ds.fingerprint,
        "non_finite": ds.non_finite(),
        "source": ds.source,
        "created_by": str(ds.attrs.get("created_by", "")),
    }


def _values_line(nf):
    if nf is None:
        return "  values      not scanned"
    if not nf["count"]:
        return "  values      all finite"
    first = nf["first"]
    where = "the label" if first["feature"] is None else f"feature {first['feature']}"
    return (f"  values      NOT FINITE: {nf['count']:,} value{'s' if nf['count'] != 1 else ''} "
            f"({nf['count_features']:,} of features, {nf['count_labels']:,} of labels); the first: row "
            f"{first['row']}, {where} = {first['value']}. Commands that read these rows refuse the file (exit 2): "
            f"fix or drop the rows where the file was written, or convert the original text again")


def format_info(info):
    lines = [
        f"{info['path']}  ({info['format']}, {info['created_by']})",
        f"  rows        {info['rows']:,}",
        f"  queries     {info['queries']:,}",
        f"  features    {info['features']:,}  (indices {info['index_base']}-based in the text)",
        "  labels      " + ", ".join(f"{k}: {v:,}" for k, v in info["labels"].items()),
        "  docs/query  min {min:,}  median {median:g}  max {max:,}".format(**info["docs_per_query"]),
        f"  pairs       {info['preference_pairs']:,} preference pairs; "
        f"{info['queries_without_pairs']:,} queries without any",
        f"  file        {format_size(info['file_bytes'])} (compression {info['compression']})",
        f"  fingerprint {info['fingerprint']}",
        _values_line(info.get("non_finite")),
    ]
    for s in info["source"]:
        lines.append(f"  source      {s.get('name')}  sha256 {s.get('sha256')}")
    return "\n".join(lines)
