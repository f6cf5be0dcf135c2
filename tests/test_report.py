"""`gpuwatch report weekly` on sample_data: files, golden structure, money to the cent, escaping.

Runs the real command against a real DuckDB store loaded from sample_data (ISO week 2026-W46),
checks the HTML's totals against the chargeback analysis to the cent, compares a text skeleton
of the HTML (headings, tiles, table cells; SVG charts left out) with tests/golden/report/, and
checks that hostile team and namespace names come out escaped while the store is untouched.
"""

from __future__ import annotations

import datetime as dt
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from gpuwatch import cli
from gpuwatch.report import isoweek as weeks
from tests import app_support as support

WEEK = "2026-W46"


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    return support.load_sample(tmp_path_factory.mktemp("report") / "sample.duckdb")


@pytest.fixture(scope="module")
def report(sample_db, tmp_path_factory):
    """The report with no --week: the last complete week of sample_data, which is 2026-W46."""
    out = tmp_path_factory.mktemp("report-out")
    assert cli.main(["report", "weekly", "--db", str(sample_db), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def chargeback(sample_db):
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params

    week = weeks.parse(WEEK)
    con = store.connect(str(sample_db), read_only=True)
    frame = analyses.run(con, "chargeback", **params(week.start, week.end))
    con.close()
    return frame


class Skeleton(HTMLParser):
    """Readable text of a report page: a line per heading, tile, paragraph, table row (cells after |); no SVG/CSS."""

    BLOCKS = ("h1", "h2", "p", "tr", "div", "figcaption", "footer")

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []
        self.buffer: list[str] = []
        self.svg = 0

    def handle_starttag(self, tag, attrs):
        self.svg += tag in ("svg", "style")
        if tag in self.BLOCKS:
            self.flush()
        if tag in ("td", "th"):
            self.buffer.append("|")

    def handle_endtag(self, tag):
        self.svg -= tag in ("svg", "style")
        if tag in self.BLOCKS:
            self.flush()

    def handle_data(self, data):
        if not self.svg:
            self.buffer.append(data)

    def flush(self):
        text = re.sub(r"\s+", " ", "".join(self.buffer)).strip()
        if text:
            self.lines.append(text)
        self.buffer = []


def skeleton(html: str) -> str:
    parser = Skeleton()
    parser.feed(html)
    parser.flush()
    # the version in the footer changes with every release; the rest is data
    return "\n".join(re.sub(r"gpuwatch \S+ from", "gpuwatch VERSION from", line) for line in parser.lines) + "\n"


def tile(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}">([^<]*)<', html)
    assert match, f"no #{element_id} in the page"
    return match.group(1)


def money(value: float) -> str:
    return f"${value:,.2f}"


def test_writes_fleet_team_pages_and_csv(report, chargeback):
    teams = sorted(chargeback.loc[chargeback["kind"] == "team", "team"].unique())
    pages = sorted(p.name for p in report.glob("team-*.html"))
    assert len(pages) == len(teams)
    assert (report / "fleet.html").is_file() and (report / "chargeback.csv").is_file()


def test_fleet_total_equals_chargeback_to_the_cent(report, chargeback):
    html = (report / "fleet.html").read_text()
    assert tile(html, "total-usd") == money(round(chargeback["cost_usd"].sum(), 2))
    assert tile(html, "total-usd") == money(chargeback["fleet_cost_usd"].iloc[0])
    csv = pd.read_csv(report / "chargeback.csv")
    assert round(csv["cost_usd"].sum(), 2) == round(chargeback["cost_usd"].sum(), 2)
    assert len(csv) == len(chargeback)


def test_every_team_page_total_equals_its_chargeback_rows(report, chargeback):
    from gpuwatch.report.weekly import slug

    for team, rows in chargeback[chargeback["kind"] == "team"].groupby("team"):
        html = (report / f"team-{slug(team)}.html").read_text()
        assert tile(html, "total-usd") == money(round(rows["cost_usd"].sum(), 2)), team


def test_spend_table_rows_add_up_to_the_total(report):
    lines = skeleton((report / "fleet.html").read_text()).splitlines()
    start = lines.index("|Team|GPU-hours|This week|Previous week|Change")
    rows, total = [], None
    for line in lines[start + 1:]:
        cells = line.split("|")[1:]
        if cells[0] == "Total":
            total = cells[2]
            break
        rows.append(float(cells[2].strip("$").replace(",", "")))
    assert total is not None and money(round(sum(rows), 2)) == total


def test_chargeback_csv_is_byte_identical_from_a_second_store(report, tmp_path):
    """Same input, same bytes: a second store loaded from the same bundle writes the same chargeback.csv."""
    again = support.load_sample(tmp_path / "again.duckdb")
    assert cli.main(["report", "weekly", "--db", str(again), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "chargeback.csv").read_bytes() == (report / "chargeback.csv").read_bytes()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in report.iterdir())


def test_report_is_self_contained(report):
    for page in report.glob("*.html"):
        html = page.read_text()
        assert "<script" not in html.lower(), page.name  # no JS needed, none shipped
        assert not re.search(r'(src|href)="(https?:)?//', html), page.name  # no external assets
        assert html.count("<svg") >= 1, page.name  # charts are inline SVG


def test_sections_and_empty_reclaim_explained(report):
    html = (report / "fleet.html").read_text()
    for section in ("spend", "waste", "hoarders", "false-util", "mig", "recommendations", "reclaim"):
        assert f'<section id="{section}">' in html
    assert "recorded no decisions this week" in html
    assert "Previous week (2026-W45)" in html and "no data" in html  # sample_data starts in W46


def test_golden_structure_and_numbers(report, golden):
    golden("report/fleet-2026-W46.txt", skeleton((report / "fleet.html").read_text()))
    research = next(report.glob("team-research-*.html"))
    golden("report/team-research-2026-W46.txt", skeleton(research.read_text()))


def test_default_week_is_the_last_complete_one(report):
    assert "ISO week 2026-W46: Mon 2026-11-09 → Sun 2026-11-15" in (report / "fleet.html").read_text()


def test_hostile_names_escaped_store_untouched_reclaim_listed(tmp_path):
    from gpuwatch import store

    db = support.load_hostile(tmp_path / "hostile.duckdb")
    support.add_audit_rows(db, [support.audit_row(), support.audit_row(pod="bob-nb2-0", team=support.EVIL_TEAM)])
    out = tmp_path / "out"
    assert cli.main(["report", "weekly", "--db", str(db), "--week", WEEK, "--out", str(out)]) == 0
    fleet = (out / "fleet.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in fleet
    assert "x&#39;; drop table samples; --" in fleet
    for page in out.glob("*.html"):
        assert "<script>" not in page.read_text(), page.name
    assert any("script" in p.name for p in out.glob("team-*.html"))  # the team got a safe file name
    con = store.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] > 0
    con.close()
    assert "2 decisions (2 would_act) — all dry-run: nothing was changed." in fleet
    assert "alice-nb1-0" in fleet and "bob-nb2-0" in fleet
    evil_page = next(p for p in out.glob("team-script-*.html")).read_text()
    assert "bob-nb2-0" in evil_page and "alice-nb1-0" not in evil_page  # a team sees its own decisions


def test_a_week_without_data_is_refused_and_nothing_is_written(sample_db, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["report", "weekly", "--db", str(sample_db), "--out", str(out), "--week", "2026-W50"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "2026-W50: samples cover 0.0% of the fleet's GPU-hours" in err
    assert "--min-coverage 0.5" in err and not out.exists()


def test_a_thin_week_is_marked_when_allowed(sample_db, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["report", "weekly", "--db", str(sample_db), "--out", str(out), "--week", "2026-W47",
                     "--min-coverage", "0"]) == 0
    assert "thin data: samples cover 0.0%" in capsys.readouterr().out
    html = (out / "fleet.html").read_text()
    assert "Thin data: samples cover only 0.0 %" in html and 'id="coverage"' in html


def test_the_coverage_line_and_the_thresholds_are_on_every_page(report):
    for page in report.glob("*.html"):
        text = skeleton(page.read_text())
        assert "Coverage: samples cover 99.1% of the fleet's GPU-hours (64 GPUs × the week)" in text, page.name
        assert "Thin data" not in text, page.name  # 99.1 % is well covered


def test_chargeback_csv_has_the_period_rates_and_gpu_hours_on_every_row(report, chargeback):
    csv = pd.read_csv(report / "chargeback.csv")
    assert list(csv.columns[:3]) == ["period", "period_start", "period_end"]
    assert set(csv["period"]) == {WEEK} and set(csv["period_start"]) == {"2026-11-09T00:00:00Z"}
    assert set(csv["period_end"]) == {"2026-11-16T00:00:00Z"}
    priced = csv[~csv["kind"].isin(["unpriced", "unpriced_capacity", "over_allocated"])]
    assert (priced["gpu_hours"] > 0).all()  # unallocated and stranded rows too
    # every GPU-hour of the fleet is on exactly one row: 64 GPUs x 168 h
    assert round(priced["gpu_hours"].sum(), 3) == 64 * 168
    rate = priced["cost_usd"] / priced["gpu_hours"]
    assert (abs(priced["usd_per_gpu_hour"] - rate) < 1e-3).all()
    stranded = csv[csv["kind"] == "stranded"].iloc[0]
    assert stranded["usd_per_gpu_hour"] == 4.1  # stranded MIG capacity is on H100s
    prices = pd.read_csv(report / "prices.csv")
    assert set(prices["gpu_model"]) == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}


def test_fleet_and_team_pages_link_each_other(report):
    from gpuwatch.report.weekly import slug

    fleet = (report / "fleet.html").read_text()
    for page in report.glob("team-*.html"):
        assert f'href="{page.name}"' in fleet, page.name
        assert 'href="fleet.html"' in page.read_text(), page.name
    assert "team-research" in fleet and f'href="team-{slug("research")}.html">research</a>' in fleet


@pytest.mark.parametrize(("argv", "message"), [
    (["--week", "2026-W99"], "does not exist"),
    (["--week", "last week"], "not an ISO week"),
    (["--min-coverage", "1.5"], "--min-coverage: '1.5' is not a ratio 0-1"),
])
def test_bad_week_is_refused(sample_db, tmp_path, capsys, argv, message):
    assert cli.main(["report", "weekly", "--db", str(sample_db), "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_missing_db_is_refused(tmp_path, capsys):
    assert cli.main(["report", "weekly", "--db", str(tmp_path / "nope.duckdb"), "--out", str(tmp_path)]) == 2
    assert "no database at" in capsys.readouterr().err


@pytest.mark.parametrize(("first", "last", "expected"), [
    (dt.datetime(2026, 11, 9), dt.datetime(2026, 11, 15, 23, 59), "2026-W46"),   # exactly one week
    (dt.datetime(2026, 11, 9), dt.datetime(2026, 11, 18, 12, 0), "2026-W46"),    # W47 not finished
    (dt.datetime(2026, 11, 10), dt.datetime(2026, 11, 22, 23, 59), "2026-W47"),  # W46 started late
    (dt.datetime(2026, 12, 28), dt.datetime(2027, 1, 3, 23, 59), "2026-W53"),    # ISO year boundary
])
def test_last_complete_week(first, last, expected):
    assert weeks.last_complete(first, last, step_seconds=60).label == expected


def test_no_complete_week():
    assert weeks.last_complete(dt.datetime(2026, 11, 10), dt.datetime(2026, 11, 15), step_seconds=60) is None


def test_spend_by_a_pod_label(sample_db, tmp_path):
    out = tmp_path / "out"
    assert cli.main(["report", "weekly", "--db", str(sample_db), "--out", str(out), "--group-by", "cost_center"]) == 0
    lines = skeleton((out / "fleet.html").read_text()).splitlines()
    start = lines.index("Spend by pod label cost_center")
    rows = {cells[1]: cells[3] for cells in (line.split("|") for line in lines[start + 2:start + 6])}
    assert rows == {"cc-100": "$13,846.90", "cc-200": "$7,662.78", "cc-300": "$7,376.92", "cc-900": "$4,860.41"}
    csv = pd.read_csv(out / "chargeback.csv")
    assert set(csv.loc[csv["kind"] == "team", "group_value"]) == {"cc-100", "cc-200", "cc-300", "cc-900"}
    assert cli.main(["report", "weekly", "--db", str(sample_db), "--out", str(out), "--group-by", "a b"]) == 2
