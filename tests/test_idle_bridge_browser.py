"""The idle bridge in a real browser: `gpuwatch app` in Debian's Chromium (Playwright, never a downloaded
browser), on a store whose pods all belong to one team and on one with 40 teams. The Idle hoarding page
and the Fleet page show the five steps with the amounts gpuwatch/idle_bridge.py computes from the
analyses, and what a window change does; screenshots under tests/artifacts/ for people to look at.
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests import app_support as support
from tests.test_app_browser import ARTIFACTS, FINISHED, browser, serving  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def _expected(db) -> list[tuple[str, str]]:
    from gpuwatch import analyses, idle_bridge, store
    from gpuwatch.analyses.params import params
    from gpuwatch.findings import findings

    con = store.connect(str(db), read_only=True)
    coverage = analyses.run(con, "data_coverage")
    start = coverage.at[0, "first_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0)
    end = coverage.at[0, "last_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
    frames = findings(con, params(start, end), only=("idle_hoarding", "chargeback"))
    con.close()
    steps = idle_bridge.bridge(frames["idle_hoarding"], chargeback=frames["chargeback"])
    return [(str(r["number"]), r["label"], r["amount"]) for r in steps.rows()]


@pytest.mark.parametrize("teams", [1, 40])
def test_the_bridge_on_the_idle_and_fleet_pages(tmp_path, browser, teams):  # noqa: F811
    db = support.load_many_teams(tmp_path / f"teams-{teams}.duckdb", teams=teams)
    want = _expected(db)
    ARTIFACTS.mkdir(exist_ok=True)
    with serving(db) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        for path, shot in (("idle_hoarding", "idle"), ("", "fleet")):
            page.goto(f"{url}/{path}")
            page.get_by_text("run-rate if given back").first.wait_for(timeout=90_000)
            page.wait_for_load_state("networkidle")
            page.wait_for_function(FINISHED, timeout=60_000)
            table = page.locator("[data-testid=stTable]").first
            rows = table.locator("tbody tr")
            assert rows.count() == 5
            for i, (number, label, amount) in enumerate(want):
                cells = [c.strip() for c in rows.nth(i).locator("th, td").all_inner_texts()]
                assert cells[:2] == [number, label] and amount in cells, (cells, amount)
            assert page.get_by_text("When the window changes").count() >= 1
            table.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"app-bridge-{shot}-{teams}-teams.png"), full_page=path == "idle_hoarding")
