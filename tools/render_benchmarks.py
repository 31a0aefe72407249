"""Draw docs/benchmarks.md and its plots from the results data (issue 33).

    python tools/render_benchmarks.py            # docs/benchmarks.md and docs/img/bench-*.svg
    python tools/render_benchmarks.py --check    # exit 1 if the page is not what the data give

Every benchmark appends its sections to docs/results/<bench>.jsonl (tools/_benchutil.py,
``record``): one JSON object per run of a section, with the machine, commit, date, command,
settings, columns and rows. This script shows, for each benchmark and section, the newest run on
each machine (CPU model and cores), and links the history (every earlier run stays in the file).
A section that carries a ``plot`` spec is drawn (matplotlib, SVG) from its newest run per machine:
one line per value of the spec's ``series`` key. Nothing on the page is typed by hand: the text
of each benchmark's heading comes from ``BENCHES`` below, everything else from the data.
"""

import argparse
import io
import json
import sys
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
PAGE = REPO / "docs" / "benchmarks.md"
IMG = REPO / "docs" / "img"

# bench name -> (title, the script that writes it); benchmarks not listed are shown after these
BENCHES = OrderedDict([
    ("peers", ("Side by side with the peers", "tools/bench_peers.py")),
    ("export", ("Exported models: scoring speed and the peers' agreement", "tools/bench_peers.py --only export")),
    ("linear", ("The linear solver", "tools/bench_linear.py")),
    ("kernel_approx", ("Kernel approximation", "tools/bench_kernel_approx.py")),
    ("kernel_big", ("Kernel approximation at a million rows", "tools/bench_kernel_big.py")),
    ("exact_kernel", ("Exact kernel RankSVM", "tools/bench_exact_kernel.py")),
    ("convert", ("Conversion", "tools/bench_convert.py")),
    ("distributed", ("Distributed passes", "tools/bench_distributed.py")),
    ("reliability", ("Reliability", "tools/bench_reliability.py")),
    ("limits", ("The machine's limits: memory bandwidth, disk, dense products", "tools/bench_limits.py")),
    ("pass", ("Linear passes against the time to read X once", "tools/bench_pass.py")),
    ("papers", ("The papers' experiments", "tools/bench_papers.py")),
    ("grid", ("Grids on one map", "tools/bench_grid.py")),
    ("precond", ("Preconditioners", "tools/bench_precond.py")),
    ("raw_scale", ("Raw feature scales and the default gamma grid", "tools/bench_raw_scale.py")),
    ("quality", ("Quality by default: paper 001's costs in the default search", "tools/bench_quality.py")),
    ("chunking", ("Storage: HDF5 chunks and compression", "tools/bench_chunking.py")),
    ("finite", ("The finiteness check", "tools/bench_finite.py")),
])


def load(results=RESULTS):
    """{bench: [records in file order]}; a line that is not JSON is reported and skipped."""
    out = OrderedDict()
    for f in sorted(Path(results).glob("*.jsonl")):
        recs = []
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                recs.append(json.loads(line))
            except ValueError as e:
                print(f"{f}:{n}: not JSON ({e}); skipped", file=sys.stderr)
        out[f.stem] = recs
    return out


def machine_key(m):
    return f"{m.get('cpu', 'unknown')}, {m.get('cores', '?')} cores"


def newest(records):
    """{section: {machine: newest record}}, sections in the order they first appear."""
    out = OrderedDict()
    for r in records:
        by = out.setdefault(r.get("section", ""), OrderedDict())
        k = machine_key(r.get("machine", {}))
        if k not in by or r["machine"].get("date", "") >= by[k]["machine"].get("date", ""):
            by[k] = r
    return out


def cell(v, fmt):
    if v is None:
        return ""
    if fmt and not isinstance(v, str):
        try:
            return fmt.format(v)
        except (ValueError, TypeError):
            return str(v)
    return str(v)


def markdown_table(rec):
    cols = rec.get("columns") or [[k, k, None] for k in (rec["rows"][0] if rec["rows"] else {})]
    lines = ["| " + " | ".join(h for _, h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for row in rec["rows"]:
        lines.append("| " + " | ".join(cell(row.get(k), f).replace("|", "\\|") for k, _, f in cols) + " |")
    return "\n".join(lines)


def plot(recs, spec, path):
    """One figure: for each machine's newest run, a line per value of ``series``, y against x."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.hashsalt"] = "streamrank"  # the same data give the same file
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: a smaller file, searchable labels
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    styles = ["-", "--", ":", "-."]
    for k, (machine, rec) in enumerate(recs.items()):
        series = OrderedDict()
        for row in rec["rows"]:
            x, y = row.get(spec["x"]), row.get(spec["y"])
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                series.setdefault(str(row.get(spec.get("series"), "")), []).append((x, y))
        for name, pts in series.items():
            pts.sort()
            label = name + (f" ({machine})" if len(recs) > 1 else "")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[k % len(styles)], marker="o", label=label)
    if spec.get("logx"):
        ax.set_xscale("log")
    if spec.get("logy"):
        ax.set_yscale("log")
    ax.set_xlabel(spec.get("xlabel", spec["x"]))
    ax.set_ylabel(spec.get("ylabel", spec["y"]))
    ax.set_title(spec.get("title", ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def render(results=RESULTS, img=IMG):
    """(page text, {image path: svg text})."""
    data = load(results)
    order = [b for b in BENCHES if b in data] + [b for b in data if b not in BENCHES]
    out = ["# Benchmarks", "",
           "Generated by `python tools/render_benchmarks.py` from the results data in",
           "[docs/results/](results/) (one JSON line per run of a benchmark section, written by the benchmark",
           "itself): for each section, the newest run on each machine. Do not edit this page; run the benchmark,",
           "then the script. Earlier runs stay in each benchmark's file (the history link); the hand-written",
           "logs of earlier rounds are in [benchmarks-archive.md](benchmarks-archive.md).", ""]
    images = {}
    for b in order:
        title, script = BENCHES.get(b, (b, f"tools/bench_{b}.py"))
        recs = data[b]
        out += [f"## {title}", "", f"`python {script}` · history: [results/{b}.jsonl](results/{b}.jsonl) "
                f"({len(recs)} run{'s' if len(recs) != 1 else ''})", ""]
        for section, by_machine in newest(recs).items():
            out += [f"### {section}", ""]
            first = next(iter(by_machine.values()))
            if first.get("plot"):
                spec = first["plot"]
                name = Path(spec["file"]).name
                images[Path(img) / name] = plot(by_machine, spec, Path(img) / name)
                out += [f"![{spec.get('title', section)}](img/{name})", ""]
            for machine, rec in by_machine.items():
                m = rec["machine"]
                out += [f"**{machine}**, {m.get('mem_gib', '?')} GiB; commit `{m.get('commit')}`"
                        f"{' (uncommitted changes)' if m.get('dirty') else ''}, {m.get('date', '')[:10]}; "
                        f"`{rec.get('command', '')}`", ""]
                if rec.get("params"):
                    out += ["Settings: " + ", ".join(f"{k} = {v}" for k, v in rec["params"].items()), ""]
                out += [markdown_table(rec), ""]
                out += [f"- {n}" for n in rec.get("notes", [])] + ([""] if rec.get("notes") else [])
    return "\n".join(out).rstrip() + "\n", images


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--page", default=str(PAGE))
    ap.add_argument("--img", default=str(IMG))
    ap.add_argument("--check", action="store_true", help="exit 1 if the page or a plot differs from the data's")
    args = ap.parse_args(argv)
    page, images = render(args.results, args.img)
    if args.check:
        stale = [str(p) for p, t in [(Path(args.page), page), *images.items()]
                 if not p.exists() or p.read_text(encoding="utf-8") != t]
        if stale:
            print("out of date: " + ", ".join(stale) + "; run python tools/render_benchmarks.py", file=sys.stderr)
            return 1
        return 0
    Path(args.img).mkdir(parents=True, exist_ok=True)
    for p, t in images.items():
        p.write_text(t, encoding="utf-8")
    Path(args.page).write_text(page, encoding="utf-8")
    print(f"wrote {args.page} and {len(images)} plot(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
