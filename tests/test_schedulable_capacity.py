"""schedulable_capacity and node_blocks on the hand-built placement bundle (tests/support/topology_bundles.py).

At 00:30 the fleet holds: pcie-1 GPUs 0,4 (an L40S-like PCIe node; pcie-2 full), hgx-1 GPUs 2-5 (HGX
H100; hgx-2 and hgx-3 empty), both A100 nodes full, and dark-1 (no topology rows) GPUs 0,1."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gpuwatch import analyses
from gpuwatch.analyses.schedulable_capacity import node_blocks
from tests.support.topology_bundles import A100, H100, L4, L40S, minutes, placement_bundle


@pytest.fixture(scope="module")
def loaded():
    con, params = placement_bundle().load()
    yield con, params
    con.close()


@pytest.fixture(scope="module")
def capacity(loaded):
    con, params = loaded
    return analyses.run(con, "schedulable_capacity", **params)


def _at(frame: pd.DataFrame, minute: float, model: str) -> dict:
    rows = frame[(frame["bucket_ts"] == minutes(minute)) & (frame["gpu_model"] == model)]
    assert len(rows) == 1
    return {k: (None if pd.isna(v) else v) for k, v in rows.iloc[0].to_dict().items()}


def test_buckets_cover_the_window_per_pool(capacity):
    assert capacity["bucket_ts"].nunique() == 6 * 12  # 6 h of 5-minute buckets
    assert set(capacity["gpu_model"]) == {H100, L40S, A100, L4}


def test_hgx_pool_counts_plain_and_nvlink_jobs(capacity):
    h100 = _at(capacity, 30, H100)
    assert (h100["nodes"], h100["gpus"], h100["free_gpus"]) == (3, 24, 20)
    assert [h100[f"jobs_{k}"] for k in (1, 2, 4, 8)] == [20, 10, 5, 2]
    assert [h100[f"nvlink_jobs_{k}"] for k in (1, 2, 4, 8)] == [20, 10, 5, 2]
    assert (h100["largest_nvlink_block"], h100["largest_numa_block"], h100["topology_known_gpus"]) == (8, 4, 24)


def test_pcie_pool_has_free_gpus_but_no_nvlink_pairs(capacity):
    l40s = _at(capacity, 30, L40S)
    assert (l40s["free_gpus"], l40s["jobs_2"], l40s["nvlink_jobs_1"], l40s["nvlink_jobs_2"]) == (6, 3, 6, 0)
    # free 1,2,3 (socket 0) and 5,6,7: one NUMA node holds 3, one PCIe switch 2
    assert (l40s["largest_nvlink_block"], l40s["largest_numa_block"], l40s["largest_pcie_switch_block"]) == (1, 3, 2)


def test_unknown_topology_counts_gpus_but_no_blocks(capacity):
    l4 = _at(capacity, 30, L4)
    assert (l4["free_gpus"], l4["jobs_2"], l4["topology_known_gpus"]) == (2, 1, 0)
    assert l4["largest_nvlink_block"] is None and l4["nvlink_jobs_2"] is None  # unknown, never 0


def test_allocations_end_and_free_their_gpus(capacity):
    assert _at(capacity, 0, H100)["free_gpus"] == 20
    assert _at(capacity, 120, H100)["free_gpus"] == 24  # numa-split ended at 02:00 (end is exclusive)
    assert _at(capacity, 30, A100)["free_gpus"] == 0 and _at(capacity, 5, A100)["free_gpus"] == 8


def test_node_blocks_for_the_link_map(loaded):
    con, params = loaded
    nodes = {n["node"]: n for n in node_blocks(con, minutes(30), params)}
    hgx = nodes["hgx-1"]
    assert hgx["topology_known"] and hgx["free_gpus"] == 4
    held = [g["allocated_to"] for g in hgx["gpus"]]
    assert held == [None, None, "ml/numa-split", "ml/numa-split", "ml/numa-split", "ml/numa-split", None, None]
    assert [g["numa_node"] for g in hgx["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert hgx["free_blocks"] == {"nvlink": "0,1,6,7", "numa": "0,1", "pcie_switch": "0,1,6,7"}
    assert json.loads(hgx["links"])["0-7"] == "NV18"
    assert not nodes["dark-1"]["topology_known"] and nodes["dark-1"]["free_blocks"] == {}
    assert json.loads(nodes["dark-1"]["links"])["0-1"] is None


def test_golden(capacity, golden):
    # one bucket an hour keeps the file readable; every bucket is computed the same way
    hourly = capacity[capacity["bucket_ts"].dt.minute == 30]
    golden("analyses/schedulable_capacity.csv", hourly.to_csv(index=False, date_format="%Y-%m-%dT%H:%M:%SZ",
                                                              lineterminator="\n"))
