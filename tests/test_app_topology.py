"""The Topology page (app/views/topology.py) and its pictures (app/topology_map.py).

With streamlit.testing's AppTest on real DuckDB stores: a hand-built day with topology (two HGX H100
nodes fragmented by 1-GPU pods, an 8-GPU gang pending for them, a 2-GPU pod across sockets on an
L40S node; tests/app_support.topology_bundle) shows tiles and tables equal to the topology analyses'
frames on the same store and window, the link map's holders and free block as node_blocks returns
them, and the planted facts (the misplaced pod, the blocked gang and its defragmentation move).
sample_data without its topology file says "topology unknown" instead of zeros. A team view narrows
the tables to its teams and leaves out the fleet-wide link map. The map's cells and the capacity
chart's long form are checked on hand-built nodes and frames.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys

import pandas as pd
import pytest

from tests import app_support as support
from tests.conftest import ROOT

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(ROOT / "app"))
import topology_map

SCRIPT = str(ROOT / "app" / "streamlit_app.py")
UNKNOWN = "topology unknown — the exporter's gpuwatch_gpu_link_info series or a topology bundle file is needed"


@pytest.fixture(scope="module")
def topo_db(tmp_path_factory):
    return support.load_topology(tmp_path_factory.mktemp("topology") / "topology.duckdb")


@pytest.fixture(scope="module")
def unknown_db(tmp_path_factory):
    return support.load_without_topology(tmp_path_factory.mktemp("topology") / "no-topology.duckdb")


def frames(db) -> tuple[dict, dict]:
    """The topology findings over the app's default window (whole days of data), and the params."""
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params
    from gpuwatch.findings import findings

    con = store.connect(str(db), read_only=True)
    try:
        coverage = analyses.run(con, "data_coverage")
        start = coverage.at[0, "first_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0)
        end = (coverage.at[0, "last_ts"].to_pydatetime().replace(hour=0, minute=0, second=0, microsecond=0)
               + dt.timedelta(days=1))
        p = params(start, end)
        names = ("topology_placement", "schedulable_capacity", "blocked_demand")
        return {k: v for k, v in findings(con, p, only=names).items() if k in names}, p
    finally:
        con.close()


def open_page(db, monkeypatch, *, teams: str = "") -> AppTest:
    monkeypatch.setenv("GPUWATCH_DB", str(db))
    if teams:
        monkeypatch.setenv("GPUWATCH_APP_TEAMS", teams)
    at = AppTest.from_file(SCRIPT, default_timeout=120)
    at.run()
    at.switch_page("views/topology.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at: AppTest, label: str) -> str:
    found = [m.value for m in at.metric if m.label == label]
    assert found, f"no metric {label!r}; have {[m.label for m in at.metric]}"
    return found[0]


def table(at: AppTest, first: str) -> pd.DataFrame:
    """The page's table whose first column is headed ``first``."""
    found = [d.value for d in at.dataframe if d.value.columns[0] == first]
    assert found, f"no table starting with {first!r}; have {[list(d.value.columns[:3]) for d in at.dataframe]}"
    return found[0]


def money(value: float) -> str:
    return f"${value:,.2f}"


def test_tiles_equal_the_topology_findings(topo_db, monkeypatch):
    at = open_page(topo_db, monkeypatch)
    f, _ = frames(topo_db)
    placement, blocked = f["topology_placement"], f["blocked_demand"]
    flagged = placement[placement["verdict"].isin(["misplaced", "spread"])]
    waiting = blocked[blocked["verdict"] == "blocked"]
    assert metric(at, "Misplaced or spread jobs") == f"{len(flagged)}"
    assert metric(at, "Placement penalty (estimate)") == money(flagged["penalty_usd"].sum())
    assert metric(at, "Blocked pending pods") == f"{len(waiting)}"
    assert metric(at, "Opportunity cost (blocked)") == money(waiting["opportunity_usd"].sum())
    # what was planted: one pod across sockets, one gang pending on fragmented H100 nodes
    assert list(flagged["pod"]) == ["train-a-0"] and list(waiting["pod"]) == ["gang-0"]
    assert float(flagged["penalty_usd"].iloc[0]) > 0 and float(waiting["opportunity_usd"].iloc[0]) > 0
    assert [t.label for t in at.tabs] == ["Link map", "Schedulable capacity", "Misplaced jobs", "Blocked demand"]
    assert not at.warning  # topology is known: no unknown banner


def test_tables_are_the_findings_rows(topo_db, monkeypatch):
    at = open_page(topo_db, monkeypatch)
    f, _ = frames(topo_db)
    flagged = f["topology_placement"].query("verdict in ['misplaced', 'spread']")
    misplaced = next(d.value for d in at.dataframe if "penalty (estimate)" in d.value.columns)
    assert list(misplaced["pod"]) == list(flagged["pod"])
    assert list(misplaced["penalty (estimate)"]) == list(flagged["penalty_usd"])
    assert list(misplaced["worst link"]) == ["SYS"] and list(misplaced["better link free"]) == ["PIX"]
    assert "link_matrix" not in misplaced.columns  # drawn as the evidence map instead
    demand = next(d.value for d in at.dataframe if "opportunity cost" in d.value.columns)
    blocked = f["blocked_demand"].sort_values("opportunity_usd", ascending=False)
    assert list(demand["pod"]) == list(blocked["pod"])
    assert list(demand["opportunity cost"]) == list(blocked["opportunity_usd"])
    gang = demand[demand["pod"] == "gang-0"].iloc[0]
    assert gang["verdict"] == "blocked" and gang["GPUs requested"] == 8
    # the cheapest move opens one H100 node: its four 1-GPU pods
    assert gang["defragment node"] in ("h100-1", "h100-2") and gang["GPUs moved"] == 4
    assert len(gang["pods to move"].split(",")) == 4
    summary = table(at, "pool")
    h100 = summary[summary["pool"] == support.H100].iloc[0]
    # 8 GPUs free all day, none on one node: every bucket had 8 free and no 8-GPU block
    # a share column with unknown rows (blank: no NVLink pair free) is drawn as text: "—" where unknown
    assert h100["8+ free: split"] == "100.00%" and h100["8+ free: no NVLink block"] == "100.00%"
    assert h100["largest NVLink block free"] == 4 and h100["mean free"] == 8.0


def test_link_map_shows_node_blocks_at_the_window_end(topo_db, monkeypatch):
    from gpuwatch import store
    from gpuwatch.analyses import schedulable_capacity

    at = open_page(topo_db, monkeypatch)
    f, p = frames(topo_db)
    last = pd.Timestamp(f["schedulable_capacity"]["bucket_ts"].max()).to_pydatetime()
    assert at.select_slider(key="topo_at").value == last  # default: the window's last bucket
    con = store.connect(str(topo_db), read_only=True)
    nodes = {n["node"]: n for n in schedulable_capacity.node_blocks(con, last, p)}
    con.close()
    gpus = table(at, "node")
    assert sorted(set(gpus["node"])) == ["h100-1", "h100-2"]  # the H100 pool, most free GPUs first (4 each)
    for node, rows in gpus.groupby("node"):
        expected = {g["gpu_index"]: g["allocated_to"] or "free" for g in nodes[node]["gpus"]}
        assert dict(zip(rows["GPU"], rows["held by"], strict=True)) == expected
        members = {int(m) for m in nodes[node]["free_blocks"]["nvlink"].split(",")}
        assert set(rows.loc[rows["in free NVLink block"], "GPU"]) == members
    h100_1 = gpus[gpus["node"] == "h100-1"]
    assert list(h100_1.loc[h100_1["held by"] != "free", "GPU"]) == [0, 2, 4, 6]  # as planted
    assert any("Largest free NVLink block: 4 (GPUs 1, 3, 5, 7)" in c.value for c in at.caption)
    at.selectbox(key="topo_pool").set_value(support.L40S).run()
    assert not at.exception
    l40s = table(at, "node")
    held = dict(zip(l40s["GPU"], l40s["held by"], strict=True))
    assert held[0] == held[4] == "ml/train-a-0" and held[6] == held[7] == "ml/ok-0" and held[1] == "free"


def test_without_topology_the_page_says_unknown_not_zero(unknown_db, monkeypatch):
    at = open_page(unknown_db, monkeypatch)
    assert any(UNKNOWN in w.value.lower() for w in at.warning), [w.value for w in at.warning]
    assert metric(at, "Misplaced or spread jobs") == "unknown"
    assert metric(at, "Placement penalty (estimate)") == "unknown"
    judged = [d.value for d in at.dataframe if "penalty (estimate)" in d.value.columns]
    assert all(set(d["verdict"]) == {"spread"} for d in judged)  # nodes spanned need no links: nothing else
    infos = [i.value.lower() for i in at.info]
    assert sum(UNKNOWN in i for i in infos) >= 2  # the link map and the misplaced-jobs tab say it too
    assert any("could not be judged: topology unknown" in c.value for c in at.caption)
    summary = table(at, "pool")  # free GPUs are known without topology; NVLink figures are not
    assert (summary["largest NVLink block free"] == "—").all()  # unknown: a dash, never "None" or 0
    assert (summary["8+ free: no NVLink block"] == "—").all()


def test_a_team_view_sees_its_rows_and_no_fleet_map(topo_db, monkeypatch):
    at = open_page(topo_db, monkeypatch, teams="ads")
    assert metric(at, "Misplaced or spread jobs") == "0" and metric(at, "Blocked pending pods") == "0"
    assert any("fleet-wide, not part of a team view" in i.value for i in at.info)
    assert not [d for d in at.dataframe if d.value.columns[0] == "node"]
    research = open_page(topo_db, monkeypatch, teams="research")
    assert metric(research, "Misplaced or spread jobs") == "1" and metric(research, "Blocked pending pods") == "1"


def test_a_simulated_fleet_shows_its_planted_topology_findings(tmp_path, monkeypatch):
    """`gpuwatch simulate` plants misplaced, spread and blocked workloads: the page shows them, as found."""
    from gpuwatch import store

    db = tmp_path / "sim.duckdb"
    con = store.connect(str(db))
    store.load_bundle(con, support.simulate(tmp_path / "sim", gpus=64, days=2))
    con.close()
    at = open_page(db, monkeypatch)
    f, _ = frames(db)
    flagged = f["topology_placement"].query("verdict in ['misplaced', 'spread']")
    blocked = f["blocked_demand"].query("verdict == 'blocked'")
    assert len(flagged) and len(blocked)
    assert metric(at, "Misplaced or spread jobs") == f"{len(flagged)}"
    assert metric(at, "Placement penalty (estimate)") == money(flagged["penalty_usd"].sum())
    assert metric(at, "Blocked pending pods") == f"{len(blocked)}"
    assert metric(at, "Opportunity cost (blocked)") == money(blocked["opportunity_usd"].sum())
    assert table(at, "node")["held by"].str.contains("/").any()  # the map's nodes hold pods


def test_the_topology_page_is_listed():
    text = (ROOT / "app" / "streamlit_app.py").read_text()
    assert '("topology.py", "Topology",' in text


NODE = {"node": "n1", "gpu_model": "m", "topology_known": True, "free_gpus": 2,
        "gpus": [{"gpu_index": 0, "gpu_uuid": "u0", "allocated_to": "ns/a", "numa_node": 0},
                 {"gpu_index": 1, "gpu_uuid": "u1", "allocated_to": None, "numa_node": 0},
                 {"gpu_index": 2, "gpu_uuid": "u2", "allocated_to": None, "numa_node": 1}],
        "links": json.dumps({"0-1": "NV12", "0-2": "SYS", "1-2": None}), "free_blocks": {"nvlink": "1,2"}}


def test_cells_cover_every_pair_with_class_holder_and_block():
    cells = topology_map.cells(topology_map.node_gpus(NODE), NODE["links"], NODE["free_blocks"]["nvlink"])
    assert len(cells) == 9
    assert list(dict.fromkeys(cells["row"])) == ["GPU 0 · NUMA 0", "GPU 1 · NUMA 0", "GPU 2 · NUMA 1"]
    assert list(dict.fromkeys(cells["col"])) == ["GPU 0", "GPU 1", "GPU 2"]  # short column labels
    by_pair = {(r.row.split(" · ")[0], r.col): r for r in cells.itertuples(index=False)}
    a, b, c = "GPU 0", "GPU 1", "GPU 2"
    assert by_pair[(a, b)].link == by_pair[(b, a)].link == "NV12" and by_pair[(a, b)].link_class == "NV"
    assert by_pair[(a, c)].link_class == "SYS"
    assert pd.isna(by_pair[(b, c)].link) and by_pair[(b, c)].link_class == "unknown"  # never guessed
    assert by_pair[(a, a)].holder == "ns/a" and by_pair[(b, b)].holder == "free"
    assert {(r, c2) for (r, c2), x in by_pair.items() if x.in_block} == {(b, b), (b, c), (c, b), (c, c)}


def test_link_map_spec_colours_links_by_class_and_outlines_the_block():
    cells = topology_map.cells(topology_map.node_gpus(NODE), NODE["links"], "1,2")
    spec = topology_map.link_map(cells, title="n1").to_dict(validate=False)
    layers = spec["layer"]
    assert layers[0]["encoding"]["color"]["scale"]["domain"] == ["NV", "PIX", "PXB", "PHB", "NODE", "SYS", "unknown"]
    assert layers[1]["encoding"]["color"]["scale"]["domain"] == ["free", "ns/a"]
    assert layers[2]["mark"]["fillOpacity"] == 0 and layers[2]["mark"]["strokeWidth"] > 1
    assert spec["resolve"]["scale"]["color"] == "independent"
    assert spec["width"] == spec["height"] == topology_map.plot_px(3) >= 3 * topology_map.CELL_PX


def test_capacity_long_form_keeps_each_k_and_drops_unknown_blocks():
    frame = support.topology_frames()["schedulable_capacity"]
    pool = frame[frame["gpu_model"] == support.H100].copy()
    pool.loc[pool.index[0], "nvlink_jobs_8"] = None  # a bucket whose layout was unknown
    long = topology_map.capacity_frame(pool)
    for k in (1, 2, 4, 8):
        for placement, column in (("any link", f"jobs_{k}"), ("NVLink block", f"nvlink_jobs_{k}")):
            part = long[(long["k"] == f"{k}-GPU") & (long["placement"] == placement)]
            assert list(part["jobs"]) == [float(v) for v in pool[column] if pd.notna(v)], (k, placement)
    spec = topology_map.capacity_chart(pool, title="t").to_dict(validate=False)
    assert len(spec["vconcat"]) == 2


def test_names_are_plain_text_in_markdown():
    name = "[x](javascript:alert(1)) **b** $x$ <b>"
    escaped = topology_map.plain(name)
    assert re.search(r"(?<!\\)[\[\]()*$<>]", escaped) is None  # every sign that formats is escaped
    assert escaped.replace("\\", "") == name  # nothing lost, only escaped
    assert topology_map.plain("gpu-node-001") == "gpu\\-node\\-001"
