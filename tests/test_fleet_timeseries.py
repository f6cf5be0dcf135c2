"""fleet_timeseries: GPUs and dollars over time, whatever offsets the nodes are sampled at.

Regressions: one step for the whole fleet (the median gap between all distinct sample times) made a
fleet whose nodes are sampled at different offsets (per-node /metrics files, exporter bundles) count a
fraction of its GPUs and dollars (sample_data with per-node offsets: 6.4 of 95.4 GPUs, $4,113 of
$61,699); and not_sampled_gpus read the fleet's GPU count where it meant the sampled one (always 0).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses import params as defaults
from tests.support.bundles import SAMPLE_DATA, loaded

NUMBERS = ["gpus", "allocated_busy_gpus", "allocated_idle_gpus", "unallocated_gpus", "cost_usd", "busy_cost_usd",
           "idle_cost_usd", "unallocated_cost_usd", "fleet_gpus", "fleet_cost_usd", "not_sampled_gpus",
           "not_sampled_cost_usd"]


def _fleet(con, bucket_seconds: int = 3600) -> pd.DataFrame:
    params = defaults.params(*defaults.window(store.data_range(con)[1]))
    return analyses.run(con, "fleet_timeseries", **params, bucket_seconds=bucket_seconds)


def _loaded(path):
    con = store.connect(None)
    store.load_bundle(con, path)
    return con


def _offsets(tmp_path, seconds_of):
    """sample_data with each node's samples moved by ``seconds_of(node)`` seconds, loaded."""
    samples = pd.read_parquet(SAMPLE_DATA / "samples.parquet")
    moved = samples.assign(ts=pd.to_datetime(samples["ts"]) + pd.to_timedelta(
        samples["node"].astype(str).map(seconds_of).astype(int), unit="s"))
    static = tmp_path / "static"
    static.mkdir()
    for path in SAMPLE_DATA.glob("*.csv"):
        (static / path.name).write_bytes(path.read_bytes())
    con = _loaded(static)
    store.load(con, {"samples": moved}, source="offsets")
    return con


def test_nodes_sampled_at_other_offsets_count_the_same_gpus_and_dollars(tmp_path):
    aligned = _fleet(loaded()[0])
    nodes = sorted(pd.read_parquet(SAMPLE_DATA / "samples.parquet")["node"].astype(str).unique())
    offset = {n: (7 * i) % 60 for i, n in enumerate(nodes)}  # 13 nodes, 13 offsets within the minute
    moved = _fleet(_offsets(tmp_path, offset.get))
    window = {name: frame[frame["scope"] == "window"].iloc[0] for name, frame in (("aligned", aligned), ("moved", moved))}
    for column in NUMBERS:
        assert window["moved"][column] == pytest.approx(window["aligned"][column], rel=1e-9), column
    assert window["aligned"]["gpus"] == pytest.approx(95.428571, abs=1e-6)  # 96 GPUs less unheld MIG slices
    assert window["aligned"]["fleet_cost_usd"] == pytest.approx(62092.8, rel=1e-12)  # every GPU all week


def test_not_sampled_is_the_fleet_less_what_the_samples_cover():
    frame = _fleet(loaded()[0])
    assert (frame["not_sampled_gpus"] - (frame["fleet_gpus"] - frame["gpus"])).abs().max() < 1e-9
    assert (frame["not_sampled_cost_usd"] - (frame["fleet_cost_usd"] - frame["cost_usd"])).abs().max() < 1e-6
    window = frame[frame["scope"] == "window"].iloc[0]
    # sample_data's MIG GPUs hold no instance on 4 of their 7 compute slices: 4/7 of a GPU never sampled
    assert window["not_sampled_gpus"] == pytest.approx(4 / 7, abs=1e-9)


def test_a_node_with_no_series_counts_its_own_sample_times():
    """Node a: a pod's series every 30 s. Node b: no pod, sampled every 60 s at 17 s past the minute (its
    streams have no series step; its own sample times give 60 s). Each holds one GPU all the time: two
    GPUs in every hour, whatever the two offsets and steps."""
    t0 = datetime(2026, 11, 9)
    a = [{"ts": t0 + timedelta(seconds=30 * i), "node": "a", "gpu_uuid": "GPU-a", "namespace": "ns", "pod": "p",
          "gpu_util": 0.5, "sm_active": 0.4} for i in range(240)]
    b = [{"ts": t0 + timedelta(seconds=17 + 60 * i), "node": "b", "gpu_uuid": "GPU-b", "gpu_util": 0.0}
         for i in range(120)]
    devices = pd.DataFrame({"node": ["a", "b"], "gpu_uuid": ["GPU-a", "GPU-b"], "gpu_index": [0, 0],
                            "gpu_model": ["NVIDIA H100 80GB HBM3"] * 2})
    con = store.connect(None)
    store.load(con, {"devices": devices, "samples": pd.DataFrame(a + b)}, source="two nodes")
    frame = _fleet(con)
    hours = frame[(frame["scope"] == "bucket") & (frame["bucket_start"] >= t0)].head(2)
    assert list(hours["gpus"]) == pytest.approx([2.0, 2.0])
    assert list(hours["allocated_busy_gpus"]) == pytest.approx([1.0, 1.0])
    assert list(hours["unallocated_gpus"]) == pytest.approx([1.0, 1.0])
    assert list(hours["not_sampled_gpus"]) == pytest.approx([0.0, 0.0])


def test_the_stores_step_is_not_shrunk_by_node_offsets(tmp_path):
    """data_coverage's step (the app shows it; the report counts observed hours with it) is the median of
    the streams' series steps: 60 s for sample_data whether or not its nodes share sample times."""
    for con in (loaded()[0], _offsets(tmp_path, lambda node: sum(map(ord, node)) % 60)):
        assert analyses.run(con, "data_coverage").iloc[0]["step_seconds"] == 60.0
