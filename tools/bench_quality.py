"""Quality by default (issue 47): paper 001's cost-sensitive setting beside plain RankSVM, and the
default search that chooses between them on each fold's vali, on MQ2008 and on generated data
graded 0-4.

    python tools/bench_quality.py                 # both sections
    python tools/bench_quality.py --only mq2008   # MQ2008's five folds (../shared/data/MQ2008)
    python tools/bench_quality.py --only graded   # five generated folds graded 0-4 (MSLR's shape)

Each row is ``streamrank cv`` over the five folds with the primal method's default C grid
(2^-16:2^4:2), chosen on vali by MeanNDCG, evaluated on test: the five-fold means of the test
metrics, and for the default search how many folds chose paper 001's setting. The graded section
scores in the ``standard`` convention (gain 2^y - 1, the one for grades beyond 2) and lists the
``graded`` rule's costs for grades 0-4 (docs/methods.md, "Cost-sensitive defaults").
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchutil import REPO, args_params, machine_facts, table_record  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "MQ2008"
METRICS = ("NDCG@1", "NDCG@10", "MAP", "MeanNDCG")
# (row name, the cv options): the settings compared
ROWS = {
    "mq2008": [
        ("plain RankSVM", "--pair-cost none", {"pair_cost": "none"}),
        ("paper 001's costs", "--pair-cost graded --query-weight log_ratio",
         {"pair_cost": "graded", "query_weight": "log_ratio"}),
        ("default search", "(no options)", {}),
    ],
    "graded": [
        ("plain RankSVM", "--pair-cost none", {"pair_cost": "none"}),
        ("graded costs alone", "--pair-cost graded --query-weight none",
         {"pair_cost": "graded", "query_weight": "none"}),
        ("graded costs + log_ratio", "--pair-cost graded --query-weight log_ratio",
         {"pair_cost": "graded", "query_weight": "log_ratio"}),
        ("gain difference + log_ratio", "--pair-cost gain_difference --query-weight log_ratio",
         {"pair_cost": "gain_difference", "query_weight": "log_ratio"}),
        ("default search", "(no options)", {}),
    ],
}
COLUMNS = [("setting", "setting", None), ("options", "cv options", None)] + \
    [(m, m, "{:.4f}") for m in METRICS] + [("cost_folds", "folds choosing paper 001's", None),
                                           ("seconds", "seconds", "{:.1f}")]


def cv_row(folds_dir, run_dir, name, options, costs, convention, open_data=None):
    from streamrank.workflow.cv import run_cv
    from streamrank.workflow.grid import cost_sensitive
    settings = {"tol": 1e-3, "seed": 0, "convention": convention, **costs}
    t = time.perf_counter()
    rec = run_cv(folds_dir, run_dir, methods=["primal"], axes={}, settings=settings, open_data=open_data)
    seconds = time.perf_counter() - t
    mean = next(r for r in rec["table"] if r["fold"] == "mean")
    chose = [r["fold"].removeprefix("Fold") for r in rec["results"] if cost_sensitive(r["chosen"])]
    return {"setting": name, "options": options, **{m: mean[m] for m in METRICS},
            "cost_folds": f"{len(chose)} of {len(rec['results'])}" + (f" ({', '.join(chose)})" if chose else ""),
            "seconds": seconds, "convention": rec["convention"], "notes": rec["notes"]}


def section_mq2008(args, work):
    from streamrank.io.data_files import open_data
    data = Path(args.data)
    if not (data / "Fold1").is_dir():
        print(f"MQ2008 not found at {data}: section skipped")
        return
    print("\n== MQ2008, five folds, primal, letor4 test means ==")

    def opener(p):
        return open_data(p, work / "cache")
    rows = [cv_row(data, work / f"mq-{k}", name, opt, costs, "letor4", opener)
            for k, (name, opt, costs) in enumerate(ROWS["mq2008"])]
    table_record("quality", "mq2008", rows, COLUMNS, params=args_params(args),
                 notes=[f"streamrank cv {data} -o RUN --method primal OPTIONS (the default C grid, chosen on vali "
                        f"by meanndcg, letor4 test metrics, five-fold means)"])


def write_graded_folds(folder, scale):
    from streamrank.synthetic import write_hdf5
    for k in range(1, 6):
        (folder / f"Fold{k}").mkdir(parents=True, exist_ok=True)
        for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
            write_hdf5(folder / f"Fold{k}" / f"{name}.h5", "mslr30k", seed=40 + k, part=part, scale=scale)


def section_graded(args, work):
    import numpy as np

    from streamrank.training.problem import graded_costs
    folds = work / "graded"
    write_graded_folds(folds, args.graded_scale)
    print(f"\n== generated folds graded 0-4 (mslr30k x {args.graded_scale}), five folds, primal, "
          f"standard test means ==")
    rows = [cv_row(folds, work / f"gr-{k}", name, opt, costs, "standard")
            for k, (name, opt, costs) in enumerate(ROWS["graded"])]
    lam = graded_costs([0.0, 1.0, 2.0, 3.0, 4.0])
    figure = ["the graded rule's costs lambda(a, b) = log2(1 + |2^a - 2^b|) on grades 0-4 (row a, column b):"]
    figure += ["  " + " ".join("   -  " if a == b else f"{lam[a, b]:6.3f}" for b in range(5)) for a in range(5)]
    print("\n".join(figure))
    assert np.allclose(lam, lam.T)
    table_record("quality", "graded", rows, COLUMNS, params=args_params(args),
                 notes=[f"streamrank cv FOLDS -o RUN --method primal --convention standard OPTIONS on five "
                        f"generated folds (streamrank.synthetic mslr30k x {args.graded_scale}, seeds 41-45, "
                        f"grades 0-4)"] + figure)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["mq2008", "graded"], help="one section")
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder with MQ2008 Fold1..Fold5")
    ap.add_argument("--graded-scale", type=float, default=0.01,
                    help="mslr30k preset scale of each generated part (0.01: about 190 queries, 22,700 rows)")
    ap.add_argument("--workdir", help="where converted and generated data and the runs go (default: a temporary "
                    "folder, deleted)")
    args = ap.parse_args()
    print(machine_facts())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.only in (None, "mq2008"):
            section_mq2008(args, work)
        if args.only in (None, "graded"):
            section_graded(args, work)


if __name__ == "__main__":
    main()
