"""streamrank report: a self-contained page of a grid or cv run, checked by parsing it and by
rendering it in a real headless browser (Debian's chromium; CI installs it and sets
STREAMRANK_REQUIRE_BROWSER=1, so the browser test cannot skip there)."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from small_data import small_pair
from streamrank.cli import main
from streamrank.errors import InputError, ParameterError
from streamrank.synthetic import write_hdf5
from streamrank.workflow.cv import run_cv
from streamrank.workflow.grid import run_grid
from streamrank.workflow.report import write_report

pytest.importorskip("matplotlib")
SETTINGS = {"tol": 1e-3, "normalize": "zscore", "seed": 0, "kernel": "rbf",
            "pair_cost": "none"}  # one configuration per method (not the default search of two)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("report-runs")
    ds, valid = small_pair(tmp_path_factory, "report-data", 0.2)
    with ds, valid:
        run_grid(ds, valid, d / "grid", axes={"method": ["primal", "nystroem"], "components": [20],
                                              "gamma": [2.0 ** -5, 2.0 ** -3], "C": [0.25, 1.0, 4.0]},
                 settings=SETTINGS)
    for k in (1, 2):
        (d / "folds" / f"Fold{k}").mkdir(parents=True)
        for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
            write_hdf5(d / "folds" / f"Fold{k}" / f"{name}.h5", "small", seed=20 + k, part=part, scale=0.15)
    run_cv(d / "folds", d / "cv", methods=["primal", "nystroem"], axes={"C": [0.25, 1.0], "components": [20],
                                                                        "gamma": [2.0 ** -5, 2.0 ** -3]},
           settings=SETTINGS)
    return d


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.tables, self.links = [], 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a)
        elif tag == "table":
            self.tables += 1
        for k in ("src", "href"):
            if k in a and not a[k].startswith("data:"):
                self.links.append(a[k])


def parse(path):
    p = Page()
    p.feed(path.read_text())
    return p


@pytest.mark.parametrize("kind, plots", [
    ("grid", {"convergence", "heatmap", "query distribution"}),
    ("cv", {"fold comparison", "query distribution", "Fold1, primal: convergence", "Fold1, nystroem: heatmap"}),
])
def test_the_page_holds_settings_tables_and_inlined_plots(runs, tmp_path, kind, plots):
    out = tmp_path / "report.html"
    n = write_report(runs / kind, out, png_dir=tmp_path / "png")
    page = parse(out)
    assert not page.links, f"the page must need no other file or network: {page.links}"
    assert page.tables >= 3
    alts = {img["alt"] for img in page.images}
    assert plots <= alts, alts
    assert n == len(page.images) == len(list((tmp_path / "png").glob("*.png")))
    for img in page.images:
        png = base64.b64decode(img["src"].split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
    text = out.read_text()
    assert "Settings" in text and "content sha256" in text and ("streamrank cv" in text or kind == "grid")


def test_the_command_and_its_refusals(runs, tmp_path, capfd, monkeypatch):
    assert main(["report", str(runs / "grid"), "-o", str(tmp_path / "r.html")]) == 0
    assert "3 plot(s)" in capfd.readouterr().out
    assert main(["report", str(runs / "cv"), "-o", "-", "--no-plots"]) == 0
    assert capfd.readouterr().out.lstrip().startswith("<!DOCTYPE html>")
    with pytest.raises(InputError, match="no finished grid or cv run"):
        write_report(tmp_path, tmp_path / "x.html")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)   # as if matplotlib were not installed
    with pytest.raises(ParameterError, match=re.escape("pip install 'streamrank[plot]'")):
        write_report(runs / "grid", tmp_path / "y.html")
    assert not (tmp_path / "y.html").exists()


BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
# run in the page once it has loaded: every image decoded with a size, and the tables counted
CHECK = """<script>window.addEventListener('load', () => {
  const imgs = [...document.images];
  const r = {images: imgs.length, loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
             tables: document.querySelectorAll('table').length,
             rows: document.querySelectorAll('tbody tr').length};
  const pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
});</script>"""


@pytest.mark.skipif(not BROWSER and os.environ.get("STREAMRANK_REQUIRE_BROWSER") != "1",
                    reason="chromium is not installed (CI installs it: .ci/run)")
@pytest.mark.parametrize("kind", ["grid", "cv"])
def test_a_real_browser_loads_every_image_and_table(runs, tmp_path, kind):
    assert BROWSER, "STREAMRANK_REQUIRE_BROWSER=1 but chromium is not installed"
    out = tmp_path / "report.html"
    write_report(runs / kind, out)
    expected = parse(out)
    probe = tmp_path / "probe.html"
    probe.write_text(out.read_text().replace("</body>", CHECK + "</body>"))
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--host-resolver-rules=MAP * ~NOTFOUND",          # no network: the page must not need it
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="check">(.*?)</pre>', r.stdout)
    assert m, f"the browser printed no result (rc {r.returncode}):\n{r.stderr[-2000:]}"
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["images"] == len(expected.images) >= 3
    assert got["loaded"] == got["images"], got
    assert got["tables"] == expected.tables and got["rows"] > 5
