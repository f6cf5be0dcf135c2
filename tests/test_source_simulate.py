"""The simulate source: the workloads fleet in DCGM units, its window around "now", node choice."""

from __future__ import annotations

import pytest

from gpuwatch.fleet import build_fleet, readings_at
from gpuwatch.sources import SourceOptions, simulate

DAY = 86400.0


def test_window_contains_now_and_starts_at_midnight():
    now = 1_795_000_123.0
    start = simulate.window_start(now)
    assert start % DAY == 0 and start <= now < start + 7 * DAY and now - start >= 3 * DAY


def test_open_source_positions_fleet_around_now():
    now = 1_795_000_123.0
    source = simulate.open_source(SourceOptions(node="x", simulate_gpus=8), now=now)
    assert source.fleet.start <= now < source.fleet.end
    assert len(source.read(now).readings) >= 8


def test_clock_wraps_past_the_window():
    fleet = build_fleet(gpus=8, seed=1)
    source = simulate.SimulatedSource(fleet)
    span = fleet.end - fleet.start
    assert source.fleet_time(fleet.start + span + 10) == fleet.start + 10
    assert source.read(fleet.start + span + 10) == source.read(fleet.start + 10)


def test_unknown_node_is_a_clear_error():
    with pytest.raises(ValueError, match="gpu-node-000"):
        simulate.SimulatedSource(build_fleet(gpus=8), node="nope")


def test_values_in_dcgm_units_and_nan_dropped():
    fleet = build_fleet(gpus=24, seed=0)
    t = fleet.start + 1.3 * DAY
    snap = simulate.SimulatedSource(fleet, node="gpu-node-002").read(t)
    by_key = {r.device.key: r for r in snap.readings}
    for device, _pod, v in readings_at(fleet, t, node="gpu-node-002"):
        values = by_key[device.key].values
        if device.is_mig:
            assert 203 not in values and 155 not in values  # NaN in the fleet: absent, never 0
        else:
            assert values[203] == round(v["gpu_util"] * 100)
        assert values[252] == v["fb_used_bytes"] // 2**20
        assert values[250] == device.fb_total_bytes // 2**20 and values[251] == values[250] - values[252]
        if v["sm_active"] == v["sm_active"]:
            assert values[1002] == v["sm_active"]
