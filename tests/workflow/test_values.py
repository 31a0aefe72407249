"""The grammar of hyper-parameter values (streamrank.workflow.values) and its flags."""

import pytest

from streamrank.cli import main
from streamrank.errors import ParameterError
from streamrank.workflow.values import parse_values


@pytest.mark.parametrize("text, expected", [
    ("0.1,1,10", [0.1, 1.0, 10.0]),
    ("2^-5:2^5", [2.0 ** k for k in range(-5, 6)]),
    ("2^-5:2^5:2", [2.0 ** k for k in range(-5, 6, 2)]),
    ("10^-3:10^1", [1e-3, 1e-2, 1e-1, 1.0, 10.0]),
    ("2^-3", [0.125]),
    ("0.5, 2^-2:2^0,0.5", [0.5, 0.25, 1.0]),        # order kept, duplicates dropped
    ("1e-3,2.5E2", [1e-3, 250.0]),
])
def test_values(text, expected):
    assert parse_values(text, "C") == expected


def test_powers_of_two_are_exact():
    assert parse_values("2^-5", "C") == [0.03125]
    assert parse_values("2^-20:2^-20", "C") == [2.0 ** -20]


@pytest.mark.parametrize("text, words", [
    ("2^5:2^-5", "must rise"), ("2^-1:10^1", "one positive base"), ("abc", "not a number"), ("-1", "must be a finite number > 0"),
    ("", "at least one value"), ("2^1:2^3:0", "steps >= 1"),
])
def test_bad_values_say_what_is_wrong(text, words):
    with pytest.raises(ParameterError, match=words):
        parse_values(text, "C")


def test_integers():
    assert parse_values("500,2^10", "components", integer=True) == [500, 1024]
    with pytest.raises(ParameterError, match="whole numbers"):
        parse_values("2^-1", "components", integer=True)


def test_the_flags_take_the_grammar_and_name_themselves(tmp_path, capsys):
    assert main(["train", "x.h5", "-o", str(tmp_path / "m.h5"), "--C", "2^3:2^1"]) == 2
    err = capsys.readouterr().err
    assert "argument --C" in err and "Pass --C 2^1:2^3" in err
