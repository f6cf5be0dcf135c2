"""The weekly report in a real browser (Debian's Chromium, never a downloaded one): nothing overflows
the page, no chart text is clipped outside its SVG, and a screenshot of each page is kept under
tests/artifacts/ for people to look at. Pages: the fleet, one team, and a 50-team fleet (names long
enough to test the layout)."""

from __future__ import annotations

import os

import pytest

from gpuwatch import cli
from tests import app_support as support
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
# every text node of every chart lies inside its SVG, and the page is no wider than the window
LAYOUT = """() => {
  const doc = document.documentElement;
  const clipped = [];
  for (const svg of document.querySelectorAll('figure svg')) {
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      if (r.width && (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1))
        clipped.push(t.textContent);
    }
  }
  const wide = [...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right > doc.clientWidth + 1).length;
  return {overflow: doc.scrollWidth - doc.clientWidth, clipped, wide, charts: document.querySelectorAll('figure svg').length};
}"""


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def _report(db, out):
    assert cli.main(["report", "weekly", "--db", str(db), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    base = tmp_path_factory.mktemp("report-browser")
    sample = _report(support.load_sample(base / "sample.duckdb"), base / "sample")
    many = _report(support.load_many_teams(base / "many.duckdb", teams=50), base / "many")
    return {"sample": sample, "many": many}


@pytest.mark.parametrize(("which", "page", "width"), [
    ("sample", "fleet.html", 1280), ("sample", "team-research-*.html", 1280), ("sample", "fleet.html", 760),
    ("many", "fleet.html", 1280),
])
def test_report_pages_fit_and_no_chart_text_is_clipped(browser, reports, which, page, width):
    ARTIFACTS.mkdir(exist_ok=True)
    path = next(reports[which].glob(page))
    tab = browser.new_page(viewport={"width": width, "height": 1000})
    tab.goto(path.as_uri())
    tab.wait_for_load_state("load")
    layout = tab.evaluate(LAYOUT)
    name = f"report-{which}-{page.split('-')[0].replace('.html', '')}-{width}.png"
    tab.screenshot(path=str(ARTIFACTS / name), full_page=True)
    assert layout["charts"] >= 1
    assert layout["overflow"] <= 0 and layout["wide"] == 0, layout
    assert not layout["clipped"], layout["clipped"][:10]
