"""Progress off a terminal (issue 31): a log gets the log lines and, at most every
PLAIN_INTERVAL seconds, one plain progress line; bars (carriage returns, ``NN%|``) only on a
terminal or with --progress. Under pytest standard error is not a terminal. The interval is set
to 0 where a test needs the line, so nothing depends on how fast the machine is."""

import os
import re
import subprocess
import sys

import pytest

from streamrank.cli import main
from streamrank.execution import progress

BAR = re.compile(r"\r|\d+%\|")
# the outermost bar's part (the grid's; a pass's once the grid's bar has closed), then an inner pass's
PART = r"(grid|pass \d+ \w+) (\d+/\d+ [a-z]+ \(\d+%\)|\d+% of the work)( \([^)]*\))?, \d+[^,;]* elapsed(, about [^;]* left)?"
LINE = re.compile(rf"^progress: {PART}(; {PART})?$")


def _grid(tiny, out, *extra):
    return ["grid", str(tiny["train"]), "--valid", str(tiny["valid"]), "-o", str(out), "--C", "0.5,1",
            "--method", "primal,nystroem", "--components", "8", "--gamma", "0.1", "--pair-cost", "none", *extra]


def test_a_log_gets_plain_progress_lines_and_no_bar(tiny, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)  # every update may write its line
    assert main(_grid(tiny, tmp_path / "run")) == 0
    err = capfd.readouterr().err
    assert not BAR.search(err), err[:500]
    lines = [ln for ln in err.splitlines() if ln.startswith("progress:")]
    assert lines, err[:500]
    for ln in lines:
        assert LINE.match(ln), ln
    assert any(ln.startswith("progress: grid ") for ln in lines)
    # the log lines are there too, each on its own line
    assert "grid: configuration 1 of 2" in err and "grid: configuration 2 of 2" in err


def test_convert_in_a_log_says_its_bytes(tiny, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)
    assert main(["convert", str(tiny["test_txt"]), "-o", str(tmp_path / "t.h5")]) == 0
    err = capfd.readouterr().err
    assert not BAR.search(err)
    assert re.search(r"^progress: convert [\d.]+ [KM]B of [\d.]+ [KM]B \(\d+%\)", err, re.M), err


def test_progress_draws_the_bars_anywhere(tiny, tmp_path, capfd):
    assert main(_grid(tiny, tmp_path / "run", "--progress")) == 0
    err = capfd.readouterr().err
    assert "\r" in err and re.search(r"grid: +\d+%\|", err)
    assert main(["convert", str(tiny["test_txt"]), "-o", str(tmp_path / "t.h5"), "--progress"]) == 0
    assert re.search(r"convert: +\d+%\|", capfd.readouterr().err)


def test_json_and_quiet_show_no_progress(tiny, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)
    assert main(_grid(tiny, tmp_path / "run", "--json")) == 0
    assert "progress:" not in capfd.readouterr().err
    assert main(["convert", str(tiny["test_txt"]), "-o", str(tmp_path / "t.h5"), "--quiet"]) == 0
    assert capfd.readouterr().err == ""


def test_a_real_pipe_gets_no_bar(tiny, tmp_path):
    """The issue's run: ``streamrank grid ... 2> g4.log`` (standard error a file, not a terminal)."""
    log = tmp_path / "g.log"
    with open(log, "w") as fh:
        p = subprocess.run([sys.executable, "-m", "streamrank", *_grid(tiny, tmp_path / "run")], stderr=fh,
                           stdout=subprocess.PIPE, text=True, env=dict(os.environ, STREAMRANK_NO_WARMUP="1"))
    err = log.read_text()
    assert p.returncode == 0, err
    assert not BAR.search(err) and "grid: configuration 2 of 2" in err


def test_plain_lines_come_at_most_once_an_interval(capsys):
    """report(now): the first line an interval after progress began, then at most one per interval,
    the outermost bar's with an inner pass's after it; weights need not be whole numbers."""
    with progress.progress(True, draw=False, interval=30.0):
        t0 = progress._state["last_line"]
        outer = progress.bar(10.0, "cv", "grid")
        inner = progress.PassBar(type("_Linear", (), {})(), object())
        outer.n, inner.bar.n = 3.5, 7
        for dt in (0.0, 10.0, 29.9):
            progress.report(now=t0 + dt)
        assert capsys.readouterr().err == ""
        progress.report(now=t0 + 30.0)
        progress.report(now=t0 + 45.0)
        progress.report(now=t0 + 60.5)
        lines = capsys.readouterr().err.splitlines()
        inner.close()
        outer.close()
    assert len(lines) == 2, lines
    assert re.match(r"^progress: cv 35% of the work, \d+ s elapsed, about .* left; pass \d+ linear 7 blocks, ",
                    lines[0]), lines[0]
    assert progress._state["open"] == []


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (59.4, "59 s"), (72, "1 min 12 s"), (7500, "2 h 5 min")])
def test_durations_read_as_people_say_them(seconds, text):
    assert progress.duration(seconds) == text


def test_a_terminal_gets_bars_unless_json_or_quiet(tiny, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(progress, "_redraws_in_place", lambda: True)  # as if standard error were a terminal
    assert main(["convert", str(tiny["test_txt"]), "-o", str(tmp_path / "t.h5")]) == 0
    assert re.search(r"convert: +\d+%\|", capfd.readouterr().err)
    for flag in ("--json", "--quiet"):
        assert main(["convert", str(tiny["test_txt"]), "-o", str(tmp_path / "t.h5"), flag]) == 0
        assert not BAR.search(capfd.readouterr().err), flag
    # a library call outside the CLI keeps its conversion bar on a terminal
    from streamrank.io.convert import convert
    convert([tiny["test_txt"]], tmp_path / "u.h5")
    assert re.search(r"convert: +\d+%\|", capfd.readouterr().err)


def test_bars_an_error_left_open_are_forgotten_with_their_context(capsys):
    with pytest.raises(RuntimeError):
        with progress.progress(True, draw=False, interval=0.0):
            progress.bar(4, "grid", "point").update()  # never closed: the run failed
            raise RuntimeError
    assert progress._state["open"] == []
    assert capsys.readouterr().err.startswith("progress: grid 1/4 points (25%)")
