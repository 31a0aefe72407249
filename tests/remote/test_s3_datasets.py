"""Datasets read from a bucket: the same rows as the local file, their chunks fetched together."""

import numpy as np

from streamrank.io.convert import convert
from streamrank.io.dataset import open_dataset
from streamrank.synthetic import write_text


def _local(tmp_path, scale=0.3, **kw):
    write_text(tmp_path / "t.txt", preset="small", seed=0, scale=scale)
    convert([tmp_path / "t.txt"], tmp_path / "t.h5", quiet=True, **kw)
    return tmp_path / "t.h5"


def test_a_dataset_in_a_bucket_reads_the_rows_of_the_local_file(tmp_path, s3):
    fs, bucket = s3
    local = _local(tmp_path, chunk_bytes=4096)
    fs.put_file(str(local), f"{bucket}/t.h5")
    url = f"s3://{bucket}/t.h5"
    with open_dataset(local) as a, open_dataset(url) as b:
        assert (b.n_rows, b.n_features, b.fingerprint) == (a.n_rows, a.n_features, a.fingerprint)
        assert np.array_equal(a.query_ptr, b.query_ptr) and np.array_equal(a.row, b.row)
        for start, stop in [(0, a.n_rows), (5, 77), (a.n_rows - 3, a.n_rows)]:
            Xa, ya = a.read(start, stop)
            Xb, yb = b.read(start, stop)
            assert np.array_equal(Xa, Xb) and np.array_equal(ya, yb)
        assert b.name == url and str(b.path) == url
        fetched = b._remote.fetched
    size = local.stat().st_size
    assert fetched <= 3 * size  # the whole file read three times at most (three overlapping reads)


def test_an_http_server_without_range_support_is_refused_in_one_line(tmp_path, capsys):
    """python's http.server ignores Range and sends the whole file: refused, naming the URL."""
    import functools
    import http.server
    import threading

    from streamrank.cli import main
    local = _local(tmp_path)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    handler = functools.partial(Quiet, directory=str(tmp_path))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        code = main(["train", f"http://127.0.0.1:{srv.server_address[1]}/{local.name}", "-o",
                     str(tmp_path / "m.h5"), "--quiet"])
    finally:
        srv.shutdown()
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "the server ignores byte ranges (HTTP Range)" in err, err


def test_every_plan_counts_the_known_parts_cache_of_a_dataset_in_a_store(tmp_path, s3):
    """The known-parts cache holds one more copy of a block (io.budget.remote_copies): the raw
    blocks of the exact path and of the statistics passes, CLSRRank's and GAS's plans all leave
    room for it, so a budget holds for data in a bucket as for a local file."""
    from streamrank.features.basis_map import clsr_plan
    from streamrank.io.budget import BUFFERS, remote_copies
    from streamrank.selection.gas import GAS_BYTES_PER_BLOCK_BYTE, gas_plan
    from streamrank.training.memory_plan import raw_block_bytes
    fs, bucket = s3
    local = _local(tmp_path)
    fs.put_file(str(local), f"{bucket}/t.h5")
    budget = 1 << 30
    with open_dataset(local) as a, open_dataset(f"s3://{bucket}/t.h5") as b:
        assert (remote_copies(a), remote_copies(b)) == (0, 1)
        # the stream's buffers and the cache take what the buffers take locally
        assert (BUFFERS + 1) * raw_block_bytes(budget, b) <= BUFFERS * raw_block_bytes(budget, a)
        assert raw_block_bytes(budget, b) >= 0.99 * raw_block_bytes(budget, a) * BUFFERS / (BUFFERS + 1)
        resident = 200 << 20
        _, block_a = gas_plan(a, 300 << 20, resident)
        _, block_b = gas_plan(b, 300 << 20, resident)
        assert block_b * (GAS_BYTES_PER_BLOCK_BYTE + 1) <= block_a * GAS_BYTES_PER_BLOCK_BYTE * 1.0001
    kw = {"m": 500, "d": 20, "n_train": 10_000, "largest_query": 100}
    assert clsr_plan(300 << 20, 200 << 20, store_copies=1, **kw) < clsr_plan(300 << 20, 200 << 20, **kw)
