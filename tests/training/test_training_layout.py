"""The training functions as a newcomer reads them: methods are module-level classes over a
prepared problem (no class defined inside a function), no function runs past 100 lines, and the
checked settings are read-only: what a run decides on the way (``solver="auto"``'s solver) comes
back with the path's result and is recorded from there, in the model's config and the checkpoints'
settings (docs/formats.md), never in what a checkpoint must match."""

import ast
from pathlib import Path

import pytest

import streamrank
from streamrank.synthetic import write_hdf5
from streamrank.state.checkpoint import read_checkpoint
from streamrank.state.model import load
from streamrank.training import linear
from streamrank.training.linear import train_linear

TRAINING = Path(streamrank.__file__).parent / "training"
MAX_LINES = 100  # from ``def`` to the function's last line, docstring included


def _functions(path):
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_training_function_is_longer_than_100_lines():
    long = [f"{p.name}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1} lines)"
            for p in sorted(TRAINING.glob("*.py")) for f in _functions(p) if f.end_lineno - f.lineno + 1 > MAX_LINES]
    assert not long, f"split these functions: {long}"


def test_no_class_is_defined_inside_a_training_function():
    inner = [f"{p.name}:{c.lineno} {c.name} inside {f.name}" for p in sorted(TRAINING.glob("*.py"))
             for f in _functions(p) for c in ast.walk(f) if isinstance(c, ast.ClassDef)]
    assert not inner, f"make these module-level classes over the prepared problem: {inner}"


@pytest.fixture(scope="module")
def train_h5(tmp_path_factory):
    path = tmp_path_factory.mktemp("layout") / "train.h5"
    write_hdf5(path, "small", seed=0, part="train", scale=0.1)
    return path


@pytest.fixture
def settings_seen(monkeypatch):
    """The settings train_linear hands to its path, as they are when the path ends."""
    seen, real = [], linear.run_settings

    def spy(method, points, settings, **kw):
        res = real(method, points, settings, **kw)
        seen.append(settings)
        return res
    monkeypatch.setattr(linear, "run_settings", spy)
    return seen


def test_solver_auto_choice_comes_from_the_result(train_h5, tmp_path, settings_seen):
    with streamrank.open_dataset(train_h5) as ds:
        model, summary = train_linear(ds, C=0.5, solver="auto", checkpoint=tmp_path / "ck")
    chosen = summary["solver"]
    assert chosen in ("tron", "newton_cholesky")
    assert model.config["solver"] == "auto" and model.config["solver_chosen"] == chosen
    model.save(tmp_path / "m.h5")
    assert load(tmp_path / "m.h5").config["solver_chosen"] == chosen
    # the settings the path ran with: unchanged and read-only
    settings = settings_seen[-1]
    assert settings["solver"] == "auto" and "solver_chosen" not in settings
    with pytest.raises(TypeError):
        settings["solver_chosen"] = chosen
    # the checkpoint records the choice with the full settings, not in what a resume must match
    ck = read_checkpoint(tmp_path / "ck")
    assert ck["scalars"]["settings"]["solver_chosen"] == chosen
    assert "solver_chosen" not in ck["config"] and ck["config"]["solver"] == "auto"


def test_a_named_solver_records_no_choice(train_h5, tmp_path):
    with streamrank.open_dataset(train_h5) as ds:
        model, summary = train_linear(ds, C=0.5, solver="tron", checkpoint=tmp_path / "ck")
    assert summary["solver"] == "tron" and "solver_chosen" not in model.config
    assert "solver_chosen" not in read_checkpoint(tmp_path / "ck")["scalars"]["settings"]
