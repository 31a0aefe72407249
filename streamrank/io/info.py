"""``streamrank info``: what a dataset holds, computed from the labels and the query index only."""

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
    # labels of all rows: 4 bytes per row, read in slices of the y column only
    y = np.empty(ds.n_rows, np.float32)
    step = 1 << 22
    for a in range(0, ds.n_rows, step):
        ds.y.read_direct(y[a:min(a + step, ds.n_rows)], np.s_[a:min(a + step, ds.n_rows)])
    labels, counts = np.unique(y, return_counts=True)
    sizes = np.diff(ds.query_ptr)
    pairs = preference_pairs_per_query(y, ds.query_ptr)
    return {
        "path": str(ds.path),
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
        "file_bytes": os.path.getsize(ds.path),
        "compression": str(ds.attrs.get("compression", "")),
        "index_base": ds.index_base,
        "fingerprint": ds.fingerprint,
        "source": ds.source,
        "created_by": str(ds.attrs.get("created_by", "")),
    }


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
    ]
    for s in info["source"]:
        lines.append(f"  source      {s.get('name')}  sha256 {s.get('sha256')}")
    return "\n".join(lines)
