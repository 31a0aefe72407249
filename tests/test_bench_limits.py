"""tools/bench_limits.py (issue 34): the limits it returns are positive numbers, and the table it
prints is the one it records."""
import json
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

import bench_limits  # noqa: E402

KEYS = {"bandwidth_gbs", "stream_gbs", "disk_mbs", "page_cache_mbs", "gemm_float64_gflops", "gemm_float32_gflops"}


def test_tiny_run_returns_positive_limits_and_records_its_table(tmp_path, capsys):
    lim = bench_limits.measure_limits(quick=True, workdir=tmp_path / "work", results_dir=tmp_path, repeats=1,
                                      rows=2_000, disk_bytes=1 << 20, gemm_n=64)
    out = capsys.readouterr().out
    assert KEYS <= set(lim)
    for k in KEYS:
        assert isinstance(lim[k], float) and lim[k] > 0, (k, lim[k])
    assert list((tmp_path / "work").iterdir()) == []  # the disk test's file is removed
    assert out.startswith("machine: ")  # the machine facts first
    recs = [json.loads(line) for line in (tmp_path / "limits.jsonl").read_text().splitlines()]
    assert len(recs) == 1
    rec = recs[0]
    assert rec["bench"] == "limits" and rec["section"] == "limits"
    assert rec["rows"] == json.loads(json.dumps(lim["rows"]))
    assert {r["limit"] for r in rec["rows"]} == {"memory bandwidth", "memory streaming", "disk streaming",
                                                 "page-cache read", "dense GEMM float64", "dense GEMM float32"}
    assert {r["threads"] for r in rec["rows"] if r["limit"] == "memory bandwidth"} == {1, 2}
    assert rec["params"]["limits"] == {k: lim[k] for k in KEYS}
    for r in rec["rows"]:
        assert r["rate"] > 0 and r["best_s"] <= r["median_s"] and r["best_s"] in r["runs_s"]
        assert r["how"] in out  # every recorded row was printed


def test_summary_takes_the_best_of_each_limit():
    rows = [{"limit": "memory bandwidth", "how": "float32 X @ v (sgemv)", "rate": 20.0},
            {"limit": "memory bandwidth", "how": "float32 X @ v (sgemv)", "rate": 25.0},
            {"limit": "memory bandwidth", "how": "float64 X @ v (dgemv)", "rate": 99.0},  # not the f32 product
            {"limit": "memory streaming", "how": "np.sum(X) (float32)", "rate": 18.0},
            {"limit": "disk streaming", "how": "read()", "rate": 800.0},
            {"limit": "dense GEMM float64", "how": "A @ B", "rate": 50.0}]
    lim = bench_limits.summarize(rows)
    assert lim["bandwidth_gbs"] == 25.0 and lim["stream_gbs"] == 18.0 and lim["disk_mbs"] == 800.0
    assert lim["gemm_float64_gflops"] == 50.0 and lim["gemm_float32_gflops"] is None
    assert bench_limits.read_seconds(25e9, lim) == 1.0
