"""The app in a real browser: `gpuwatch app` serving sample_data, driven by Debian's Chromium.

Starts the real command (streamlit run, headless) on 127.0.0.1 and a free port, visits every
page with Playwright's Python API and /usr/bin/chromium (never a downloaded browser), checks
the key numbers the analyses compute are on screen, that a team named like a script tag is
shown as text and never runs (no dialog opens), and saves a screenshot of each page under
tests/artifacts/ (gitignored) for people to look at. The store has the hostile names in it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests import app_support as support
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


# every chart on the page has drawn (Vega renders a canvas or an svg once its data is in)
# n charts are shown and every one has drawn its marks (an empty list must not count as drawn; a chart
# in a tab not shown does not draw until the tab is)
DRAWN = """(n) => { const cs = [...document.querySelectorAll('[data-testid=stVegaLiteChart]')]
        .filter(c => c.offsetParent !== null);
    return cs.length >= n && cs.every(c => c.querySelector('canvas, svg.marks')); }"""
# charts each page draws (the Fleet page's three are the ones a screenshot once caught half-drawn)
CHARTS = {"": 3, "idle_hoarding": 0, "false_utilization": 0, "mig": 2, "chargeback": 2,
          "recommendations": 0, "topology": 1, "reclaim_audit": 0}
FINISHED = "() => !document.querySelector('[data-testid=stStatusWidget]')"  # the page's script has finished


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gpuwatch app exited with {proc.returncode}: {proc.stdout.read()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} not healthy after {timeout}s")


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return support.load_hostile(tmp_path_factory.mktemp("browser") / "hostile.duckdb")


@contextlib.contextmanager
def serving(db: Path):
    """`gpuwatch app --db DB` on a free port; yields its URL."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "app", "--db", str(db), "--port", str(port),
                             "--address", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def server(db):
    with serving(db) as url:
        yield url


@pytest.fixture(scope="module")
def expected(db) -> dict[str, str]:
    """Key numbers per page, from the analyses on the same store and the app's default window."""
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params
    from gpuwatch.findings import findings

    con = store.connect(str(db), read_only=True)
    coverage = analyses.run(con, "data_coverage")
    start = coverage.at[0, "first_ts"].to_pydatetime().replace(hour=0, minute=0, second=0)
    end = coverage.at[0, "last_ts"].to_pydatetime().replace(hour=0, minute=0, second=0) + dt.timedelta(days=1)
    p = params(start, end)
    charge = analyses.run(con, "chargeback", **p)
    idle = analyses.run(con, "idle_hoarding", **p).query("hoarder")
    false = analyses.run(con, "false_utilization", **p).query("offender")
    mig = analyses.run(con, "mig_fragmentation", **p)
    placement = findings(con, p, only=("topology_placement",))["topology_placement"]
    con.close()
    flagged = placement[placement["verdict"].isin(["misplaced", "spread"])]
    money = "${:,.2f}".format
    return {"": money(charge["cost_usd"].sum()), "idle_hoarding": money(idle["idle_cost_usd"].sum()),
            "false_utilization": money(false["false_util_cost_usd"].sum()),
            "mig": f"{len(mig)}", "chargeback": money(charge["fleet_cost_usd"].iloc[0]),
            "recommendations": "Monthly savings", "health": "Held idle by stalled gangs",
            "topology": money(flagged["penalty_usd"].sum()),
            "reclaim_audit": "No reclaim decisions in this window"}


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def test_every_page_shows_its_numbers(server, browser, expected):
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    timings = {}
    for path, text in expected.items():
        started = time.monotonic()
        page.goto(f"{server}/{path}")
        page.get_by_text(text, exact=False).first.wait_for(timeout=90_000)
        timings[path or "fleet"] = time.monotonic() - started
        page.wait_for_load_state("networkidle")
        page.wait_for_function(FINISHED, timeout=60_000)
        page.wait_for_function(DRAWN, arg=CHARTS.get(path, 0), timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / f"app-{path or 'fleet'}.png"), full_page=True)
    assert not dialogs, f"a script from the data ran: {dialogs}"
    print("first render (s):", {k: round(v, 2) for k, v in timings.items()})


def test_hostile_team_is_text_in_the_team_filter(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{server}/idle_hoarding")
    page.get_by_text("Hoarding pods").wait_for(timeout=90_000)
    page.locator("[data-testid=stSidebar] [data-testid=stMultiSelect] input").click()
    option = page.get_by_role("option", name=support.EVIL_TEAM, exact=True)
    option.wait_for(timeout=10_000)
    option.click()
    page.keyboard.press("Escape")
    # the filter applied, and the chosen team is shown as its literal text in the sidebar
    page.get_by_text("1 team(s) selected in the sidebar").wait_for(timeout=60_000)
    assert page.locator("[data-testid=stSidebar]").get_by_text(support.EVIL_TEAM).count() >= 1
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(ARTIFACTS / "app-hostile-team.png"), full_page=True)
    assert not dialogs, f"a script from the data ran: {dialogs}"


@pytest.fixture(scope="module")
def topology_server(tmp_path_factory):
    with serving(support.load_topology(tmp_path_factory.mktemp("browser") / "topology.duckdb")) as url:
        yield url


def test_topology_page_draws_the_link_maps_and_capacity(topology_server, browser):
    """The Topology page on a store with topology (two fragmented HGX H100 nodes, a blocked gang, a
    misplaced pod): both nodes' link maps draw, then each tab; a screenshot of each for people to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.goto(f"{topology_server}/topology")
    page.get_by_text("Misplaced or spread jobs").first.wait_for(timeout=90_000)
    page.wait_for_load_state("networkidle")
    page.wait_for_function(FINISHED, timeout=60_000)
    page.wait_for_function(DRAWN, arg=2, timeout=60_000)  # one link map per H100 node
    assert page.get_by_text("Largest free NVLink block: 4 (GPUs 1, 3, 5, 7)").count() == 1
    page.screenshot(path=str(ARTIFACTS / "app-topology-map.png"), full_page=True)
    for tab, charts, shot in (("Schedulable capacity", 1, "capacity"), ("Misplaced jobs", 1, "misplaced"),
                              ("Blocked demand", 0, "blocked")):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_function(FINISHED, timeout=60_000)
        page.wait_for_function(DRAWN, arg=charts, timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / f"app-topology-{shot}.png"), full_page=True)
    assert page.get_by_text("ml/gang-0").count() + page.locator("[data-testid=stDataFrame]").count() >= 1
