"""Messages seen on real runs (issue 31), each held here: a suggested fix is a value the same check
takes (derived from the refused one, or the table's example, or none); usage errors as git says
them; the CLI's flag for plots; folder paths without doubled slashes; the report's plot count."""

import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamrank import params
from streamrank.cli import main
from streamrank.errors import ParameterError

FAST = settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -0.0, -1, -0.5, 0.5, 1.5, 2.5, -2.5, 1e-300, -1e-300, 5e-324, 1e300, 2**31, 2**64, -(2**63),
                     float("nan"), float("inf"), "nan", "-inf", "abc", "", None, True]),
    st.floats(-1e6, 1e6).map(repr),
    st.text(max_size=6),
)


@FAST
@given(name=st.sampled_from(sorted(params.RANGES)), value=VALUES)
def test_a_suggested_value_is_taken_by_the_same_check(name, value):
    """For every value the table refuses, the fix its message proposes (if any) is accepted by the
    same parameter's check, and is not the refused value."""
    try:
        params.check(name, value)
    except ParameterError as e:
        m = re.search(rf"\. Use {re.escape(name)}=(\S+)$", str(e))
        if m is None:
            assert "Use " not in str(e)
            return
        fix = m.group(1)
        assert params.accepts(name, fix), (value, str(e))
        assert fix != str(value)
        num, r = params._number(value), params.RANGES[name]
        if num is not None and r.form == "number":
            # a slip of sign or a fraction where a whole number is meant: the fix is the value without it
            whole = round(num) if r.integer and not float(num).is_integer() else num
            mended = round(abs(num)) if r.integer and not float(abs(num)).is_integer() else abs(num)
            derived = next((c for c in (whole, mended) if c != num and r.holds(c)), None)
            if derived is not None:
                assert float(fix) == float(derived), (value, fix)


@pytest.mark.parametrize("argv, said, not_said", [
    (["--C", "nan"], "must be finite numbers > 0; got 'nan'", "--C nan"),
    (["--C", "-1"], "Pass --C 1 ", None),
    (["--C", "-1e-5"], "Pass --C 1e-05", None),
    (["--max-iter", "-5"], "Pass --max-iter 5;", None),
    (["--max-iter", "0"], "Pass --max-iter 1000;", None),
    (["--tol", "nan"], "got nan. Pass --tol 1e-3", "--tol nan"),
])
def test_cli_suggestions_are_values_that_work(tmp_path, capsys, argv, said, not_said):
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:1\n0 qid:1 1:2\n")
    assert main(["train", str(src), "-o", str(tmp_path / "m.h5"), "--cache-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert not_said is None or not_said not in err


@pytest.mark.parametrize("argv, command", [
    (["train", "x.h5", "-o", "m.h5", "--C", "inf"], "streamrank train"),
    (["train", "x.h5", "-o", "m.h5", "--bogus"], "streamrank train"),
    (["report"], "streamrank report"),
    (["bogus"], "streamrank"),
])
def test_a_usage_error_is_its_line_and_where_help_is(capsys, argv, command):
    """One line, as every refusal (issue 30): the error, then git's hint ``try 'streamrank train
    --help'``; no synopsis."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{command}: error: ")
    assert lines[0].endswith(f"; try '{command} --help'")


def test_translate_says_the_flag_that_switches_plots_off():
    from streamrank.cli import translate
    assert translate("or leave the plots out: use plots=False)") == "or leave the plots out: pass --no-plots)"
    assert translate("commit_seconds must be >= 0. Use commit_seconds=60") == "commit_seconds must be >= 0. Pass --commit-every 60"


def _grid_run(tiny, out):
    return main(["grid", str(tiny["train"]), "--valid", str(tiny["valid"]), "-o", out, "--C", "0.5,1", "--method",
                 "primal,nystroem", "--components", "8", "--gamma", "0.1,0.3", "--quiet"])


@pytest.fixture(scope="module")
def grid_run(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("msg-grid") / "run"
    assert _grid_run(tiny, str(out) + "/") == 0
    return out


def test_report_without_matplotlib_names_the_flag(grid_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # as if matplotlib were not installed
    assert main(["report", str(grid_run), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "pass --no-plots" in err and "plots=False" not in err
    assert main(["report", str(grid_run), "-o", str(tmp_path / "r.html"), "--no-plots"]) == 0


def test_a_folder_given_with_a_slash_is_joined_once(tiny, tmp_path, capsys):
    assert main(["grid", str(tiny["train"]), "--valid", str(tiny["valid"]), "-o", f"{tmp_path}/run/", "--C", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path}/run/model.h5" in out and "//" not in out


def test_report_counts_the_pngs_it_writes(grid_run, tiny, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["report", str(grid_run), "-o", str(tmp_path / "r.html"), "--png-dir", str(tmp_path / "png")]) == 0
    n = int(re.search(r"and (\d+) plot\(s\)", capsys.readouterr().out).group(1))
    names = sorted(p.stem for p in (tmp_path / "png").glob("*.png"))
    assert n == len(names) == 3 and "query_distribution" in names, names


def test_query_distribution_leaves_out_a_method_without_queries():
    """A method whose queries are all skipped (None) has no line; with none left there is no plot
    (and so none counted)."""
    pytest.importorskip("matplotlib")
    from streamrank.workflow.plots import query_distribution
    rec = {"format": "streamrank-cv", "settings": {"methods": ["a", "b"]},
           "results": [{"method": "a", "per_query": {"ndcg@10": [0.5, None, 1.0]}},
                       {"method": "b", "per_query": {"ndcg@10": [None, None]}}]}
    assert query_distribution(rec)[:8] == b"\x89PNG\r\n\x1a\n"
    rec["results"] = rec["results"][1:]
    assert query_distribution(rec) is None
