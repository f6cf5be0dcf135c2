"""Charts that hold: every page's charts with 1 pod, 1, 3, 50 and 500 teams, and one selected team.

Two levels. The chart specs, from the real pages under streamlit.testing (AppTest): every category
axis keeps room for its labels (labelLimit) and a count axis never steps by fractions. The pages in
headless Debian Chromium (`gpuwatch app`, Playwright): every chart is drawn and tall enough to read
(at least 24 px per bar on bar charts), and a screenshot of each page in each case is kept under
tests/artifacts/ (charts-<case>-<page>.png) for people to look at.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from streamlit.testing.v1 import AppTest

from tests import app_support as support
from tests.conftest import ROOT
from tests.test_app_browser import ARGS, CHROMIUM, FINISHED, free_port, wait_healthy

SCRIPT = str(ROOT / "app" / "streamlit_app.py")
ARTIFACTS = ROOT / "tests" / "artifacts"
PAGES = ("", "idle_hoarding", "false_utilization", "mig", "chargeback", "recommendations", "gpu")
# FINISHED: Streamlit's status widget ("Running...", "Stop") is gone: a screenshot before that would catch
# a page half-drawn (only its title)
# Streamlit draws a skeleton where an element's code is still loading (the Vega-Lite chart's script, on a
# tab's first page): until it is gone the page's charts are not in the DOM, and "every chart drawn" would
# hold for none
LOADING = "() => document.querySelectorAll('[data-testid=stSkeleton]').length"
CASES = ("one-pod", "1-team", "3-teams", "50-teams", "500-teams")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("charts")
    big = support.simulate(base / "big", gpus=256, days=4)
    return {"one-pod": support.load_one_pod(base / "one.duckdb"),
            "1-team": support.load_many_teams(base / "t1.duckdb", teams=1),
            "3-teams": support.load_many_teams(base / "t3.duckdb", teams=3),
            "50-teams": support.load_many_teams(base / "t50.duckdb", teams=50),
            "500-teams": support.load_many_teams(base / "t500.duckdb", teams=500, source=big)}


def _axes(spec: dict):
    """Every (channel, encoding) of a Vega-Lite spec, layers included."""
    for layer in [spec, *spec.get("layer", [])]:
        for channel, enc in (layer.get("encoding") or {}).items():
            if channel in ("x", "y") and isinstance(enc, dict):
                yield channel, enc


@pytest.mark.parametrize("case", CASES)
def test_chart_specs_keep_their_labels(stores, case, monkeypatch):
    monkeypatch.setenv("GPUWATCH_DB", str(stores[case]))
    at = AppTest.from_file(SCRIPT, default_timeout=120)
    at.run()
    checked = 0
    for page in PAGES:
        if page:
            at.switch_page(f"views/{page}.py")
            at.run()
        assert not at.exception, (case, page, [e.value for e in at.exception])
        for chart in at.get("vega_lite_chart"):
            spec = json.loads(chart.proto.spec)
            bars = str(spec.get("mark", "")).find("bar") >= 0
            if bars and (spec.get("encoding", {}).get("y") or {}).get("type") == "nominal":
                # a fixed step per bar: one bar is never squeezed to a line, 25 never to slivers
                assert isinstance(spec.get("height"), dict) and spec["height"].get("step", 0) >= 20, (case, page)
            for channel, enc in _axes(spec):
                axis = enc.get("axis") or {}
                assert axis is not None and axis.get("labels", True), (case, page, channel)
                if enc.get("type") == "nominal" and channel == "y":
                    assert axis.get("labelLimit", 0) >= 200, (case, page, enc)
                if enc.get("aggregate") == "count" or "count()" in str(enc.get("field", "")):
                    assert axis.get("tickMinStep") == 1, (case, page, enc)
            checked += 1
    assert checked >= 3


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def _serve(db, *extra):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "app", "--db", str(db), "--port", str(port),
                             "--address", "127.0.0.1", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    return proc, url


# every chart drawn: a canvas or svg inside each chart element; then each chart's height
CHARTS = """() => [...document.querySelectorAll('[data-testid=stVegaLiteChart]')].map(c => {
    const drawn = c.querySelector('canvas, svg.marks');
    return {drawn: !!drawn, height: drawn ? drawn.getBoundingClientRect().height : 0}; })"""


@pytest.mark.slow
# 3 teams: in the one-team view; one pod: its specs (test_chart_specs_keep_their_labels) are the edge case
@pytest.mark.parametrize("case", [c for c in CASES if c not in ("3-teams", "one-pod")] + ["one-team-view"])
def test_every_page_draws_readable_charts_in_the_browser(stores, browser, case):
    ARTIFACTS.mkdir(exist_ok=True)
    db = stores["3-teams"] if case == "one-team-view" else stores[case]
    extra = ("--team", support.team_names(3)[0]) if case == "one-team-view" else ()
    proc, url = _serve(db, *extra)
    try:
        tab = browser.new_page(viewport={"width": 1400, "height": 1200})
        pages = [p for p in PAGES if not (extra and p in ("", "mig", "gpu"))]  # a team view has no fleet pages
        for page in pages:
            tab.goto(f"{url}/{page}")
            tab.get_by_role("heading", level=1).first.wait_for(timeout=90_000)
            tab.wait_for_load_state("networkidle")
            tab.wait_for_function(FINISHED, timeout=90_000)  # the page's script has run to its end
            deadline = time.monotonic() + 30
            charts, loading = tab.evaluate(CHARTS), tab.evaluate(LOADING)
            while (loading or not all(c["drawn"] for c in charts)) and time.monotonic() < deadline:
                time.sleep(0.5)
                charts, loading = tab.evaluate(CHARTS), tab.evaluate(LOADING)
            tab.screenshot(path=str(ARTIFACTS / f"charts-{case}-{page or 'fleet'}.png"), full_page=True)
            assert not loading, (case, page, f"{loading} element(s) still loading")
            assert all(c["drawn"] for c in charts), (case, page, charts)
            assert all(c["height"] >= 100 for c in charts), (case, page, charts)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
