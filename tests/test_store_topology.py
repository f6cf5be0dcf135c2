"""The topology, pending-demand and process columns of the bundle contract in a real DuckDB store:
checks name file, column and row and leave the store untouched; staging keeps both directions of a
link and the better one where they disagree; a load without NUMA nodes keeps the stored ones."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.store.validate import BundleError

T = pd.Timestamp("2026-11-09T00:00:00")


def _load(con, **frames):
    return store.load(con, {name: pd.DataFrame(rows) for name, rows in frames.items()}, source="t")


def test_stg_topology_holds_both_directions_and_the_better_of_two_answers():
    con = store.connect(None)
    _load(con, topology=[{"node": "n1", "gpu_uuid": "GPU-a", "peer_gpu_uuid": "GPU-b", "link": "nv", "nvlinks": 18},
                         {"node": "n1", "gpu_uuid": "GPU-b", "peer_gpu_uuid": "GPU-c", "link": "SYS"},
                         {"node": "n1", "gpu_uuid": "GPU-c", "peer_gpu_uuid": "GPU-b", "link": "PIX"}])
    # (a self-link is refused at load: tests/test_bundle_topology_checks.py)
    rows = con.execute("SELECT gpu_uuid, peer_gpu_uuid, link, nvlinks, link_rank FROM stg_topology ORDER BY 1, 2").fetchall()
    assert rows == [("GPU-a", "GPU-b", "NV", 18, 0), ("GPU-b", "GPU-a", "NV", 18, 0),
                    ("GPU-b", "GPU-c", "PIX", None, 1), ("GPU-c", "GPU-b", "PIX", None, 1)]


@pytest.mark.parametrize(("table", "row", "message"), [
    ("topology", {"node": "n", "gpu_uuid": "a", "peer_gpu_uuid": "b", "link": "NV18"},
     "column 'link', row 1: 'NV18' is not one of NV, PIX, PXB, PHB, NODE, SYS"),
    ("topology", {"node": "n", "gpu_uuid": "a", "peer_gpu_uuid": "b", "link": "NV", "nvlinks": -2},
     "column 'nvlinks', row 1: negative value"),
    ("topology", {"node": "n", "gpu_uuid": "a", "peer_gpu_uuid": None, "link": "NV"},
     "column 'peer_gpu_uuid', row 1: required value is empty"),
    ("pod_status", {"ts": T, "namespace": "ns", "pod": "p", "unschedulable": 2},
     "column 'unschedulable', row 1: 2.0 is not a plausible value"),
    ("pod_status", {"ts": T, "namespace": "ns", "pod": "p", "node_selector": "gpu=h100"},
     "column 'node_selector', row 1: 'gpu=h100' is not a JSON object"),
    ("pod_status", {"ts": T, "namespace": "ns", "pod": "p", "created_ts": 1.0e15},
     "column 'created_ts', row 1: bad timestamp"),
    ("processes", {"ts": T, "node": "n", "gpu_uuid": "a", "pid": 7, "in_pod": 3},
     "column 'in_pod', row 1: 3.0 is not a plausible value"),
    ("processes", {"ts": T, "node": "n", "gpu_uuid": "a", "pid": 7, "fb_used_bytes": -1.0},
     "column 'fb_used_bytes', row 1: negative value"),
    ("devices", {"node": "n", "gpu_uuid": "a", "gpu_model": "H100", "numa_node": 0.5},
     "column 'numa_node', row 1: 0.5 is not a whole number"),
])
def test_bad_rows_name_file_column_and_row_and_leave_the_store_alone(table, row, message):
    con = store.connect(None)
    _load(con, devices=[{"node": "n", "gpu_uuid": "kept", "gpu_model": "H100"}])
    before = con.execute("SELECT count(*) FROM devices").fetchall()
    with pytest.raises(BundleError, match=f"t:{table}: {message}".replace("(", r"\(").replace(")", r"\)")):
        # the bad table with a good devices row: nothing of the load lands
        extra = {} if table == "devices" else {"devices": [{"node": "n", "gpu_uuid": "new", "gpu_model": "H100"}]}
        _load(con, **{table: [row]}, **extra)
    assert con.execute("SELECT count(*) FROM devices").fetchall() == before
    assert con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == (1 if table == "devices" else 0)


def test_a_load_without_numa_nodes_keeps_the_stored_ones():
    con = store.connect(None)
    _load(con, devices=[{"node": "n", "gpu_uuid": "a", "gpu_model": "H100", "numa_node": 1, "nvlink_clique": "c/3"}])
    _load(con, devices=[{"node": "n", "gpu_uuid": "a", "gpu_model": "H100 80GB", "fb_total_bytes": 80}])
    assert con.execute("SELECT gpu_model, fb_total_bytes, numa_node, nvlink_clique FROM devices").fetchall() == [
        ("H100 80GB", 80, 1, "c/3")]
    _load(con, devices=[{"node": "n", "gpu_uuid": "a", "gpu_model": "H100 80GB", "numa_node": 0}])
    assert con.execute("SELECT numa_node FROM stg_devices").fetchall() == [(0,)]


def test_pending_columns_reach_staging():
    con = store.connect(None)
    _load(con, pod_status=[{"ts": T, "namespace": "ns", "pod": "p", "phase": "Pending", "unschedulable": 1,
                            "created_ts": T, "gpu_request": 8, "gpu_resource": " nvidia.com/gpu ",
                            "node_selector": '{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}'},
                           {"ts": T + pd.Timedelta(hours=1), "namespace": "ns", "pod": "p", "phase": "Running",
                            "unschedulable": 0, "created_ts": T, "scheduled_ts": T + pd.Timedelta(hours=1)}])
    rows = con.execute("SELECT phase, unschedulable, created_ts, scheduled_ts, gpu_resource, until_ts "
                       "FROM stg_pod_status ORDER BY ts").fetchall()
    hour = (T + pd.Timedelta(hours=1)).to_pydatetime()
    assert rows == [("Pending", 1, T.to_pydatetime(), None, "nvidia.com/gpu", hour),
                    ("Running", 0, T.to_pydatetime(), hour, None, None)]
