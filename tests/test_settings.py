"""The settings table (streamrank.settings) and its rule, walked entry by entry through both faces:
the CLI refuses a setting that does not apply to the method (exit 2, naming the flag); the API
accepts it, checks its range, and ignores it (the model is the model trained without it)."""

import inspect

import numpy as np
import pytest

import streamrank
from streamrank import settings
from streamrank.cli.main import build_parser, main
from streamrank.cli.train_commands import intake
from streamrank.errors import ParameterError

# a value of each setting other than its default, valid for some method, and what it needs beside it
SAMPLES = {
    "method": ("nystroem", ()), "C": ("0.5", ()), "lam": ("0.01", ()), "select_metric": ("map", ()),
    "convention": ("standard", ()),
    "kernel": ("laplacian", ()), "gamma": ("0.5", ()), "degree": ("2", ("--kernel", "poly")),
    "coef0": ("0.5", ("--kernel", "poly")), "components": ("20", ()), "rank": ("5", ()),
    "map_cache": ("memory", ()), "map_rows": ("features", ()), "solver": ("newton_yuan", ()), "precondition": ("off", ()),
    "features": ("1,2", ()), "loss": ("smooth_hinge", ()), "eta": ("0.5", ("--loss", "smooth_hinge")),
    "pair_cost": ("gain_difference", ()), "query_weight": ("log_ratio", ()), "tol": ("0.01", ()),
    "gap_tol": ("0.01", ()), "abs_gtol": ("1e-4", ("--solver", "newton_yuan")),
    "abs_dtol": ("1e-4", ("--solver", "newton_yuan")), "max_iter": ("5", ()), "seed": ("3", ()),
    "normalize": ("zscore", ()), "memory_budget": ("1GB", ()), "block_bytes": (None, ()),
    "cache_dir": ("DIR", ()), "cache_size": ("1GB", ("--cache-dir", "DIR")), "checkpoint": ("DIR", ()),
    "resume": (None, ()),
}


def test_every_setting_has_a_sample_and_its_range_or_choices():
    assert set(SAMPLES) == set(settings.TABLE)
    from streamrank import params
    for name, s in settings.TABLE.items():
        assert s.methods and set(s.methods) <= set(settings.METHODS), name
        if s.kind in ("values", "int", "posint", "float"):
            assert name in params.RANGES, f"{name}: a number without a range in streamrank.params"
        if s.kind == "choice":
            assert s.default in s.choices, name


def _parsed(tmp_path, method, flag, value, needs):
    argv = ["train", "d.h5", "-o", "m.h5", "--method", method, flag]
    argv += [] if value is None else [str(value).replace("DIR", str(tmp_path))]
    argv += [str(v).replace("DIR", str(tmp_path)) for v in needs]
    return build_parser().parse_args(argv)


@pytest.mark.parametrize("name", [n for n, s in settings.TABLE.items() if s.flag and n != "method"])
def test_the_cli_refuses_exactly_the_settings_that_do_not_apply(tmp_path, name):
    s = settings.TABLE[name]
    value, needs = SAMPLES[name]
    for method in settings.METHODS:
        needed = {settings.TABLE[k].name: v for k, v in zip(
            [n for n, t in settings.TABLE.items() if t.flag in needs[::2]], needs[1::2])}
        applies = s.applies(method, needed) and all(settings.TABLE[k].applies(method) for k in needed)
        args = _parsed(tmp_path, method, s.flag, value, needs)
        if applies:
            intake(args)
            assert args.given[name] == getattr(args, name) is not None
        else:
            with pytest.raises(ParameterError, match="(applies|do not apply) to"):
                intake(args)


def test_a_setting_that_depends_on_another_is_refused_without_it(tmp_path):
    for name in ("degree", "coef0", "eta", "abs_gtol", "abs_dtol"):
        s = settings.TABLE[name]
        method = s.methods[0]
        with pytest.raises(ParameterError, match=rf"{s.flag} applies to {settings.TABLE[s.when[0]].flag} "):
            intake(_parsed(tmp_path, method, s.flag, SAMPLES[name][0], ()))


def test_the_command_line_exits_2_with_one_line(tmp_path, capsys):
    data = tmp_path / "t.txt"
    data.write_text("1 qid:1 1:1 2:0\n0 qid:1 1:0 2:1\n")
    assert main(["train", str(data), "-o", str(tmp_path / "m.h5"), "--rank", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["streamrank train: error: --rank applies to --method nystroem, not to primal; drop --rank or pass "
                   "--method nystroem"]
    assert not (tmp_path / "m.h5").exists()


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(3)
    qid = np.repeat(np.arange(12), 8)
    X = rng.random((len(qid), 4)).astype(np.float32)
    y = np.minimum(2, (X[:, 0] * 2 + X[:, 1] + rng.random(len(qid)) * 0.5).astype(int)).astype(np.float64)
    return X, y, qid


def _api_value(name, tmp_path):
    value = SAMPLES[name][0]
    if name in ("cache_dir", "checkpoint"):
        return str(tmp_path / name)
    if name in ("C", "lam", "gamma", "tol", "gap_tol", "abs_gtol", "abs_dtol", "eta"):
        return float(value)
    if name in ("degree", "components", "rank", "max_iter", "seed"):
        return int(value)
    return value


def _model_bits(est):
    return np.asarray(est.model_.w).tobytes(), sorted(est.model_.config.items(), key=lambda kv: kv[0])


@pytest.mark.parametrize("cls,method", [(streamrank.RankSVM, "primal"), (streamrank.CLSRRank, "clsr")])
def test_the_api_accepts_and_ignores_what_does_not_apply(arrays, tmp_path, cls, method):
    """Every estimator parameter that does not apply to the method: fit accepts it, and the model
    (weights and the saved config) is the one fitted without it."""
    X, y, qid = arrays
    base = dict(max_iter=30) if method != "clsr" else dict(n_components=20)
    reference = _model_bits(cls(**base).fit(X, y, qid))
    sig = inspect.signature(cls)
    ignored = []
    for api, s in settings.estimator_params(cls._METHODS, cls._EXCLUDE):
        if s.applies(method) or s.name in ("method", "resume"):
            continue
        value = _api_value(s.name, tmp_path)
        assert api in sig.parameters
        got = _model_bits(cls(**base, **{api: value}).fit(X, y, qid))
        assert got[0] == reference[0] and got[1] == reference[1], (api, value)
        ignored.append(api)
    assert ignored  # gamma, kernel, rank, ... for primal; degree, coef0 for clsr's rbf


def test_the_api_checks_a_setting_that_does_not_apply_all_the_same(arrays):
    X, y, qid = arrays
    with pytest.raises(ParameterError, match="gamma must be a finite number > 0"):
        streamrank.RankSVM(method="primal", gamma=-1.0).fit(X, y, qid)
    with pytest.raises(ParameterError, match="kernel must be one of"):
        streamrank.RankSVM(method="primal", kernel="cosine").fit(X, y, qid)
    with pytest.raises(ParameterError, match="CLSRRank is method 'clsr'"):
        streamrank.RankSVM(method="clsr").fit(X, y, qid)


def test_what_applies_reaches_the_saved_config(arrays):
    X, y, qid = arrays
    est = streamrank.RankSVM(method="nystroem", gamma=0.5, n_components=10, rank=5, max_iter=20).fit(X, y, qid)
    cfg = est.model_.config
    assert cfg["gamma_path"] == [0.5] and cfg["components"] == 10 and cfg["rank"] == 5
    assert "gamma_path" not in streamrank.RankSVM(gamma=0.5, max_iter=20).fit(X, y, qid).model_.config


@pytest.mark.parametrize("trainer_module,name,methods", [
    ("streamrank.training.linear", "train_linear", ("primal", "nystroem", "rff")),
    ("streamrank.training.exact", "train_exact", ("exact",)),
    ("streamrank.training.clsr", "train_clsr", ("clsr",)),
])
def test_the_table_defaults_are_the_trainers(trainer_module, name, methods):
    """A trainer called directly takes the defaults the table gives (C and lambda as one-value
    paths; None pair costs and query weights are "none")."""
    import importlib
    trainer = getattr(importlib.import_module(trainer_module), name)
    same = {(1.0,): 1.0, (1e-3,): 1e-3, None: None}
    for p in inspect.signature(trainer).parameters.values():
        if p.name in settings.TABLE and p.name != "method":
            want = settings.default_for(p.name, methods[0])
            got = p.default
            if p.name in ("pair_cost", "query_weight") and got is None:
                got = "none"
            assert same.get(got, got) == want, (name, p.name, got, want)


def test_the_estimators_signature_and_docstring_come_from_the_table():
    for cls in (streamrank.RankSVM, streamrank.CLSRRank):
        names = [n for n in inspect.signature(cls).parameters if n != "verbose"]
        assert names == [api for api, _ in settings.estimator_params(cls._METHODS, cls._EXCLUDE)]
        for api in names:
            assert f"\n    {api} : " in cls.__doc__, api
        with pytest.raises(TypeError):
            cls(bogus=1)
        with pytest.raises(TypeError):
            cls(1.0)
