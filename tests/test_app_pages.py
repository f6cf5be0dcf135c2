"""The app's pages read cleanly: no "None" in a cell, no snake_case header, no tile cut short, dollar
axes whose ticks do not repeat, the Topology page opening where the problems are and the GPU page
listing the health events the Health page lists.

Pages run in streamlit.testing's AppTest on sample_data in a real DuckDB store; the dollar axis is
drawn by Vega itself (vl-convert, the renderer Altair uses offline) and its tick labels read back.
"""

from __future__ import annotations

import re
import sys

import pandas as pd
import pytest

from tests import app_support as support
from tests.conftest import ROOT

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(ROOT / "app"))
import cells
import ui

SCRIPT = str(ROOT / "app" / "streamlit_app.py")
PAGES = ("fleet", "idle_hoarding", "false_utilization", "mig", "chargeback", "recommendations", "health", "topology",
         "gpu", "reclaim_audit")
TILE = 12  # characters a tile shows in a 4-5 column row at 1400 px before it cuts the value ("$213.79/mo…")


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    return support.load_sample(tmp_path_factory.mktemp("pages") / "sample.duckdb")


def open_page(db, page: str, monkeypatch) -> AppTest:
    monkeypatch.setenv("GPUWATCH_DB", str(db))
    at = AppTest.from_file(SCRIPT, default_timeout=120)
    at.run()
    if page != "fleet":
        at.switch_page(f"views/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("page", PAGES, ids=[f"{p}-page" for p in PAGES])  # not "gpu": the GPU marker
def test_tables_have_readable_headers_and_no_none_and_tiles_fit(sample_db, page, monkeypatch):
    at = open_page(sample_db, page, monkeypatch)
    for table in at.dataframe:
        frame = table.value
        assert not [c for c in frame.columns if "_" in str(c)], f"{page}: snake_case headers {list(frame.columns)}"
        texts = [c for c in frame.columns if frame[c].dtype == object]
        assert not [c for c in texts if frame[c].isna().any()], f"{page}: a text cell would read None"
    long = [(m.label, m.value) for m in at.metric if len(str(m.value)) > TILE]
    assert not long, f"{page}: tiles cut short: {long}"


def test_a_missing_number_or_time_reads_a_dash_in_its_column_format():
    frame = pd.DataFrame({"XID": [48.0, None], "Cost": [1234.5, None], "Pods": ["a/b", None], "Share": [0.25, 1.0],
                          "First": pd.to_datetime(["2026-11-09 10:00", None])})
    config = {"Cost": {"type_config": {"format": "dollar"}}, "Share": {"type_config": {"format": "percent"}}}
    shown = cells.missing_as_dash(frame, config)
    assert shown.to_dict("list") == {"XID": ["48", "—"], "Cost": ["$1,234.50", "—"], "Pods": ["a/b", "—"],
                                     "Share": [0.25, 1.0], "First": ["2026-11-09 10:00:00", "—"]}
    assert config["Cost"]["type_config"]["type"] == "text" and config["Cost"]["alignment"] == "right"
    assert config["Share"]["type_config"]["format"] == "percent"  # a column without gaps keeps its numbers


@pytest.mark.parametrize("values", [[0.4, 1.2, 2.3], [0.02, 0.07, 0.11], [3.0, 17.5, 37.0], [1234.5, 8000.0],
                                    [25_015.4, 250_000.0]])
def test_dollar_axes_never_repeat_a_tick_label(values):
    """Vega's own tick labels for the app's dollar axis (ui.usd_axis); "$,.0f" drew $0 $1 $1 $2 $2."""
    alt = pytest.importorskip("altair")
    vlc = pytest.importorskip("vl_convert")
    data = pd.DataFrame({"who": [f"p{i}" for i in range(len(values))], "usd": values})
    chart = alt.Chart(data).mark_bar().encode(x=alt.X("usd:Q", axis=ui.usd_axis()), y="who:N")
    labels = re.findall(r">(\$[^<]*)<", vlc.vegalite_to_svg(chart.to_dict()))
    assert len(labels) >= 2 and len(labels) == len(set(labels)), labels


def test_every_dollar_axis_in_the_app_is_the_shared_one():
    views = sorted((ROOT / "app" / "views").glob("*.py"))
    assert not [v.name for v in views if re.search(r"Axis\(format=\"\$", v.read_text())]


def test_topology_opens_on_the_pool_with_problems(sample_db, monkeypatch):
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params
    from gpuwatch.findings import findings

    con = store.connect(str(sample_db), read_only=True)
    coverage = analyses.run(con, "data_coverage")
    start = coverage.at[0, "first_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0)
    end = coverage.at[0, "last_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0) + pd.Timedelta(days=1)
    f = findings(con, params(start, end), only=("topology_placement", "blocked_demand"))
    con.close()
    flagged = f["topology_placement"][f["topology_placement"]["verdict"].isin(["misplaced", "spread"])]
    blocked = f["blocked_demand"][f["blocked_demand"]["verdict"] == "blocked"]
    counts = pd.concat([flagged["gpu_model"], blocked["gpu_model"]]).value_counts()
    at = open_page(sample_db, "topology", monkeypatch)
    pools = at.selectbox(key="topo_pool").options
    assert sorted(pools)[0] != counts.index[0]  # the first pool by name is not where the problems are
    assert at.selectbox(key="topo_pool").value == counts.index[0]
    assert at.selectbox(key="topo_capacity_pool").value == counts.index[0]


def test_the_gpu_page_lists_the_health_events_the_health_page_lists(sample_db, monkeypatch):
    health = pd.read_csv(support.SAMPLE / "health.csv")
    event = health[health["kind"] == "xid"].iloc[0]
    at = open_page(sample_db, "gpu", monkeypatch)
    at.selectbox(key="gpu_node").set_value(event["node"]).run()
    at.selectbox(key="gpu_uuid").set_value(event["gpu_uuid"]).run()
    assert not at.exception
    assert not [c.value for c in at.caption if "XID" in c.value and "not in gpuwatch's data" in c.value]
    shown = at.dataframe[0].value
    assert int(event["code"]) in set(shown["XID"].dropna().astype(int)) and "xid" in set(shown["Event"])


def test_chart_legends_name_signals_by_their_headers(sample_db, monkeypatch):
    """Legends of folded series read "Reported utilization", not reported_util (Fleet, False utilization)."""
    import json

    expression, names = ui.legend_names(["reported_util", "effective_util", "tensor_active"])
    assert names == ["Reported utilization", "Effective utilization", "Tensor active"]
    assert "'reported_util': 'Reported utilization'" in expression
    for page in ("fleet", "false_utilization"):
        at = open_page(sample_db, page, monkeypatch)
        specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
        sorts = [json.dumps(s) for s in specs if "Reported utilization" in json.dumps(s)]
        assert sorts, page
        assert not [s for s in sorts if '"sort": ["reported_util"' in s], page
