"""What the property modules share: the session's ready-made files (a plain dataset, a model of every
method, folds, a grid run), one fresh workspace per example, and the command lines of every command
with room for hostile parameters."""

import contextlib
import itertools
import os
import shutil
from pathlib import Path

from hypothesis import settings

import prop_checker as pc
import prop_strategies as ps

METHODS = ("primal", "nystroem", "rff", "exact", "clsr")
# small maps: the data have a few rows
METHOD_ARGS = {"primal": [], "nystroem": ["--components", "4"], "rff": ["--components", "8"],
               "exact": [], "clsr": ["--components", "4"]}


def _profile():
    return settings.get_profile(os.environ.get("STREAMRANK_PROPERTY_PROFILE", "ci"))


def examples(ci):
    """The settings of a property: the profile's (conftest.py), with ``ci`` examples in the CI
    profile and the profile's count otherwise."""
    long = os.environ.get("STREAMRANK_PROPERTY_PROFILE", "ci") != "ci"
    return settings(_profile(), max_examples=_profile().max_examples if long else ci)


def few(ci):
    """The settings of a costly property (child processes): ``ci`` examples, or a twentieth of the
    long count."""
    long = os.environ.get("STREAMRANK_PROPERTY_PROFILE", "ci") != "ci"
    return settings(_profile(), max_examples=max(ci, _profile().max_examples // 20) if long else ci)


class Env:
    def __init__(self, root):
        from streamrank.cli.main import main
        self.root = Path(root)
        self._n = itertools.count()
        self.data = ps.plain_data(0)
        self.valid_data = ps.plain_data(1)
        self.plain = ps.write_h5(self.data, self.root / "plain.h5")
        self.valid = ps.write_h5(self.valid_data, self.root / "valid.h5")
        self.text = ps.write_text(self.data, self.root / "plain.txt")
        self.models = {}
        for m in METHODS:
            p = self.root / f"model-{m}.h5"
            assert main(["train", self.plain, "-o", p, "--quiet", "--method", m, *METHOD_ARGS[m]]) == 0, m
            self.models[m] = p
        self.folds = self.root / "folds"
        (self.folds / "Fold1").mkdir(parents=True)
        for part, src in (("train", self.plain), ("vali", self.valid), ("test", self.valid)):
            shutil.copy(src, self.folds / "Fold1" / f"{part}.h5")
        self.run = self.root / "run"
        assert main(["grid", self.plain, "--valid", self.valid, "-o", self.run, "--C", "0.5,1", "--quiet"]) == 0
        self.scores = self.root / "scores.txt"
        assert main(["predict", self.models["primal"], self.plain, "-o", self.scores]) == 0
        # the rest of the kernels: conversion, evaluation, selection, cv, report, the smooth hinge
        warm = self.root / "warm"
        warm.mkdir()
        for argv in (["convert", self.text, "-o", warm / "c.h5", "--quiet"], ["info", self.plain],
                     ["eval", self.plain, self.scores, "--json"],
                     ["select-features", self.plain, "-o", warm / "g.h5", "--quiet"],
                     ["train", self.plain, "-o", warm / "s.h5", "--quiet", "--loss", "smooth_hinge"],
                     ["cv", self.folds, "-o", warm / "cv", "--C", "1", "--quiet"],
                     ["report", self.run, "-o", warm / "r.html", "--no-plots", "--quiet"]):
            assert main(argv) == 0, argv
        shutil.rmtree(warm)

    @contextlib.contextmanager
    def workspace(self):
        """in/ (inputs), out/ (outputs), cache/ (caches) of one example, removed afterwards."""
        d = self.root / "cases" / str(next(self._n))
        for sub in ("in", "out", "cache"):
            (d / sub).mkdir(parents=True)
        try:
            yield d / "in", d / "out", d / "cache"
        finally:
            shutil.rmtree(d, ignore_errors=True)


def size_text():
    """A --memory-budget: a number, or a number with a unit."""
    from hypothesis import strategies as st
    return st.one_of(ps.numbers(), st.builds(lambda n, u: f"{n}{u}", ps.numbers(),
                                             st.sampled_from(["B", "KB", "MB", "GB", "TB", "kb", " MB", "MiB", "XB"])),
                     st.sampled_from(["300MB", "512MB", "1GB", "2GB", "1e300TB", "1e-300GB", "nanMB", "infGB"]))
