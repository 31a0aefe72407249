"""Crash soak: SIGKILL every scenario of the crash harness (tests/faults/scenarios.py) at many random
moments and at every fault point, then check that what was left is absent or complete and that
running again (train: --resume) gives exactly the uninterrupted result, with no temporary file left.

    python tools/soak.py                 # 40 random kills per scenario, every fault point
    python tools/soak.py --kills 200     # the long soak

Prints one row per scenario (kills injected, kills that landed before the command finished, runs
that continued to the identical result) and the machine facts; exits 1 on any failure.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "faults"))
sys.path.insert(0, str(HERE.parent / "tests"))

from _benchutil import args_params, machine_facts, record, table  # noqa: E402
import kill_harness as kh  # noqa: E402
from scenarios import SCENARIOS, make_inputs  # noqa: E402


def soak(base, kills, seed=0):
    """Every scenario killed at each fault point and at ``kills`` random moments; (rows, failures)."""
    inputs = make_inputs(base / "inputs")
    rng = np.random.default_rng(seed)
    rows, failures = [], []
    for s in SCENARIOS:
        reference, seconds = kh.reference_result(s, base, inputs)
        # the run time that random kills are spread over: the fastest of three (caches warm)
        seconds = min([seconds] + [kh.reference_result(s, base, inputs)[1] for _ in range(2)])
        row = {"scenario": s.name, "seconds": seconds, "points": 0, "kills": 0, "landed": 0, "identical": 0}
        t0 = time.perf_counter()
        cases = [("point", p, n) for p, n in s.points] + [("random", float(f), k) for k, f in
                                                          enumerate(rng.uniform(0.05, 1.0, kills))]
        for kind, a, b in cases:
            try:
                if kind == "point":
                    kh.kill_at_point(s, base, inputs, reference, a, b)
                    row["points"] += 1
                    landed = True
                else:
                    landed = kh.kill_after(s, base, inputs, reference, a * seconds, b)
                row["kills"] += 1
                row["landed"] += int(landed)
                row["identical"] += 1
            except AssertionError as e:
                row["kills"] += 1
                failures.append(f"{s.name} {kind} {a} {b}: {e}")
        row["soak_s"] = time.perf_counter() - t0
        rows.append(row)
        print(f"  {s.name}: {row['identical']}/{row['kills']} identical ({row['landed']} landed)", file=sys.stderr,
              flush=True)
    return rows, failures


def print_table(rows, params=None):
    """The kills table, printed and recorded (docs/results/reliability.jsonl, section kills)."""
    cols = [("scenario", "scenario", None), ("seconds", "run s", "{:.1f}"), ("kills", "kills", None),
            ("points", "at fault points", None), ("landed", "landed mid-run", None),
            ("identical", "continued to the identical result", None), ("soak_s", "soak s", "{:.0f}")]
    table(rows, cols)
    note = ("kills: SIGKILL at each fault point of the scenario, then at random moments uniform over 5%..100% of its "
            "uninterrupted run time (a kill after the command ended counts as not landed); after each: leftovers "
            "absent or complete, rerun/--resume identical, no temporary file")
    print(note)
    record("reliability", "kills", rows, cols, notes=[note], params=params)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=40, help="random kills per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="streamrank-soak-"))
    base.mkdir(parents=True, exist_ok=True)
    rows, failures = soak(base, args.kills, args.seed)
    print_table(rows, params=args_params(args))
    for f in failures:
        print("FAILED", f)
    print(machine_facts())
    if args.json:
        print(json.dumps({"rows": rows, "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
