"""Data in a bucket and in Parquet (issue 45's benchmark), against the limits measured in the same run.

    python tools/bench_remote.py                       # 1M generated rows (mslr30k's 136 features)
    python tools/bench_remote.py --rows 100000 --rounds 1   # a quick look
    python tools/bench_remote.py --server s3rver --s3rver DIR/node_modules/.bin/s3rver   # another server

An S3-compatible server (moto's, in a process of its own, on 127.0.0.1; or s3rver, ``--server
s3rver``: moto reads the whole object for every range it serves, a cost per request that grows
with the object and that a store serving ranges from files does not have) holds the generated
dataset. Sections, each recorded in docs/results/remote.jsonl:

- **store limit**: the server's own GET rate for the whole object (one request, as s3fs gives it),
  the bar a block read is held to (at least half of it);
- **block reads**: every block of one streamed pass read from the bucket (``Dataset.read``, its
  chunks fetched together) and from the local file: MB/s, requests and bytes fetched;
- **training**: ``RankSVM`` (primal, C=1) fitted on the URL and on the local file, in one run,
  at a budget that keeps the rows in memory (raw and z-scored, which reads the rows twice) and at
  one that does not: seconds, passes, seconds a pass, requests and bytes fetched in all and per
  pass, and bytes fetched over the file's size;
- **parquet**: the same rows as one Parquet file (row groups of 65,536 rows) converted by
  ``streamrank convert`` against pyarrow's own ``read_table`` of the file (the limit).
"""

import argparse
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import args_params, machine_facts, run_child, table_record  # noqa: E402


class Counting:
    """Counts what every RemoteFile asks the store for (requests, bytes), whoever opened it."""

    def __init__(self):
        from streamrank.io import remote_file
        self.requests = self.bytes = 0
        orig = remote_file.RemoteFile._fetch
        me = self

        def fetch(self, starts, ends):
            out = orig(self, starts, ends)
            me.requests += len(starts)
            me.bytes += sum(b - a for a, b in zip(starts, ends))
            return out
        remote_file.RemoteFile._fetch = fetch

    def take(self):
        r, b = self.requests, self.bytes
        self.requests = self.bytes = 0
        return r, b


def server(kind="moto", s3rver=None, work=None):
    """An S3-compatible server in a process of its own (its objects are not this process's
    memory), and the environment that points s3fs at it: moto's (the tests' server: it reads the
    whole object for every range it serves), or s3rver (``--server s3rver``: Node.js, objects in
    files, ranges read from them; ``npm install s3rver`` outside the repository, its
    ``node_modules/.bin/s3rver`` given as ``--s3rver``)."""
    import subprocess
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if kind == "s3rver":
        store = Path(work) / "s3rver-data"
        store.mkdir(parents=True, exist_ok=True)
        cmd = [str(s3rver), "-d", str(store), "-a", "127.0.0.1", "-p", str(port), "--silent",
               "--allow-mismatched-signatures", "--configure-bucket", "bench"]
    else:
        from moto.server import ThreadedMotoServer  # noqa: F401  (the server's dependencies are there)
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    key = "S3RVER" if kind == "s3rver" else "bench"  # s3rver knows its own key only
    os.environ.update({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": key,
                       "AWS_SECRET_ACCESS_KEY": key, "AWS_DEFAULT_REGION": "us-east-1"})
    import s3fs
    fs = s3fs.S3FileSystem()
    if kind == "moto":
        fs.mkdir("bench")
    return srv, fs


def store_limit(fs, key, size, rounds):
    best = None
    for _ in range(rounds):
        t = time.perf_counter()
        data = fs.cat_file(key)
        dt = time.perf_counter() - t
        assert len(data) == size
        best = dt if best is None else min(best, dt)
    return {"what": "GET of the whole object (one request)", "MB": size / 1e6, "seconds": best,
            "MB_per_s": size / 1e6 / best}


def block_reads(path, counter, label, budget):
    from streamrank.io.dataset import open_dataset
    counter.take()
    t = time.perf_counter()
    n = 0
    with open_dataset(path) as ds:
        for block, start, stop in ds.stream(memory_budget=budget):
            n += block.X.nbytes + block.y.nbytes
        size = ds._remote.size if ds._remote is not None else os.path.getsize(path)
    dt = time.perf_counter() - t
    req, got = counter.take()
    return {"source": label, "MB_rows": n / 1e6, "seconds": dt, "MB_per_s": n / 1e6 / dt, "requests": req,
            "fetched_MB": got / 1e6, "fetched_over_file": got / size if size else 0.0}


def training(path, counter, label, budget, size, normalize="none"):
    import streamrank
    counter.take()
    t = time.perf_counter()
    m = streamrank.RankSVM(C=1.0, memory_budget=budget, normalize=normalize).fit(path)
    dt = time.perf_counter() - t
    req, got = counter.take()
    passes = int(m.training_.get("passes") or 0)
    return {"source": label, "budget": budget, "normalize": normalize, "seconds": dt, "passes": passes,
            "s_per_pass": dt / max(passes, 1), "requests": req, "requests_per_pass": req / max(passes, 1),
            "fetched_MB": got / 1e6, "fetched_MB_per_pass": got / 1e6 / max(passes, 1),
            "fetched_over_file": got / size}, m.coef_


def parquet(path, work, rounds):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamrank.io.dataset import open_dataset
    pq_path = work / "rows.parquet"
    if not pq_path.exists():
        with open_dataset(path) as ds:
            X, y = ds.read(0, ds.n_rows)
            cols = {"label": y.astype(np.float64), "qid": ds.row_query_ids(0, ds.n_rows)}
        cols.update({f"f{j + 1}": X[:, j] for j in range(X.shape[1])})
        pq.write_table(pa.table(cols), pq_path, row_group_size=65536)
        del X, y, cols
    size = pq_path.stat().st_size
    rows = []
    for _ in range(rounds):
        t = time.perf_counter()
        tab = pq.read_table(pq_path)
        t_read = time.perf_counter() - t
        n, mb = tab.num_rows, tab.nbytes / 1e6
        del tab
        out = work / "from_parquet.h5"
        # a fresh process, as the command runs: this one holds the benchmark's own arrays
        got = run_child(f"import json, time\nfrom streamrank.io.convert import convert\nt = time.perf_counter()\n"
                        f"convert([{str(pq_path)!r}], {str(out)!r}, quiet=True)\n"
                        f"print(json.dumps({{'s': time.perf_counter() - t}}))")
        t_conv = got["s"]
        out.unlink()
        rows.append({"rows": n, "file_MB": size / 1e6, "table_MB": mb, "read_table_s": t_read,
                     "convert_peak_rss_mb": got["peak_rss_mb"],
                     "convert_s": t_conv, "read_table_rows_per_s": n / t_read, "convert_rows_per_s": n / t_conv,
                     "convert_over_read_table": t_read / t_conv})
    return min(rows, key=lambda r: r["convert_s"])


PARQUET_COLUMNS = [("rows", "rows", "{:,d}"), ("file_MB", "Parquet MB", "{:.1f}"),
                   ("read_table_s", "read_table s", "{:.2f}"), ("convert_s", "convert s", "{:.2f}"),
                   ("read_table_rows_per_s", "read_table rows/s", "{:,.0f}"),
                   ("convert_rows_per_s", "convert rows/s", "{:,.0f}"),
                   ("convert_over_read_table", "convert / read_table", "{:.2f}"),
                   ("convert_peak_rss_mb", "convert peak RSS MB", "{:.0f}")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the generated set (mslr30k's preset)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each timing (the best is kept)")
    ap.add_argument("--workdir", default="/work/scratch/bench_remote", help="where the generated files stay")
    ap.add_argument("--keep-budget", default="2GB", help="a budget that keeps the rows in memory")
    ap.add_argument("--stream-budget", default="800MB", help="a budget that does not")
    ap.add_argument("--only", choices=["parquet", "blocks"], default=None,
                    help="the Parquet section alone, or the store limit and block reads alone")
    ap.add_argument("--server", choices=["moto", "s3rver"], default="moto",
                    help="the S3-compatible server (moto: the tests'; s3rver: serves ranges from files)")
    ap.add_argument("--s3rver", help="the s3rver executable (node_modules/.bin/s3rver of `npm install s3rver`)")
    args = ap.parse_args()
    print(machine_facts(), flush=True)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    from streamrank.synthetic import PRESETS, write_hdf5
    p = PRESETS["mslr30k"]
    scale = args.rows / p.n_rows
    local = work / f"mslr_{args.rows}.h5"
    if not local.exists():
        write_hdf5(local, "mslr30k", scale=scale, seed=0)
    size = local.stat().st_size
    if args.only == "parquet":
        table_record("remote", "parquet", [parquet(local, work, args.rounds)], PARQUET_COLUMNS,
                     params=args_params(args))
        return
    if args.server == "s3rver" and not args.s3rver:
        ap.error("--server s3rver needs --s3rver PATH (npm install s3rver; PATH is its node_modules/.bin/s3rver)")
    srv, fs = server(args.server, args.s3rver, work)
    suffix = "" if args.server == "moto" else f" ({args.server})"  # each server's figures under their own heading
    try:
        fs.put_file(str(local), "bench/train.h5")
        url = "s3://bench/train.h5"
        counter = Counting()
        params = args_params(args)
        table_record("remote", "store limit" + suffix, [store_limit(fs, "bench/train.h5", size, args.rounds)],
                     [("what", "measure", None), ("MB", "MB", "{:.1f}"), ("seconds", "s", "{:.2f}"),
                      ("MB_per_s", "MB/s", "{:.0f}")], params=params)
        reads = []
        for _ in range(args.rounds):
            reads += [block_reads(local, counter, "local file", args.stream_budget),
                      block_reads(url, counter, "bucket", args.stream_budget)]
        best = {}
        for r in reads:
            if r["source"] not in best or r["seconds"] < best[r["source"]]["seconds"]:
                best[r["source"]] = r
        table_record("remote", "block reads" + suffix, list(best.values()),
                     [("source", "source", None), ("MB_rows", "MB of rows", "{:.1f}"), ("seconds", "s", "{:.2f}"),
                      ("MB_per_s", "MB/s", "{:.0f}"), ("requests", "requests", "{:d}"), ("fetched_MB", "MB fetched", "{:.1f}"),
                      ("fetched_over_file", "fetched / file", "{:.3f}")], params=params)
        if args.only == "blocks":
            return
        rows = []
        for budget, normalize in ((args.keep_budget, "none"), (args.keep_budget, "zscore"),
                                  (args.stream_budget, "none")):
            a, wa = training(str(local), counter, "local file", budget, size, normalize)
            b, wb = training(url, counter, "bucket", budget, size, normalize)
            import numpy as np
            b["same_bits"] = a["same_bits"] = bool(np.array_equal(wa, wb))
            rows += [a, b]
        table_record("remote", "training", rows,
                     [("source", "source", None), ("budget", "budget", None), ("normalize", "normalize", None),
                      ("seconds", "s", "{:.2f}"),
                      ("passes", "passes", "{:d}"), ("s_per_pass", "s/pass", "{:.3f}"), ("requests", "requests", "{:d}"),
                      ("requests_per_pass", "req/pass", "{:.1f}"), ("fetched_MB", "MB fetched", "{:.1f}"),
                      ("fetched_MB_per_pass", "MB/pass", "{:.1f}"), ("fetched_over_file", "fetched / file", "{:.3f}"),
                      ("same_bits", "same model", None)], params=params)
        table_record("remote", "parquet", [parquet(local, work, args.rounds)], PARQUET_COLUMNS, params=params)
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
