"""Does a diagonal preconditioner help TRON's conjugate gradients? (issue: "preconditioned if
measurement shows it helps"). Counts TRON iterations and CG steps on MQ2008 Fold1 with plain CG
and with LIBLINEAR 2.4x's preconditioner M = (1 - a) I + a diag(H), a = 0.01 and a = 1, for two
C and two tolerances. diag(H) = 1 + C diag(Phi^T L Phi) costs one pass with a d-wide pair-kernel
payload per iteration, so it must save more CG steps than that to be worth keeping.

    python tools/bench_precond.py [--data path/to/train.txt.gz]
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, args_params, table_record  # noqa: E402

import streamrank  # noqa: E402
streamrank.configure()  # the command line's process settings
from streamrank._native import pairkernels as pk  # noqa: E402
from streamrank.solvers import tron as T  # noqa: E402
from streamrank.io.convert import convert  # noqa: E402
from streamrank.objectives.rank_objective import BlockSource, RankObjective  # noqa: E402


class DiagObjective(RankObjective):
    def hess_diag(self):
        acc = np.zeros(self.n_features)
        for b, st in zip(self.source, self._states):
            Phi = b.X.astype(np.float64)
            state = pk.PairState.of(st, query_ptr=b.qptr)
            acc += (Phi * pk.hess_prod(Phi, b.rank, b.qptr, self.cost, self.mu[b.q0:b.q1], state)).sum(axis=0)
        return 1.0 + self.C * acc


def trpcg(hessp, g, delta, M):
    """Steihaug CG for H s = -g preconditioned by diagonal M, trust region in the M-norm."""
    s, r = np.zeros_like(g), -g
    z = r / M
    d, zr = z.copy(), float(z @ r)
    cgtol, steps = T.XI_CG * math.sqrt(zr), 0

    def mdot(a, b):
        return float(a @ (M * b))

    while math.sqrt(zr) > cgtol:
        steps += 1
        hd = hessp(d)
        alpha = zr / float(d @ hd)
        s += alpha * d
        if math.sqrt(mdot(s, s)) > delta:
            s -= alpha * d
            std, sts, dtd = mdot(s, d), mdot(s, s), mdot(d, d)
            rad = math.sqrt(max(std * std + dtd * (delta * delta - sts), 0.0))
            alpha = (delta * delta - sts) / (std + rad) if std >= 0 else (rad - std) / dtd
            return s + alpha * d, r - alpha * hd, steps, True
        r -= alpha * hd
        z = r / M
        zn = float(z @ r)
        d = z + (zn / zr) * d
        zr = zn
    return s, r, steps, False


def run(ds, levels, C, eps, a):
    src = BlockSource(ds, None, block_bytes=10**9, memory_bytes=1 << 30, levels=levels)
    obj = DiagObjective(src, ds.n_features, C=C, cost=pk.pair_cost(np.ones((len(levels),) * 2)),
                        mu=np.ones(ds.n_queries))
    w = np.zeros(ds.n_features)
    f, g = obj.fun(w), obj.grad(w)
    g0 = np.linalg.norm(g)
    M = (1 - a) + a * obj.hess_diag() if a else np.ones_like(w)
    delta, it, cg, first = math.sqrt(float(g @ (g / M))), 0, 0, True
    while np.linalg.norm(g) > eps * g0 and it < 200:
        s, r, steps, boundary = trpcg(obj.hessp, g, delta, M)
        cg += steps
        gs = float(g @ s)
        prered, fn = -0.5 * (gs - float(s @ r)), obj.fun(w + s)
        act, sn = f - fn, math.sqrt(float(s @ (M * s)))
        if first:
            delta, first = min(delta, sn), False
        curv = fn - f - gs
        al = T.SIGMA3 if curv <= 0 else max(T.SIGMA1, -0.5 * gs / curv)
        if act < T.ETA0 * prered:
            delta = min(al * sn, T.SIGMA2 * delta)
        elif act < T.ETA1 * prered:
            delta = max(T.SIGMA1 * delta, min(al * sn, T.SIGMA2 * delta))
        elif act < T.ETA2 * prered:
            delta = max(T.SIGMA1 * delta, min(al * sn, T.SIGMA3 * delta))
        else:
            delta = T.SIGMA3 * delta if boundary else max(delta, min(al * sn, T.SIGMA3 * delta))
        if act > T.ETA0 * prered:
            w, f, g, it = w + s, fn, obj.grad(w + s), it + 1
            if a:
                M = (1 - a) + a * obj.hess_diag()
    return it, cg, f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "data" / "MQ2008" / "Fold1" / "train.txt.gz"
    ap.add_argument("--data", default=str(default))
    ap.add_argument("--workdir", default="bench-out")
    args = ap.parse_args()
    Path(args.workdir).mkdir(exist_ok=True)
    h5 = Path(args.workdir) / "precond-train.h5"
    convert([args.data], h5, quiet=True)
    rows = []
    with streamrank.open_dataset(h5) as ds:
        levels = np.unique(ds.y[:])
        for C in (0.1, 1.0):
            for eps in (1e-3, 1e-6):
                for name, a in (("none", 0.0), ("diag a=0.01", 0.01), ("diag a=1", 1.0)):
                    it, cg, f = run(ds, levels, C, eps, a)
                    rows.append({"C": C, "eps": eps, "precond": name, "iter": it, "cg": cg, "f": f})
    table_record("precond", "preconditioners",
        rows, [("C", "C", "{:g}"), ("eps", "eps", "{:g}"), ("precond", "preconditioner", None),
                 ("iter", "TRON iterations", None), ("cg", "CG steps", None), ("f", "objective", "{:.9e}")], params=args_params(args))
    print(f"data: {args.data}")
    print(machine_facts())


if __name__ == "__main__":
    main()
