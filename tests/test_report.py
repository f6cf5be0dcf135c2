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
        assert "Coverage: samples cover 99.4% of the fleet's GPU-hours (96 GPUs × the week)" in text, page.name
        assert "Thin data" not in text, page.name  # 99.4 % is well covered


def test_chargeback_csv_has_the_period_rates_and_gpu_hours_on_every_row(report, chargeback):
    csv = pd.read_csv(report / "chargeback.csv")
    assert list(csv.columns[:3]) == ["period", "period_start", "period_end"]
    assert set(csv["period"]) == {WEEK} and set(csv["period_start"]) == {"2026-11-09T00:00:00Z"}
    assert set(csv["period_end"]) == {"2026-11-16T00:00:00Z"}
    priced = csv[~csv["kind"].isin(["unpriced", "unpriced_capacity", "over_allocated"])]
    assert (priced["gpu_hours"] > 0).all()  # unallocated and stranded rows too
    # every GPU-hour of the fleet is on exactly one row: 96 GPUs x 168 h
    assert round(priced["gpu_hours"].sum(), 3) == 96 * 168
    rate = priced["cost_usd"] / priced["gpu_hours"]
    assert (abs(priced["usd_per_gpu_hour"] - rate) < 1e-3).all()
    stranded = csv[csv["kind"] == "stranded"].iloc[0]
    assert stranded["usd_per_gpu_hour"] == 4.1  # stranded MIG capacity is on H100s
    prices = pd.read_csv(report / "prices.csv")
    assert set(prices["gpu_model"]) == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA GB200"}


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
    assert rows == {"cc-100": "$15,294.33", "cc-200": "$8,275.64", "cc-300": "$7,797.16", "cc-900": "$5,611.85"}
    csv = pd.read_csv(out / "chargeback.csv")
    assert set(csv.loc[csv["kind"] == "team", "group_value"]) == {"cc-100", "cc-200", "cc-300", "cc-900"}
    assert cli.main(["report", "weekly", "--db", str(sample_db), "--out", str(out), "--group-by", "a b"]) == 2


# --- Topology section (gpuwatch/report/topology.py): the hand-built frames, then the real command on a
# --- hand-built store with topology (tests/app_support.topology_bundle), then sample_data without its topology.

def test_topology_section_lists_flagged_jobs_and_blocked_pods_costliest_first():
    from gpuwatch.report import topology

    frames = support.topology_frames()
    fleet = topology.section(frames, team=None)
    assert fleet["known"]
    assert [r["subject"] for r in fleet["misplaced"]] == ["ml/train-a-0", "ml/big-job", "ads/rank-1"]
    assert [r["verdict"] for r in fleet["misplaced"]] == ["misplaced", "spread", "misplaced"]
    assert fleet["penalty_usd"] == round(50.84 + 20.99 + 2.16, 2)  # well placed and unknown are never charged
    assert [r["subject"] for r in fleet["blocked"]] == ["ml/gang-0", "ads/pair-0"]  # not 'insufficient capacity'
    assert fleet["opportunity_usd"] == round(82.0 + 6.15, 2)
    assert fleet["blocked"][0]["move"] == "move ml/small-1 (1 GPU) off h100-2"
    assert fleet["blocked"][1]["move"] == "" and fleet["blocked"][1]["gpu_model"] == "any"
    assert [r["gpu_model"] for r in fleet["capacity"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA L40S"]
    ads = topology.section(frames, team="ads")
    assert [r["subject"] for r in ads["misplaced"]] == ["ads/rank-1"] and ads["penalty_usd"] == 2.16
    assert [r["subject"] for r in ads["blocked"]] == ["ads/pair-0"] and ads["capacity"] == []  # capacity: fleet page


def test_topology_capacity_shares_count_the_buckets():
    from gpuwatch.report import topology

    frame = support.topology_frames()["schedulable_capacity"]
    rows = {r["gpu_model"]: r for r in topology.capacity_rows(frame)}
    for model, pool in frame.groupby("gpu_model"):
        for k in (4, 8):
            free = [r for r in pool.to_dict("records") if r["free_gpus"] >= k]
            assert rows[model][f"free_{k}"] == len(free)
            assert rows[model][f"split_{k}"] == sum(r[f"jobs_{k}"] == 0 for r in free) / len(free)
    h100, l40s = rows["NVIDIA H100 80GB HBM3"], rows["NVIDIA L40S"]
    # H100: 5 buckets with 8+ free; 3 of them with no free 8-GPU NVLink block
    assert h100["free_8"] == 5 and h100["nvlink_8"] == 3 / 5 and h100["largest_nvlink_block"] == 8
    # L40S: never an NVLink pair free (a PCIe pool): no NVLink share, rather than "100 % blocked"
    assert l40s["largest_nvlink_block"] == 1 and l40s["nvlink_8"] is None and l40s["split_8"] == 0.0


def test_topology_section_says_unknown_without_topology():
    from gpuwatch.report import topology

    frames = support.topology_frames()
    placement, capacity = frames["topology_placement"], frames["schedulable_capacity"]
    unknown = {"topology_placement": placement.assign(verdict="topology unknown", worst_link=None),
               "schedulable_capacity": capacity.assign(topology_known_gpus=0, largest_nvlink_block=None),
               "blocked_demand": frames["blocked_demand"]}
    section = topology.section(unknown, team=None)
    assert not section["known"] and section["misplaced"] == [] and section["capacity"] == []
    assert section["unjudged"] == len(placement)
    assert section["unknown_text"].startswith("topology unknown — the exporter's gpuwatch_gpu_link_info series")
    assert len(section["blocked"]) == 2  # waiting pods are facts of the pod status, shown either way
    assert not topology.section({}, team=None)["known"]


@pytest.fixture(scope="module")
def topology_report(tmp_path_factory):
    """The real command on the hand-built topology store (one day of W46: a thin week, allowed)."""
    db = support.load_topology(tmp_path_factory.mktemp("topology") / "topology.duckdb")
    out = tmp_path_factory.mktemp("topology-out")
    assert cli.main(["report", "weekly", "--db", str(db), "--out", str(out), "--week", WEEK,
                     "--min-coverage", "0"]) == 0
    return db, out


def topology_findings(db) -> dict:
    from gpuwatch import store
    from gpuwatch.analyses.params import params
    from gpuwatch.findings import TOPOLOGY, findings

    week = weeks.parse(WEEK)
    con = store.connect(str(db), read_only=True)
    frames = findings(con, params(week.start, week.end), only=TOPOLOGY)
    con.close()
    return frames


def section_lines(html: str, heading: str) -> list[str]:
    lines = skeleton(html).splitlines()
    start = lines.index(heading)
    end = next(i for i in range(start + 1, len(lines)) if lines[i] in ("Blocked demand", "Schedulable capacity",
                                                                          "MIG fragmentation"))
    return lines[start + 1:end]


def test_topology_report_equals_the_findings(topology_report):
    db, out = topology_report
    frames = topology_findings(db)
    placement, blocked = frames["topology_placement"], frames["blocked_demand"]
    flagged = placement[placement["verdict"].isin(["misplaced", "spread"])]
    waiting = blocked[blocked["verdict"] == "blocked"]
    fleet = (out / "fleet.html").read_text()
    assert tile(fleet, "placement-penalty-usd") == money(round(flagged["penalty_usd"].sum(), 2))
    assert tile(fleet, "blocked-opportunity-usd") == money(round(waiting["opportunity_usd"].sum(), 2))
    rows = [line.split("|")[1:] for line in section_lines(fleet, "Misplaced and spread jobs")[2:]]
    assert [r[0] for r in rows] == [f"{r.namespace}/{r.pod}" for r in flagged.itertuples()] == ["ml/train-a-0"]
    assert rows[0][5:7] == ["SYS", "PIX (GPUs 0,1)"]
    gang = [line.split("|")[1:] for line in section_lines(fleet, "Blocked demand")[2:]]
    assert [r[0] for r in gang] == ["ml/gang-0"] and gang[0][2] == "8"
    assert gang[0][8].startswith("move ads/small-") and "(4 GPUs) off h100-" in gang[0][8]
    assert "is the estimated penalty" in skeleton(fleet) and "opportunity cost (requested GPUs" in skeleton(fleet)
    assert tile(fleet, "total-usd") == money(round(topology_chargeback(db)["cost_usd"].sum(), 2))  # not added in


def topology_chargeback(db):
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params

    week = weeks.parse(WEEK)
    con = store.connect(str(db), read_only=True)
    frame = analyses.run(con, "chargeback", **params(week.start, week.end))
    con.close()
    return frame


def test_topology_report_capacity_summary_per_pool(topology_report):
    db, out = topology_report
    capacity = topology_findings(db)["schedulable_capacity"]
    lines = skeleton((out / "fleet.html").read_text()).splitlines()
    start = lines.index("Schedulable capacity")
    rows = {cells[1]: cells[2:] for cells in (line.split("|") for line in lines[start + 3:start + 5])}
    h100 = capacity[(capacity["gpu_model"] == support.H100) & (capacity["free_gpus"] >= 8)]
    share = (h100["jobs_8"] == 0).sum() / len(h100)
    assert rows[support.H100][6] == f"{100 * share:.1f} %"
    assert rows[support.L40S][5] == rows[support.L40S][7] == "" and rows[support.L40S][3] == "1"  # no NVLink pair free


def test_topology_team_pages_show_their_own_rows(topology_report):
    from gpuwatch.report.weekly import slug

    _, out = topology_report
    research = (out / f"team-{slug('research')}.html").read_text()
    ads = (out / f"team-{slug('ads')}.html").read_text()
    assert "ml/train-a-0" in research and "ml/gang-0" in research and "Schedulable capacity" not in research
    assert "No misplaced or spread multi-GPU jobs this week for this team" in ads
    assert "No pending pod waited for a block this week for this team." in ads


def test_topology_unknown_without_the_topology_file(tmp_path):
    db = support.load_without_topology(tmp_path / "no-topology.duckdb")
    out = tmp_path / "out"
    assert cli.main(["report", "weekly", "--db", str(db), "--out", str(out), "--week", WEEK]) == 0
    for page in out.glob("*.html"):
        html = page.read_text()
        assert '<section id="topology">' in html, page.name
        assert "Topology unknown — the exporter&#39;s gpuwatch_gpu_link_info series or a topology bundle file is " \
               "needed" in html, page.name
        assert 'id="capacity-table"' not in html, page.name  # no block counted
        rows = section_lines(html, "Misplaced and spread jobs")
        verdicts = {line.split("|")[3 if "fleet" in page.name else 2] for line in rows[2:]}
        assert verdicts <= {"spread"}, (page.name, verdicts)  # nodes spanned need no links; nothing else judged
        if rows[0].startswith("Multi-GPU jobs placed"):
            assert "could not be judged: topology unknown" in rows[0], page.name
