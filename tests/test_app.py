"""The Streamlit app, page by page, with streamlit.testing.v1.AppTest on real DuckDB stores.

Every page renders on sample_data and shows the numbers the analyses compute (read back through
gpuwatch.analyses on the same store); the global team filter narrows tables; an empty store, a
missing path and a file that is not a database each get a clear message; a team named like a
script tag and a namespace full of SQL metacharacters come out as plain text. No fakes.
"""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests import app_support as support
from tests.conftest import ROOT

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

SCRIPT = str(ROOT / "app" / "streamlit_app.py")
PAGES = ("fleet", "idle_hoarding", "false_utilization", "mig", "chargeback", "recommendations", "health", "topology", "gpu",
         "reclaim_audit")


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    return support.load_sample(tmp_path_factory.mktemp("app") / "sample.duckdb")


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory):
    """sample_data with hostile names, plus two reclaim decisions as the controller writes them."""
    db = support.load_hostile(tmp_path_factory.mktemp("app") / "hostile.duckdb")
    support.add_audit_rows(db, [support.audit_row(), support.audit_row(pod="bob-nb2-0", decision="acted",
                                                                        dry_run=False, result="ok")])
    return db


@pytest.fixture(scope="module")
def window(sample_db):
    """The app's default window (whole days of data) and the analyses' parameters for it."""
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params

    con = store.connect(str(sample_db), read_only=True)
    coverage = analyses.run(con, "data_coverage")
    start = coverage.at[0, "first_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0)
    end = coverage.at[0, "last_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
    yield con, params(start, end)
    con.close()


def open_page(db, page: str, monkeypatch) -> AppTest:
    monkeypatch.setenv("GPUWATCH_DB", str(db))
    at = AppTest.from_file(SCRIPT, default_timeout=120)
    at.run()
    if page != "fleet":
        at.switch_page(f"views/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at: AppTest, label: str) -> str:
    found = [m.value for m in at.metric if m.label == label]
    assert found, f"no metric {label!r}; have {[m.label for m in at.metric]}"
    return found[0]


def column(frame, name: str):
    """A table's column by its data name or its friendly header (key columns carry one: team -> Team)."""
    return frame[name] if name in frame.columns else frame[name.replace("_", " ").capitalize()]


def money(value: float) -> str:
    return f"${value:,.2f}"


def test_fleet_page_tiles_equal_the_chart_totals_and_the_other_pages(sample_db, window, monkeypatch):
    from gpuwatch import analyses
    from gpuwatch.findings import findings

    con, params = window
    frame = analyses.run(con, "fleet_timeseries", bucket_seconds=3600, **params)
    totals = frame[frame["scope"] == "window"].iloc[0]
    buckets = frame[frame["scope"] == "bucket"]
    assert abs(buckets["cost_usd"].sum() - totals["cost_usd"]) < 0.01  # the series adds up to the window
    charge = findings(con, params, only=("chargeback",))["chargeback"]
    fleet = charge["fleet_cost_usd"].iloc[0]
    # the cost chart's parts (busy, idle, unallocated, not sampled) add up to the Fleet cost tile
    parts = buckets[["busy_cost_usd", "idle_cost_usd", "unallocated_cost_usd", "not_sampled_cost_usd"]].to_numpy().sum()
    assert round(parts, 2) == round(buckets["fleet_cost_usd"].sum(), 2) == fleet
    assert totals["fleet_gpus"] == 96 and totals["gpus"] < 96  # GPUs in the fleet vs sampled on average
    at = open_page(sample_db, "fleet", monkeypatch)
    assert metric(at, "Fleet cost") == money(fleet)
    assert metric(at, "GPUs") == "96"
    teams = charge[charge["kind"] == "team"]
    assert metric(at, "Idle (all pods)") == money(teams["idle_usd"].sum())
    assert metric(at, "Unallocated") == money(charge.loc[charge["kind"] == "unallocated", "cost_usd"].sum())
    assert metric(at, "Reported util") == f"{totals['reported_util']:.1%}"
    assert totals["reported_util"] > totals["effective_util"]  # the gap the page draws exists
    assert len(at.get("vega_lite_chart")) == 3
    top_teams, top_actions = at.dataframe[0].value, at.dataframe[1].value
    waste = (teams["idle_usd"] + teams["false_util_usd"]).groupby(teams["team"]).sum().nlargest(5)
    assert list(top_teams["Team"]) == list(waste.index)
    assert list(top_actions.columns) == ["Saves / month", "Team", "Action"] and len(top_actions) == 5
    # the same idle figure on the Idle page, under the same label
    idle_page = open_page(sample_db, "idle_hoarding", monkeypatch)
    assert metric(idle_page, "Idle (all pods)") == metric(at, "Idle (all pods)")


def test_fleet_page_follows_the_team_filter(sample_db, window, monkeypatch):
    from gpuwatch.findings import findings

    con, params = window
    charge = findings(con, params, only=("chargeback",))["chargeback"]
    research = charge[(charge["kind"] == "team") & (charge["team"] == "research")]
    at = open_page(sample_db, "fleet", monkeypatch)
    at.sidebar.multiselect(key="gw_teams").set_value(["research"]).run()
    assert not at.exception
    assert metric(at, "Selected teams' cost") == money(research["cost_usd"].sum())
    assert metric(at, "Idle (all pods)") == money(research["idle_usd"].sum())
    assert set(at.dataframe[1].value["Team"]) <= {"research"}


def test_idle_page_lists_the_hoarders(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    hoarders = analyses.run(con, "idle_hoarding", **params).query("hoarder")
    at = open_page(sample_db, "idle_hoarding", monkeypatch)
    assert metric(at, "Hoarding pods") == str(len(hoarders))
    assert metric(at, "Idle (hoarders)") == money(hoarders["idle_cost_usd"].sum())


def test_team_filter_narrows_every_table(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    hoarders = analyses.run(con, "idle_hoarding", **params).query("hoarder")
    team = hoarders.groupby("team")["idle_cost_usd"].sum().idxmax()
    at = open_page(sample_db, "idle_hoarding", monkeypatch)
    at.sidebar.multiselect(key="gw_teams").set_value([team]).run()
    assert set(column(at.dataframe[0].value, "team")) == {team}
    assert metric(at, "Idle (hoarders)") == money(hoarders.loc[hoarders["team"] == team, "idle_cost_usd"].sum())


def test_false_utilization_page_shows_offenders_and_a_pod_series(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    offenders = analyses.run(con, "false_utilization", **params).query("offender")
    at = open_page(sample_db, "false_utilization", monkeypatch)
    assert metric(at, "Offending pods") == str(len(offenders))
    assert metric(at, "False-util cost") == money(offenders["false_util_cost_usd"].sum())
    worst = offenders.sort_values("false_util_cost_usd", ascending=False).iloc[0]
    series = analyses.run(con, "pod_timeseries", namespace=worst["namespace"], pod=worst["pod"],
                          bucket_seconds=600, **params)
    shown = at.dataframe[1].value  # the per-pod series of the top offender, selected by default
    # every header is a readable one (ui.header), never the column's snake_case name
    assert len(shown) == len(series) and shown["Reported utilization"].mean() > shown["Effective utilization"].mean()
    assert not [c for c in shown.columns if "_" in c]


def test_mig_page_maps_every_slice(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    frag = analyses.run(con, "mig_fragmentation", **params)
    layout = analyses.run(con, "mig_layout", **params)
    at = open_page(sample_db, "mig", monkeypatch)
    assert metric(at, "MIG GPUs") == str(len(frag))
    assert metric(at, "Stranded slices") == f"{int(frag['stranded_slices'].sum())} of {8 * len(frag)}"
    # the repack's moves name the pod, the GPU (node and index, not a UUID) and the slices, from -> to
    moves = at.dataframe[0].value
    moved = layout[(layout["layout"] == "repack") & layout["moved_from"].notna()].drop_duplicates(["gpu_uuid", "instance"])
    assert len(moves) == len(moved) == int(frag["repack_moves"].sum())
    assert set(moves["Pod (namespace/pod)"]) == set(moved["namespace"] + "/" + moved["pod"])
    assert all(g.startswith("gpu-node-002 · GPU ") for g in moves["GPU"])
    assert "slices 0–3 → slices 4–7" in set(moves["Memory slices"])
    assert metric(at, "Stranded cost") == money(analyses.run(con, "chargeback", **params)
                                                .query("kind == 'stranded'")["cost_usd"].sum())
    now = layout[layout["layout"] == "current"]
    assert len(now) == 8 * len(frag)  # every slice of every MIG GPU is on the map
    # the map's stranded cells are exactly the fragmentation analysis' counts
    per_gpu = now[now["state"] == "stranded"].groupby("gpu_uuid").size()
    for _, row in frag.iterrows():
        assert per_gpu.get(row["gpu_uuid"], 0) == row["stranded_slices"]


def test_chargeback_page_totals_match_the_analysis(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    charge = analyses.run(con, "chargeback", **params)
    at = open_page(sample_db, "chargeback", monkeypatch)
    assert metric(at, "Fleet cost") == money(round(charge["cost_usd"].sum(), 2))
    teams = charge[charge["kind"] == "team"]
    assert metric(at, "Teams' cost") == money(teams["cost_usd"].sum())
    assert metric(at, "Stranded MIG") == money(charge.loc[charge["kind"] == "stranded", "cost_usd"].sum())
    subtotals, table = at.dataframe[0].value, at.dataframe[1].value
    assert list(subtotals["Team"]) == list(teams.groupby("team")["cost_usd"].sum().sort_values(ascending=False).index)
    assert len(table) == len(teams) and abs(table["Cost"].sum() - teams["cost_usd"].sum()) < 0.005


def test_chargeback_groups_by_any_pod_label(sample_db, window, monkeypatch):
    """sample_data's pods carry a cost_center label (nlp and research share cc-100): the same dollars by it."""
    from gpuwatch import analyses

    con, params = window
    assert set(analyses.run(con, "pod_labels")["label"]) == {"cost_center", "team"}
    plain = analyses.run(con, "chargeback", **params)
    grouped = analyses.run(con, "chargeback", **{**params, "group_by": "cost_center"})
    teams = grouped[grouped["kind"] == "team"]
    by_team = plain[plain["kind"] == "team"].groupby("team")["cost_usd"].sum()
    by_center = teams.groupby("group_value")["cost_usd"].sum()
    assert round(by_center["cc-100"], 2) == round(by_team["nlp"] + by_team["research"], 2)
    assert round(grouped["cost_usd"].sum(), 2) == round(plain["cost_usd"].sum(), 2)  # the same money
    at = open_page(sample_db, "chargeback", monkeypatch)
    at.selectbox(key="charge_group").set_value("label:cost_center").run()
    assert not at.exception
    subtotals = at.dataframe[0].value
    assert dict(zip(subtotals["cost_center"], subtotals["Cost"].round(2), strict=True)) == by_center.round(2).to_dict()


def test_chargeback_page_warns_about_unpriced_gpus(tmp_path, monkeypatch):
    """GPU-hours on a model without a price are a warning and a problems table, never $0 in a team."""
    db = support.load_unpriced(tmp_path / "unpriced.duckdb")
    at = open_page(db, "chargeback", monkeypatch)
    warnings = [w.value for w in at.warning]
    assert any("no price" in w for w in warnings) and any("outside the fleet cost" in w for w in warnings)
    problems = at.dataframe[-1].value
    assert set(problems["Kind"]) >= {"unpriced", "unpriced_capacity"} and "Cost" not in problems
    assert (at.dataframe[1].value["Cost"] > 0).all()  # the teams' rows: priced rows only


def test_recommendations_page_totals_savings(sample_db, window, monkeypatch):
    from gpuwatch.findings import findings
    from gpuwatch.recommendations import totals

    con, params = window
    recs = findings(con, params, only=("recommendations",))["recommendations"]
    assert len(recs) > 0
    at = open_page(sample_db, "recommendations", monkeypatch)
    assert metric(at, "Monthly savings") == money(totals(recs)["savings"])
    assert metric(at, "Investigate: at stake / month") == money(totals(recs)["at_stake"])
    shown = at.dataframe[0].value
    assert list(shown.columns[:5]) == ["Action", "Team", "Monthly savings", "Monthly waste", "Evidence"]
    assert [b.label for b in at.get("download_button")] == ["Download recommendations.csv"]


def test_reclaim_audit_explains_an_empty_log(sample_db, monkeypatch):
    at = open_page(sample_db, "reclaim_audit", monkeypatch)
    assert any("No reclaim decisions" in i.value for i in at.info)


def test_reclaim_audit_shows_the_controllers_decisions(hostile_db, monkeypatch):
    at = open_page(hostile_db, "reclaim_audit", monkeypatch)
    assert metric(at, "Decisions") == "2"
    assert metric(at, "Acted") == "1"
    assert set(column(at.dataframe[0].value, "pod")) == {"alice-nb1-0", "bob-nb2-0"}


def test_missing_database_is_explained(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUWATCH_DB", str(tmp_path / "nope.duckdb"))
    at = AppTest.from_file(SCRIPT, default_timeout=60).run()
    assert not at.exception
    assert any("No database at" in e.value and "gpuwatch ingest" in e.value for e in at.error)


def test_empty_database_is_explained(tmp_path, monkeypatch):
    from gpuwatch import store

    store.connect(str(tmp_path / "empty.duckdb")).close()
    monkeypatch.setenv("GPUWATCH_DB", str(tmp_path / "empty.duckdb"))
    at = AppTest.from_file(SCRIPT, default_timeout=60).run()
    assert not at.exception
    assert any("holds no GPU samples" in w.value for w in at.warning)


def test_not_a_database_is_explained(tmp_path, monkeypatch):
    junk = tmp_path / "junk.duckdb"
    junk.write_text("this is not a database")
    monkeypatch.setenv("GPUWATCH_DB", str(junk))
    at = AppTest.from_file(SCRIPT, default_timeout=60).run()
    assert not at.exception
    assert any("not a readable gpuwatch database" in e.value for e in at.error)




@pytest.mark.parametrize("page", ["idle_hoarding", "chargeback"])
def test_hostile_names_render_as_text(hostile_db, page, monkeypatch):
    at = open_page(hostile_db, page, monkeypatch)
    rows = next(d.value for d in at.dataframe if {"namespace", "Namespace"} & set(d.value.columns))
    assert support.EVIL_NAMESPACE in set(column(rows, "namespace"))
    at.sidebar.multiselect(key="gw_teams").set_value([support.EVIL_TEAM]).run()
    assert not at.exception
    assert set(column(at.dataframe[0].value, "team")) == {support.EVIL_TEAM}
    # nothing from the data reaches markdown (where HTML could be interpreted)
    for element in (*at.markdown, *at.caption):
        assert "<script>" not in element.value


def test_app_command_runs_streamlit_headless_without_telemetry(tmp_path):
    import argparse

    from gpuwatch import app_command

    db = tmp_path / "a dir; rm -rf ~" / "$(x).duckdb"  # passed as one argv element, never through a shell
    argv = app_command.command(argparse.Namespace(db=str(db), port=8600, address="127.0.0.1"))
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4].endswith("app/streamlit_app.py")
    flags = dict(zip(argv[5:argv.index("--")][::2], argv[5:argv.index("--")][1::2], strict=True))
    assert flags["--server.headless"] == "true" and flags["--browser.gatherUsageStats"] == "false"
    assert flags["--server.port"] == "8600" and flags["--server.address"] == "127.0.0.1"
    assert argv[argv.index("--") + 1:] == ["--db", str(db)]


def test_app_command_refuses_a_missing_db(tmp_path, capsys):
    from gpuwatch import cli

    assert cli.main(["app", "--db", str(tmp_path / "nope.duckdb")]) == 2
    assert "no database at" in capsys.readouterr().err


# --- the team view (`gpuwatch app --team T`, or per request from a proxy's header) -----------------

def test_a_team_view_shows_only_that_teams_rows_and_pages(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    hoarders = analyses.run(con, "idle_hoarding", **params).query("hoarder")
    team = hoarders.groupby("team")["idle_cost_usd"].sum().idxmax()
    monkeypatch.setenv("GPUWATCH_APP_TEAMS", team)
    monkeypatch.setenv("GPUWATCH_DB", str(sample_db))
    at = AppTest.from_file(SCRIPT, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Idle hoarding"  # Fleet is fleet-wide: not the first page of a team view
    assert at.sidebar.multiselect(key="gw_teams").options == [team]
    assert set(column(at.dataframe[0].value, "team")) == {team}
    assert metric(at, "Idle (hoarders)") == money(hoarders.loc[hoarders["team"] == team, "idle_cost_usd"].sum())
    at.switch_page("views/chargeback.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    labels = [m.label for m in at.metric]
    assert "Fleet cost" not in labels and "Unallocated" not in labels
    assert set(column(at.dataframe[0].value, "team")) == {team}
    assert all(b.label != "Download chargeback.csv (all rows, as in the weekly report)" for b in at.get("download_button"))


def test_a_team_view_from_a_proxy_header_fails_closed():
    import sys

    sys.path.insert(0, str(ROOT / "app"))
    import ui

    argv = ["--db", "x.duckdb", "--teams-header", "X-Forwarded-Groups"]
    assert ui.scope(argv, {"X-Forwarded-Groups": "nlp, vision,nlp"}) == ("nlp", "vision")
    assert ui.scope(argv, {}) == ()  # no header: no team, never the whole fleet
    assert ui.scope(argv, {"X-Forwarded-Groups": " , "}) == ()
    assert ui.scope(["--db", "x", "--team", "b", "--team", "a"]) == ("a", "b")
    assert ui.scope(["--db", "x"]) is None


@pytest.mark.parametrize(("flags", "message"), [
    (["--teams-header", "X-Forwarded-Groups", "--address", "0.0.0.0"], "--teams-header needs --address 127.0.0.1"),
    (["--team", "a", "--teams-header", "X-Forwarded-Groups"], "pick one"),
    (["--team", "a,b"], "one team name per flag"),
])
def test_app_team_flags_are_checked(tmp_path, capsys, flags, message):
    from gpuwatch import cli

    db = support.load_sample(tmp_path / "s.duckdb")
    assert cli.main(["app", "--db", str(db), *flags]) == 2
    assert message in capsys.readouterr().err


def test_app_command_passes_the_team_view_on():
    import argparse

    from gpuwatch import app_command

    argv = app_command.command(argparse.Namespace(db="x.duckdb", port=8600, address="127.0.0.1", team=["a", "b"],
                                                  teams_header=None))
    assert argv[argv.index("--") + 1:] == ["--db", os.path.abspath("x.duckdb"), "--team=a", "--team=b"]


@pytest.mark.parametrize(("preset", "start", "end"), [
    ("Last 24 hours", "2026-11-15 00:00", "2026-11-16 00:00"),
    ("Last 7 days", "2026-11-09 00:00", "2026-11-16 00:00"),
    ("Last 30 days", "2026-11-09 00:00", "2026-11-16 00:00"),  # the data starts on the 9th: not billed before
    ("Month to date", "2026-11-09 00:00", "2026-11-16 00:00"),
])
def test_time_presets_are_relative_to_the_data_and_never_before_it(preset, start, end):
    from app import ui

    first, last = dt.datetime(2026, 11, 9, 0, 0), dt.datetime(2026, 11, 15, 23, 59)
    assert ui.preset_window(preset, first, last) == (dt.datetime.fromisoformat(start), dt.datetime.fromisoformat(end))


def test_the_last_24_hours_preset_prices_one_day(sample_db, monkeypatch):
    at = open_page(sample_db, "fleet", monkeypatch)
    at.sidebar.selectbox(key="gw_preset").set_value("Last 24 hours").run()
    assert not at.exception
    assert metric(at, "Fleet cost") == money(62092.80 / 7)  # sample_data/README.md's fleet cost, one day of seven


def test_gpu_drill_down_shows_one_gpus_signals_and_holders(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    gpus = analyses.run(con, "gpus")
    assert len(gpus) == 96 and gpus["gpu_index"].notna().all()
    mig = gpus[gpus["mig"]].iloc[0]
    series = analyses.run(con, "gpu_timeseries", node=mig["node"], gpu_uuid=mig["gpu_uuid"], bucket_seconds=3600,
                          **params)
    at = open_page(sample_db, "gpu", monkeypatch)
    at.selectbox(key="gpu_node").set_value(mig["node"]).run()
    at.selectbox(key="gpu_uuid").set_value(mig["gpu_uuid"]).run()
    assert not at.exception
    assert metric(at, "MIG") == f"{int(mig['instances'])} instance(s)"
    assert metric(at, "Reported util (mean)") == f"{series['reported_util'].mean():.1%}"
    held = at.dataframe[0].value
    expected = set(", ".join(series["holders"].dropna()).split(", ")) - {""}
    assert set(held["Pod (namespace/pod)"]) == expected and len(expected) > 1
    assert len(at.get("vega_lite_chart")) == 3


def test_chargeback_groups_by_cluster_in_a_multi_cluster_store(tmp_path, monkeypatch):
    from gpuwatch import cli
    from tests.support.bundles import other_gpus

    db = tmp_path / "two.duckdb"
    copy = other_gpus(support.sample_bundle(), tmp_path / "prod-b", tag="b")  # one GPU UUID is one GPU
    for name, bundle in (("prod-a", support.sample_bundle()), ("prod-b", copy)):
        assert cli.main(["ingest", "--from", str(bundle), "--cluster", name, "--db", str(db)]) == 0
    at = open_page(db, "chargeback", monkeypatch)
    at.selectbox(key="charge_group").set_value("cluster").run()
    assert not at.exception
    subtotals = at.dataframe[0].value
    assert list(subtotals["Cluster"]) in (["prod-a", "prod-b"], ["prod-b", "prod-a"])
    assert subtotals["Cost"].iloc[0] == pytest.approx(subtotals["Cost"].iloc[1], abs=0.05)  # cents rounding


def test_health_page_tiles_are_the_failure_findings(sample_db, window, monkeypatch):
    from gpuwatch import analyses

    con, params = window
    at = open_page(sample_db, "health", monkeypatch)
    mismatch = analyses.run(con, "mig_mismatch", **params)
    orphaned = analyses.run(con, "orphaned_memory", **params)
    drift = analyses.run(con, "driver_drift", **params)
    stalls = analyses.run(con, "gang_stall", **params)
    unhealthy = analyses.run(con, "unhealthy_gpu", **params)
    small = mismatch[mismatch["cause"] == "gpu_memory"]  # runs at the device's memory limit, not host OOMKills
    assert metric(at, "Burnt by too-small slices") == money(small["usd_burnt"].sum()) != "$0.00"
    assert metric(at, "Memory held by no pod") == money(orphaned["usd_unusable"].sum()) != "$0.00"
    assert metric(at, "Lost to driver drift") == money(drift.loc[drift["blamed"].astype(bool), "usd_lost"].sum())
    assert metric(at, "Held idle by stalled gangs") == money(
        stalls.loc[stalls["kind"] == "partial_allocation", "usd_held_idle"].sum())
    held = unhealthy[(unhealthy["severity"] == "hardware") & (unhealthy["pods"].fillna("") != "")]
    assert metric(at, "Failing GPUs under pods") == str(held["gpu_uuid"].nunique()) != "0"
    assert [t.label for t in at.tabs] == ["Unhealthy GPUs", "MIG fit", "Orphaned memory", "Driver drift", "Gang stalls"]
    assert len(at.dataframe) >= 5
