"""Side by side with the published peers (issue 17): start-up, linear RankSVM and exact kernel
RankSVM on MQ2008 Fold1, linear RankSVM on a generated 1M-row MSLR-like set, conversion speed,
Nystroem pipelines and gradient-boosted trees, each tool as a whole process, with one independent
objective per problem.

    python tools/bench_peers.py                          # startup,linear,exact (the default), 3 rounds
    python tools/bench_peers.py --repeats 1 --only startup,linear
    python tools/bench_peers.py --only startup,linear,exact,big,convert,nystroem,gbdt   # everything
    python tools/bench_peers.py --only big,convert,nystroem,gbdt --big-scale 0.044 --repeats 1
                                                         # the new sections, quickly (~100k rows)
    python tools/bench_peers.py --only scaling              # time and peak RSS against rows (~10 min)
    python tools/bench_peers.py --liblinear DIR/train --libsvm-ranksvm DIR/svm-train \\
        --svmrank DIR/svm_rank_learn                     # peers built by tools/peers/build.sh

The default --only stays startup,firstuse,linear,exact; big, convert, nystroem, gbdt, scaling and export
run when named. Every section appends its table to docs/results/peers.jsonl (export: export.jsonl),
from which ``python tools/render_benchmarks.py`` draws docs/benchmarks.md. The sections live in
tools/bench/ (one module each; cli.py runs them). Pass
--workdir DIR to keep (and reuse) the generated data: big, convert and gbdt share one text file,
generated once (~1.7 GB at the default --big-scale) and converted once.

Rows (every timed run is a fresh process; the rows of a section run interleaved over --repeats
rounds: tool A, tool B, ..., then again; a peer not found is a row saying "not available"):

* startup: ``python -c pass`` (the interpreter), ``python -c "import numpy, numba"`` (the import
  floor), ``python -c "import streamrank"``, ``python -m streamrank --help``.
* firstuse: a new venv (``python -m venv``, then ``pip install`` of this checkout, timed once; kept
  in --workdir and reused), then in every round, each run with an empty numba cache of its own
  (``NUMBA_CACHE_DIR``): ``streamrank demo``, ``streamrank train fold1.h5 --C 1`` and ``streamrank
  select-features fold1.h5 -k 10 --importance map --tradeoff 0.5`` (MQ2008 Fold1, converted
  beforehand; ``--firstuse-commands`` picks some of demo, train, select), as a user's first run after installing (numba compiles every kernel the
  command needs; the first-use helpers, ``streamrank/_native/warmup.py``, compile them before the
  command plans its memory, two at once within the default budget), the same with the helper off (``STREAMRANK_NO_WARMUP=1``), and a second run
  on the now warm cache.
* linear (MQ2008 Fold1 train, C = 1, eps = 1e-3): ``streamrank train fold1.h5`` (converted once
  beforehand), streamrank from the text file (``convert`` then ``train``, two processes: seconds
  summed, peak RSS the larger), the LIBLINEAR ranksvm extension (``train -s 8``) on the text file,
  and SVMrank (``svm_rank_learn -c C*n_queries``) on it. SVMrank minimises a different function
  (L1 hinge, 1/2||w||^2 + C'/n_queries sum over pairs of max(0, 1 - w.(x_i - x_j))): its own
  objective is reported in a column of its own and is not comparable.
* exact (rbf, gamma = 2^-5, C = 1, eps = 1e-3): ``streamrank train --method exact`` against
  libsvm-ranksvm (``svm-train -s 0 -t 2``, OMP_NUM_THREADS=2, its kernel cache large enough for
  the whole of Q unless --libsvm-cache-mb says otherwise: with libsvm's default 100 MB it
  recomputes most of Q every Hessian product and takes well over ten times as long).
* big (a generated MSLR-WEB30K-like text set: streamrank.synthetic's ``mslr30k`` preset, seed 0,
  scale --big-scale, default 0.4405 = 1,000,065 rows x 136 features, 8,334 queries; C = 1, eps =
  1e-3): ``streamrank train big.h5`` (converted once beforehand; the solver's own seconds, --json
  ``seconds``, beside the whole process), the same with ``--memory-budget`` half the size of X in
  the HDF5 file, streamrank from the text (convert + train), and LIBLINEAR ``train -s 8`` on the
  text, a whole run. Ratios printed: streamrank's solve (and whole train process) over LIBLINEAR's
  whole run, text-to-model over LIBLINEAR's whole run, and the peak RSS ratios.
* convert: ``streamrank convert big.txt -o x.h5`` on the big text and on its first --slice-mb MB
  (cut at a query boundary), against scikit-learn's ``load_svmlight_file(..., query_id=True)`` in
  a process of its own on the same head, and on the whole file only when that is at most 4 times
  the head and the head's time and RSS, scaled, stay under 3 minutes and 4 GB (--sklearn-full yes
  forces it: at the default size it took 766 s and 2.3 GB, its time growing faster than the file);
  MB/s of text and peak RSS.
* nystroem (MQ2008 Fold1, rbf gamma = 2^-5, m = 2000 landmarks, C = 1, eps = 1e-3, end to end):
  ``streamrank train fold1.h5 --method nystroem --components 2000`` against scikit-learn's
  ``Nystroem(kernel="rbf", gamma=2^-5, n_components=2000, random_state=0)`` fitted on the training
  rows, the mapped rows written with qid by ``dump_svmlight_file`` (one process), then LIBLINEAR
  ``train -s 8`` on that file: the two timed apart and summed. Each tool's objective is on its own
  feature map (not comparable); the comparable figure is the test NDCG@10 on Fold1's test.txt
  (streamrank: ``streamrank predict``; scikit-learn: its transform times LIBLINEAR's w).
* gbdt: LightGBM ``LGBMRanker`` (lambdarank, 100 trees, num_threads=2) and XGBoost ``XGBRanker``
  (rank:ndcg, 100 trees, n_jobs=2), defaults otherwise, each a process reading the big set's HDF5
  with h5py (or its first --gbdt-rows rows), fitting and scoring a held-out generated test set
  (same preset, seed 0, part ``test``: other queries of the same relevance model; --test-scale,
  default 0.05 = 113,515 rows), beside streamrank linear (``train``) on the same rows: time, peak
  RSS and test NDCG@10.
* scaling (tools/bench/scaling.py): linear RankSVM (C = 1, eps = 1e-3) against rows on generated
  MSLR-WEB30K-like text (the ``mslr30k`` preset, seed 0, --scaling-rows, default 10k, 30k, 100k and
  300k rows): ``streamrank train X.h5`` (converted beforehand, untimed), streamrank from the text
  (convert + train), LIBLINEAR ``train -s 8``, and SVMrank (``svm_rank_learn -c C*n_queries``, only
  up to --scaling-svmrank-rows rows: it is slow); whole processes, interleaved, --repeats rounds
  (default 1 for this section), seconds and peak RSS, and the squared-hinge objective of every
  squared-hinge model. Recorded with two plot specs: seconds and peak RSS against rows.
* export (tools/bench/export.py, also ``python tools/bench_export.py``): the peers' own programs
  scoring exported models, and onnxruntime's speed (--export-rows, --kernel-rows passed on).

Seconds are wall-clock medians; peak RSS is the child's maximum resident set (``/usr/bin/time -f
%M``, else ``os.wait4``'s rusage), the largest over the rounds, in MB = 10^6 bytes. streamrank's
numba cache is warmed by one untimed run of each command first (big, convert and gbdt: on a small
set of the same preset). The objectives are computed here, after the section's timed runs, by one
float64 function per problem from each tool's model file: the squared-hinge primal 1/2||w||^2 + C
sum max(0, 1 - w.(x_i - x_j))^2, and for the kernel models 1/2 beta^T K beta + C sum max(0, 1 -
(K beta)_i + (K beta)_j)^2 with K from the model's support rows, so "faster" can be read as "to the
same objective or lower". MQ2008's are over the explicit pairs of the text file (parsed here);
big's from the text parsed in float64 in 64 MB blocks (scikit-learn's parser) and a dense margin
matrix per query (a few hundred rows at most), never the list of pairs; nystroem's with each
model's own phi. NDCG@10 is one function here, LETOR 4.0's Eval-Score-4.0.pl: gain 2^rel - 1,
positions 1-2 undiscounted then 1/log2(i), ties in file order, 0 for a query with fewer than 10
documents or without a relevant one (it agrees with streamrank's ``letor4`` evaluation to the last
bits). MQ2008 is read from ../shared/data/MQ2008 beside the repository (--data); the peers are
looked for in ../peers/ (tools/peers/build.sh's output) unless given.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _benchutil import REPO, machine_facts

from . import big, convert, exact, firstuse, gbdt, linear, mq2008, nystroem, scaling, startup
from .common import (BIG_PRESET, BIG_SCALE, DEFAULT_DATA, DEFAULT_ONLY, DEFAULT_PEERS, PEER_NAMES, SECTIONS,
                     peer_path, peer_version)
from .context import Context
from .run import TIME
from .scaling import SCALING_ROWS, SCALING_SVMRANK_ROWS


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="MQ2008's folder (Fold1/train.txt[.gz])")
    ap.add_argument("--liblinear", default=None, help="the LIBLINEAR ranksvm extension's train binary "
                                                      f"(default {DEFAULT_PEERS['liblinear']} if present)")
    ap.add_argument("--libsvm-ranksvm", dest="libsvm_ranksvm", default=None,
                    help=f"libsvm-ranksvm's svm-train (default {DEFAULT_PEERS['libsvm_ranksvm']} if present)")
    ap.add_argument("--svmrank", default=None, help=f"SVMrank's svm_rank_learn (default {DEFAULT_PEERS['svmrank']} "
                                                    "if present)")
    ap.add_argument("--repeats", type=int, default=None, help="rounds (default 3; scaling: 1)")
    ap.add_argument("--firstuse-commands", default="demo,train,select",
                    help="firstuse: the commands timed, some of demo, train, select (default all three)")
    ap.add_argument("--only", default=",".join(DEFAULT_ONLY),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default {','.join(DEFAULT_ONLY)})")
    ap.add_argument("--big-scale", type=float, default=BIG_SCALE,
                    help=f"scale of the generated {BIG_PRESET} set of big, convert and gbdt (default {BIG_SCALE:g}: "
                         f"about 1M rows; 0.044: about 100k rows, a quick run)")
    ap.add_argument("--slice-mb", type=int, default=200,
                    help="convert: the head of the big text (MB = 10^6 bytes) both parsers also read (default 200)")
    ap.add_argument("--sklearn-full", choices=["auto", "yes", "no"], default="auto",
                    help="convert: scikit-learn on the whole big text too: auto = only when the text is at most 4 "
                         "times the head and the head's run, scaled to the whole file, stays under 4 GB and 3 "
                         "minutes (default auto; its time grows faster than the file: 766 s for the default 1.7 "
                         "GB, 9.2 s for its first 200 MB)")
    ap.add_argument("--gbdt-rows", type=int, default=0,
                    help="gbdt: train on the first R rows of the big set (cut at a query boundary; default 0 = all)")
    ap.add_argument("--test-scale", type=float, default=0.05,
                    help="gbdt: scale of the generated held-out test set (part test; default 0.05: ~113k rows)")
    ap.add_argument("--workdir", default=None, help="where data copies, models and logs go (default: a temporary "
                                                    "directory, removed at the end)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed for one child (default 1800)")
    ap.add_argument("--libsvm-cache-mb", default="whole",
                    help="libsvm-ranksvm's -m: 'whole' (default: enough for all of Q, as streamrank keeps it) or MB")
    ap.add_argument("--omp-threads", type=int, default=2, help="OMP_NUM_THREADS for libsvm-ranksvm (default 2)")
    ap.add_argument("--scaling-rows", default=",".join(str(n) for n in SCALING_ROWS),
                    help="scaling: the generated sets' rows, comma-separated (default "
                         f"{','.join(str(n) for n in SCALING_ROWS)})")
    ap.add_argument("--scaling-svmrank-rows", type=int, default=SCALING_SVMRANK_ROWS,
                    help=f"scaling: SVMrank runs only on sets of at most this many rows (default "
                         f"{SCALING_SVMRANK_ROWS:,}: it took 18 s at 10k rows and 62 s at 30k on 2 cores)")
    ap.add_argument("--export-rows", type=int, default=None, help="export: its --rows (default 1M)")
    ap.add_argument("--kernel-rows", type=int, default=None, help="export: its --kernel-rows (default 250,000)")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown or not only:
        ap.error(f"--only takes a comma-separated subset of {','.join(SECTIONS)} (got {args.only!r})")
    args.scaling_repeats = args.repeats or 1
    args.repeats = args.repeats or 3
    try:
        args.scaling_rows = [int(float(v)) for v in args.scaling_rows.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--scaling-rows takes whole numbers separated by commas (got {args.scaling_rows!r})")
    if not args.scaling_rows or min(args.scaling_rows) < 1000:
        ap.error(f"--scaling-rows needs sizes of at least 1000 rows (got {args.scaling_rows})")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if "export" in only:  # issue 32: tools/bench/export.py (its own options: python tools/bench_export.py --help)
        from .export import main as export_main
        peers_given = [f"--{o}={Path(p).with_name(n)}" for o, p, n in (("liblinear-predict", args.liblinear, "predict"),
                       ("svmrank-classify", args.svmrank, "svm_rank_classify")) if p]
        rc = export_main([f"--repeats={args.repeats}", f"--data={args.data}"] + peers_given
                         + ([f"--workdir={Path(args.workdir) / 'export'}"] if args.workdir else [])
                         + ([f"--rows={args.export_rows}"] if args.export_rows else [])
                         + ([f"--kernel-rows={args.kernel_rows}"] if args.kernel_rows else []))
        only.remove("export")
        if not only:
            return rc

    py = sys.executable
    print(machine_facts())
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores); peak RSS by "
          f"{TIME + ' -f %M' if TIME else 'os.wait4 rusage'}"
          + ("; PYTHONDONTWRITEBYTECODE is set (the bench compiles the checkout's bytecode first)"
             if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""))
    peers = {}
    for key in DEFAULT_PEERS:
        path, why = peer_path(getattr(args, key), key)
        peers[key] = (path, why)
        print(f"{PEER_NAMES[key]}: " + (f"{path}: " + "; ".join(peer_version(path)) if path else why))

    keep = args.workdir is not None
    work = Path(args.workdir) if keep else Path(tempfile.mkdtemp(prefix="bench-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    ctx = Context(args, only, work, env, peers)
    # the children import the checkout's streamrank from compiled bytecode, as an installed package
    # does (with PYTHONDONTWRITEBYTECODE set, each would otherwise compile every module it imports)
    subprocess.run([py, "-m", "compileall", "-q", str(REPO / "streamrank")], check=False, cwd=REPO,
                   stdout=subprocess.DEVNULL)

    if "startup" in only:
        startup.run(ctx)
    mq2008.load(ctx)  # MQ2008 Fold1, when linear, exact, nystroem or firstuse runs
    if "firstuse" in only:
        firstuse.run(ctx)
    if "linear" in only:
        linear.run(ctx)
    if "exact" in only:
        exact.run(ctx)
    mq2008.objectives(ctx)  # after every timed run

    printers = []
    if {"big", "convert", "gbdt"} & set(only):
        ctx.prepare_big()
    for name, section in (("big", big), ("convert", convert), ("nystroem", nystroem), ("gbdt", gbdt),
                          ("scaling", scaling)):
        if name in only:
            printer = section.run(ctx)
            if printer is not None:
                printers.append(printer)

    mq2008.print_table(ctx)
    for printer in printers:
        printer()
    rounds = args.scaling_repeats if only == ["scaling"] else args.repeats
    print(f"seconds: wall-clock medians of {rounds} round(s), interleaved; peak RSS: the largest over the "
          f"rounds, MB = 10^6 bytes; x fastest: median over the section's fastest (SVMrank left out); the machine "
          f"may be shared: rerun when it is quiet")
    if keep:
        print(f"models and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("produced by: python tools/bench_peers.py " + " ".join(sys.argv[1:] if argv is None else argv))
    return ctx.status
