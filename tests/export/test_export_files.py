"""Files beside an export as users have them: a names file saved as UTF-8 with a byte-order mark
(Notepad, PowerShell), an empty --name, and an output that exists with its own mode (kept, as
every output written through io.atomic keeps it)."""

import json
import os
import re
import stat

import pytest

from locations import DATA
from streamrank.cli import main
from streamrank.errors import InputError, ParameterError
from streamrank.export import render
from streamrank.state.model import load


@pytest.mark.parametrize("fmt,newline", [("solr", "\r\n"), ("elasticsearch", "\n"), ("json", "\r\n"), ("onnx", "\n")])
def test_a_names_file_with_a_byte_order_mark_gives_the_same_export(tmp_path, fmt, newline):
    if fmt == "onnx":
        pytest.importorskip("onnx")
    plain, bom = tmp_path / "plain.txt", tmp_path / "bom.txt"
    plain.write_text(newline.join(["g1", "g2", "g3", "g4"]) + newline, encoding="utf-8", newline="")
    bom.write_text(newline.join(["g1", "g2", "g3", "g4"]) + newline, encoding="utf-8-sig", newline="")
    assert bom.read_bytes().startswith(b"\xef\xbb\xbfg1")
    outs = []
    for names in (plain, bom):
        out = tmp_path / f"{names.stem}.{fmt}"
        assert main(["export", str(DATA / "model_v1.h5"), "--format", fmt, "-o", str(out), "--feature-names",
                     str(names), "--name", "m", "--quiet"]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and b"\xef\xbb\xbf" not in outs[1] and b"\\ufeff" not in outs[1]
    if fmt != "onnx":
        assert "g1" in outs[1].decode()


def test_a_byte_order_mark_inside_a_list_of_names_is_refused():
    with pytest.raises(InputError, match=r"name 1 is '\\ufeffg1', which holds a byte-order mark .*utf-8-sig"):
        render(load(DATA / "model_v1.h5"), "solr", feature_names=["\ufeffg1", "g2", "g3", "g4"])


@pytest.mark.parametrize("name", ["", " ", "a\x1b[2Jb", " m"])
def test_an_empty_or_unprintable_name_is_refused_not_replaced(tmp_path, capsys, name):
    with pytest.raises(ParameterError, match=re.escape(f"got name {name!r}")):
        render(load(DATA / "model_v1.h5"), "json", name=name)
    out = tmp_path / "m.json"
    assert main(["export", str(DATA / "model_v1.h5"), "--format", "json", "-o", str(out), "--name", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Pass --name ranker, or leave it out for the default" in err
    assert not out.exists()


def test_the_default_name_is_the_output_stem_or_the_library_default(tmp_path):
    for out, expected in ((tmp_path / "ranker.json", "ranker"), (tmp_path / " .json", "streamrank")):
        assert main(["export", str(DATA / "model_v1.h5"), "--format", "json", "-o", str(out), "--quiet"]) == 0
        assert json.loads(out.read_text())["name"] == expected


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755])
def test_an_existing_output_keeps_its_mode(tmp_path, mode):
    out, scores = tmp_path / "m.json", tmp_path / "s.txt"
    for p in (out, scores):
        p.write_text("old\n")
        os.chmod(p, mode)
    assert main(["export", str(DATA / "model_v1.h5"), "--format", "json", "-o", str(out), "--quiet"]) == 0
    assert main(["predict", str(DATA / "model_v2.h5"), str(DATA / "dataset_v2.h5"), "-o", str(scores)]) == 0
    for p in (out, scores):
        assert stat.S_IMODE(p.stat().st_mode) == mode and p.read_text() != "old\n"


def test_a_new_output_takes_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        out = tmp_path / "new.json"
        assert main(["export", str(DATA / "model_v1.h5"), "--format", "json", "-o", str(out), "--quiet"]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


@pytest.mark.parametrize("edit", ["weight", "mean"])
def test_onnx_refuses_a_model_whose_float32_scores_would_be_inf(edit):
    """predict scores it in float64 (1e299 is finite there); the graph's float32 score would be inf."""
    pytest.importorskip("onnx")
    m = load(DATA / "model_v1.h5")
    if edit == "weight":
        m.w = m.w * 1e39
        what = "weight"
    else:
        m.normalizer.mean_ = m.normalizer.mean_ + 1e300
        what = "score of a row of zeros"
    with pytest.raises(ParameterError, match=f"format=onnx scores in float32, and this model's {what} .* passes "
                                             f"float32's range"):
        render(m, "onnx")
    m.w = load(DATA / "model_v1.h5").w * 1e30  # within float32 everywhere: exported
    m.normalizer = load(DATA / "model_v1.h5").normalizer
    assert render(m, "onnx")
