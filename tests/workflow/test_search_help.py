"""The help of grid and cv says what each command does (issue 31: cv's said "several (with
--valid)", but cv has no --valid: it chooses on each fold's vali)."""

from streamrank.cli.main import build_parser


def help_of(command):
    sub = next(a for a in build_parser()._actions if getattr(a, "choices", None) and command in a.choices)
    return sub.choices[command].format_help()


def test_cv_help_names_no_valid_and_says_where_it_chooses():
    text = " ".join(help_of("cv").split())
    assert "--valid" not in text
    assert "several form a warm-started path, chosen on each fold's vali" in text
    assert "what each fold's vali chooses by" in text
    assert "where the folds' text files are converted" in text and "text DATA" not in text
    assert "one JSON object on one line" in text


def test_the_gamma_default_is_the_datas_grid():
    for command in ("grid", "cv"):
        text = " ".join(help_of(command).split())
        assert "the method's grid around the data's gamma='scale' = 1/(d Var X) after --normalize" in text


def test_grid_help_says_valid_chooses_and_what_is_converted():
    text = " ".join(help_of("grid").split())
    assert "(with --valid)" not in text and "several form a warm-started path, chosen on --valid" in text
    assert "where text DATA and --valid are converted" in text
    for command in ("grid", "cv"):
        assert "one or both of squared_hinge (RankSVM) and smooth_hinge" in " ".join(help_of(command).split())
