"""Benchmarks kept as data (issue 33): a section's results appended as one JSON line
(tools/_benchutil.record), and the page and its plots drawn from them (tools/render_benchmarks.py):
the newest run per machine, every number from the data, the same bytes from the same data."""

import json
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

import _benchutil as bu  # noqa: E402
import render_benchmarks as rb  # noqa: E402

COLUMNS = [("tool", "tool", None), ("rows", "rows", "{:,.0f}"), ("seconds", "seconds", "{:.2f}")]
PLOT = {"file": "bench-scaling.svg", "title": "time against rows", "x": "rows", "y": "seconds", "series": "tool",
        "logx": True, "logy": True}


def rows(scale):
    return [{"tool": t, "rows": n, "seconds": scale * k * n / 1e5}
            for t, k in (("streamrank", 1.0), ("peer", 3.0)) for n in (10_000, 100_000)]


def test_a_record_is_one_json_line_with_the_machine(tmp_path):
    rec = bu.record("peers", "scaling", rows(1.0) + [{"tool": "x", "rows": 1, "seconds": float("nan")}], COLUMNS,
                    notes=["n"], plot=PLOT, params={"C": 1}, results_dir=tmp_path)
    lines = (tmp_path / "peers.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == rec
    assert rec["rows"][-1]["seconds"] is None  # JSON has no NaN
    assert {"cpu", "cores", "commit", "date", "numpy"} <= set(rec["machine"])
    bu.record("peers", "scaling", rows(2.0), COLUMNS, results_dir=tmp_path)
    assert len((tmp_path / "peers.jsonl").read_text().splitlines()) == 2  # appended, never rewritten


def test_the_page_shows_the_newest_run_per_machine_and_its_plot(tmp_path):
    bu.record("peers", "scaling", rows(1.0), COLUMNS, plot=PLOT, results_dir=tmp_path)
    newer = bu.record("peers", "scaling", rows(2.0), COLUMNS, plot=PLOT, results_dir=tmp_path)
    other = dict(newer, machine=dict(newer["machine"], cpu="Other CPU", date="2000-01-01T00:00:00Z"),
                 rows=rows(5.0))
    with open(tmp_path / "peers.jsonl", "a") as f:
        f.write(json.dumps(other) + "\n")
    page, images = rb.render(tmp_path, tmp_path / "img")
    assert "| streamrank | 100,000 | 2.00 |" in page  # the newer run of this machine
    assert "| streamrank | 100,000 | 1.00 |" not in page
    assert "| streamrank | 100,000 | 5.00 |" in page and "**Other CPU," in page  # the other machine's own newest
    assert "](results/peers.jsonl) (3 runs)" in page and "![time against rows](img/bench-scaling.svg)" in page
    svg = images[tmp_path / "img" / "bench-scaling.svg"]
    assert svg.startswith("<?xml") and "streamrank" in svg
    assert rb.render(tmp_path, tmp_path / "img") == (page, images)  # the same data, the same bytes


def test_check_reports_a_stale_page(tmp_path):
    bu.record("peers", "scaling", rows(1.0), COLUMNS, plot=PLOT, results_dir=tmp_path)
    args = ["--results", str(tmp_path), "--page", str(tmp_path / "b.md"), "--img", str(tmp_path / "img")]
    assert rb.main(args + ["--check"]) == 1
    assert rb.main(args) == 0
    assert rb.main(args + ["--check"]) == 0
    bu.record("peers", "scaling", rows(3.0), COLUMNS, plot=PLOT, results_dir=tmp_path)
    assert rb.main(args + ["--check"]) == 1


def test_the_committed_page_is_what_the_results_give():
    """docs/benchmarks.md is redrawn whenever a result is added: the page (its text; the plots'
    bytes depend on the matplotlib version) equals what the committed results data give."""
    page, _ = rb.render(rb.RESULTS, rb.IMG)
    assert rb.PAGE.read_text(encoding="utf-8") == page, "run python tools/render_benchmarks.py"
