"""The simulate source: the fleet in DCGM units, its window around "now", node choice, and the
synthetic fields (simulate_extra) that make it serve every default dcgm-exporter field: present
where dcgm-exporter serves them (whole GPUs, MIG instances, time-sliced GPUs), plausible per model,
counters that never go back (also when the fleet's clock wraps), energy that integrates the power
readings, and every value the source reported before them unchanged."""

from __future__ import annotations

import hashlib
import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch import fields
from gpuwatch.fleet import GPU_SPECS, TEAMS, build_fleet, readings_at
from gpuwatch.sources import SourceOptions, simulate, simulate_extra

DAY = 86400.0
SERIES_IDS = {f.id for f in fields.SERIES}
WALL_CLOCK_COUNTERS = {156, 202, 393, 394}  # energy, PCIe replays, remapped rows: functions of wall-clock time
GPU_WIDE = {100, 101, 140, 150, 155, 156, 202, 230, 393, 394, 395}  # repeated on every MIG instance of a GPU
NOT_ON_MIG = {203, 204, 206, 207, 449, 1009, 1010, 1011, 1012}
# The fields the source reported before the synthetic ones were added, and what it reported for them
# (captured from the code before that change: build_fleet(gpus=40, seed=0), GPU 0 of nodes 0-4; since
# then only an empty device's FB used/free changed, to what nvidia-smi shows, catalog.EMPTY_FB_MIB).
BEFORE_IDS = {150, 155, 203, 250, 251, 252, 1001, 1002, 1003, 1004, 1005, 1011, 1012}
# sha256 of every device's BEFORE_IDS values and processes at 12 instants (see its test below)
BEFORE_DIGEST = "ef077e7452747e3d568ef763b1921d06aeea07f0a69c3af8e55fb1446881348c"
BEFORE = {
    ("1.3d", "gpu-node-000", None): {150: 52, 155: 307.3, 203: 64, 250: 81559, 251: 36103, 252: 45456, 1001: 0.6309, 1002: 0.4431, 1003: 0.1772, 1004: 0.1534, 1005: 0.2006, 1011: 0, 1012: 0},
    ("1.3d", "gpu-node-001", None): {150: 70, 155: 299.9, 203: 96, 250: 81920, 251: 32810, 252: 49110, 1001: 0.9422, 1002: 0.8351, 1003: 0.4731, 1004: 0.4563, 1005: 0.5387, 1011: 15236431611, 1012: 15236431611},
    ("1.3d", "gpu-node-002", 1): {250: 40448, 252: 14665, 251: 25783, 1001: 0.555, 1002: 0.3922, 1003: 0.1569, 1004: 0.1503, 1005: 0.1948, 150: 50},
    ("1.3d", "gpu-node-002", 2): {250: 40448, 252: 26, 251: 40422, 1001: 0.0, 1002: 0.0, 1003: 0.0, 1004: 0.0, 1005: 0.0, 150: 50},
    ("1.3d", "gpu-node-003", None): {150: 47, 155: 138.4, 203: 34, 250: 81920, 251: 50401, 252: 31519, 1011: 0, 1012: 0},
    ("1.3d", "gpu-node-004", None): {150: 48, 155: 657.7, 203: 88, 250: 81559, 251: 8620, 252: 72939},
    ("1.3d", "gpu-node-004", "pid 943940 ml-platform/platform-serve-100-ad573"): {203: 20, 252: 23135},
    ("1.3d", "gpu-node-004", "pid 2400663 research-notebooks/hugo-nb103-0"): {203: 0, 252: 10722},
    ("1.3d", "gpu-node-004", "pid 3412542 ml-platform/platform-serve-106-482d9"): {203: 33, 252: 17363},
    ("1.3d", "gpu-node-004", "pid 2758608 vision/vision-serve-109-0fd42"): {203: 35, 252: 21719},
    ("4.77d", "gpu-node-000", None): {150: 32, 155: 70.0, 203: 0, 250: 81559, 251: 81559, 252: 0, 1001: 0.0, 1002: 0.0, 1003: 0.0, 1004: 0.0, 1005: 0.0001, 1011: 0, 1012: 0},
    ("4.77d", "gpu-node-001", None): {150: 67, 155: 281.4, 203: 93, 250: 81920, 251: 20016, 252: 61904, 1001: 0.9117, 1002: 0.7719, 1003: 0.4345, 1004: 0.3207, 1005: 0.5339, 1011: 19671829146, 1012: 19671829146},
    ("4.77d", "gpu-node-002", 1): {250: 40448, 252: 16056, 251: 24392, 1001: 0.0002, 1002: 0.0001, 1003: 0.0, 1004: 0.0, 1005: 0.0, 150: 32},
    ("4.77d", "gpu-node-002", 2): {250: 40448, 252: 26, 251: 40422, 1001: 0.0, 1002: 0.0, 1003: 0.0, 1004: 0.0, 1005: 0.0, 150: 32},
    ("4.77d", "gpu-node-003", None): {150: 47, 155: 140.7, 203: 33, 250: 81920, 251: 50650, 252: 31270, 1011: 0, 1012: 0},
    ("4.77d", "gpu-node-004", None): {150: 43, 155: 541.1, 203: 78, 250: 81559, 251: 2141, 252: 79418},
    ("4.77d", "gpu-node-004", "pid 1378451 vision/vision-serve-101-16dc3"): {203: 26, 252: 20144},
    ("4.77d", "gpu-node-004", "pid 3994288 vision/vision-serve-105-0"): {203: 20, 252: 19970},
    ("4.77d", "gpu-node-004", "pid 3412542 ml-platform/platform-serve-106-482d9"): {203: 16, 252: 17557},
    ("4.77d", "gpu-node-004", "pid 2758608 vision/vision-serve-109-0fd42"): {203: 17, 252: 21747},
    ("wrap+0.5d", "gpu-node-000", None): {150: 48, 155: 262.5, 203: 44, 250: 81559, 251: 36077, 252: 45482, 1001: 0.4308, 1002: 0.3594, 1003: 0.1438, 1004: 0.0503, 1005: 0.1566, 1011: 0, 1012: 0},
    ("wrap+0.5d", "gpu-node-001", None): {150: 35, 155: 71.5, 203: 98, 250: 81920, 251: 22483, 252: 59437, 1001: 0.9753, 1002: 0.0564, 1003: 0.008, 1004: 0.0, 1005: 0.003, 1011: 0, 1012: 0},
    ("wrap+0.5d", "gpu-node-002", 1): {250: 40448, 252: 14671, 251: 25777, 1001: 0.5765, 1002: 0.4282, 1003: 0.1713, 1004: 0.1562, 1005: 0.2008, 150: 51},
    ("wrap+0.5d", "gpu-node-002", 2): {250: 40448, 252: 26, 251: 40422, 1001: 0.0, 1002: 0.0, 1003: 0.0, 1004: 0.0, 1005: 0.0001, 150: 51},
    ("wrap+0.5d", "gpu-node-003", None): {150: 73, 155: 239.1, 203: 92, 250: 81920, 251: 23897, 252: 58023, 1011: 0, 1012: 0},
    ("wrap+0.5d", "gpu-node-004", None): {150: 46, 155: 509.20000000000005, 203: 69, 250: 81559, 251: 8458, 252: 73101},
    ("wrap+0.5d", "gpu-node-004", "pid 943940 ml-platform/platform-serve-100-ad573"): {203: 17, 252: 23100},
    ("wrap+0.5d", "gpu-node-004", "pid 2400663 research-notebooks/hugo-nb103-0"): {203: 0, 252: 10595},
    ("wrap+0.5d", "gpu-node-004", "pid 3412542 ml-platform/platform-serve-106-482d9"): {203: 22, 252: 17542},
    ("wrap+0.5d", "gpu-node-004", "pid 2758608 vision/vision-serve-109-0fd42"): {203: 30, 252: 21864},
}


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=40, seed=0)  # nodes: mixed H100, train A100, MIG H100, no-profiling A100, shared H100


@pytest.fixture(scope="module")
def source(fleet):
    return simulate.SimulatedSource(fleet)


@pytest.fixture(scope="module")
def times(fleet):
    return [fleet.start + i * 0.37 * DAY + 11 for i in range(18)]


@pytest.fixture(scope="module")
def snapshots(source, times):
    return [source.read(t) for t in times]


def _by_key(snapshot) -> dict:
    return {r.device.key: r.values for r in snapshot.readings}


def _without(snapshot, ids: set[int]) -> list:
    return [(r.device.key, {k: v for k, v in r.values.items() if k not in ids}, r.processes)
            for r in snapshot.readings]


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
    first, again = source.read(fleet.start + 10), source.read(fleet.start + span + 10)
    assert _without(again, WALL_CLOCK_COUNTERS) == _without(first, WALL_CLOCK_COUNTERS)  # gauges repeat
    for a, b in zip(first.readings, again.readings, strict=True):
        assert b.values[156] > a.values[156] and b.values[202] >= a.values[202]  # counters go on


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
            assert 203 not in values  # NaN in the fleet: absent, never 0
            # power is the board's (DCGM_FE_GPU): the same on every instance, between idle and TDP
            spec = GPU_SPECS[device.gpu_model]
            assert {r.values[155] for r in snap.readings if r.device.gpu_uuid == device.gpu_uuid} == {values[155]}
            assert spec["idle_w"] <= values[155] <= spec["tdp_w"]
        else:
            assert values[203] == round(v["gpu_util"] * 100)
        assert values[252] == v["fb_used_bytes"] // 2**20
        assert values[250] == device.fb_total_bytes // 2**20 and values[251] == values[250] - values[252]
        if v["sm_active"] == v["sm_active"]:
            assert values[1002] == v["sm_active"]


def _before(r) -> dict:
    """The values of fields served before; a MIG instance's power is new (the board's, since MIG power)."""
    return {k: v for k, v in r.values.items() if k in BEFORE_IDS and not (k == 155 and r.device.is_mig)}


def test_existing_fields_keep_their_values(fleet, source):
    times = {"1.3d": fleet.start + 1.3 * DAY, "4.77d": fleet.start + 4.77 * DAY,
             "wrap+0.5d": fleet.start + (fleet.end - fleet.start) + 0.5 * DAY}
    got = {}
    for label, now in times.items():
        for r in source.read(now).readings:
            if r.device.gpu_index == 0:
                got[(label, r.device.node, r.device.mig_gi_id)] = _before(r)
                for p in r.processes:
                    got[(label, r.device.node, f"pid {p.pid} {p.namespace}/{p.pod}")] = dict(p.values)
    assert got == BEFORE


def test_existing_fields_keep_their_values_fleet_wide(fleet, source):
    digest = hashlib.sha256()
    for i in range(12):
        for r in source.read(fleet.start + i * 0.61 * DAY + 17).readings:
            values = sorted(_before(r).items())
            processes = [(p.pid, p.namespace, p.pod, sorted(p.values.items())) for p in r.processes]
            digest.update(repr((r.device.key, values, processes)).encode())
    assert digest.hexdigest() == BEFORE_DIGEST


def test_every_served_field_is_provided(fleet, snapshots):
    absent = simulate_extra.ABSENT_ON_BARE_METAL
    assert {fid for snap in snapshots for r in snap.readings for fid in r.values} == simulate.PROVIDED_FIELD_IDS
    assert absent <= SERIES_IDS and not absent & simulate.PROVIDED_FIELD_IDS
    assert SERIES_IDS - absent <= simulate.PROVIDED_FIELD_IDS
    whole_profiled_gpu = fleet.devices[0].key  # gpu-node-000: whole H100s with profiling
    assert all(SERIES_IDS - absent <= _by_key(snap)[whole_profiled_gpu].keys() for snap in snapshots)


def test_values_are_plausible_per_model(snapshots):
    ints = {f.id for f in fields.SERIES if f.fmt == "i"}
    for r in (r for snap in snapshots for r in snap.readings):
        v, spec = r.values, GPU_SPECS[r.device.gpu_model]
        assert spec["sm_clock_mhz"][0] <= v[100] <= spec["sm_clock_mhz"][1]
        assert spec["mem_clock_mhz"][0] <= v[101] <= spec["mem_clock_mhz"][1]
        assert 20 <= v[150] <= 95 and 20 <= v[140] <= 95
        assert all(0 <= v[fid] <= 100 for fid in (203, 204, 206, 207) if fid in v)
        assert all(0.0 <= v[fid] <= 1.0 for fid in (1001, 1002, 1003, 1004, 1005) if fid in v)
        assert all(type(v[fid]) is int for fid in ints & v.keys())
        assert v[253] == 0 and v[250] == v[251] + v[252] + v[253]  # see simulate_extra's FB_RESERVED note
        assert v[156] > 0 and v[202] >= 0 and v[393] >= 0 and v[394] >= 0 and v[395] in (0, 1)
        assert v[230] in {0, 63, 64, 94, *simulate_extra.APP_XIDS}
        assert (1009 in v) == (1010 in v) == (1005 in v and not r.device.is_mig)
        if 1005 in v and not r.device.is_mig:
            assert v[204] == round(100 * v[1005])  # memory copy utilisation follows DRAM activity
            assert 150_000 <= v[1009] < 64e9 and 20_000 <= v[1010] < 64e9  # PCIe gen5 x16 ~ 64 GB/s
        if 1011 in v:
            assert abs(v[449] - (v[1011] + v[1012]) / 1e6) <= 1 and v[449] <= 900_000  # MB/s; H100 900 GB/s


def test_clocks_idle_when_idle_and_boosted_when_busy(snapshots):
    idle = busy = 0
    for r in (r for snap in snapshots for r in snap.readings if 1002 in r.values and not r.device.is_mig):
        low, top = GPU_SPECS[r.device.gpu_model]["sm_clock_mhz"]
        if r.values[1002] == 0:
            idle += 1
            assert r.values[100] == low
        elif r.values[1002] >= 0.05:
            busy += 1
            assert r.values[100] == top
    assert idle and busy


def test_memory_temperature_runs_through_the_captured_points(fleet):
    for model, spec in GPU_SPECS.items():
        device = next((d for d in fleet.devices if d.gpu_model == model), None)
        if device is None or "hbm_temp_c" not in spec:  # L40S/GB200: topology nodes only; L40S has no HBM sensor
            continue
        for die, hbm in spec["hbm_temp_c"]:
            reading = simulate_extra.Reading(device, {}, (), 0.0, die, counters=None)
            assert simulate_extra.memory_temp(reading) == hbm


def test_mig_instances_repeat_gpu_wide_fields_only(snapshots):
    for snap in snapshots:
        instances: dict[str, list] = {}
        for r in snap.readings:
            if r.device.is_mig:
                instances.setdefault(r.device.gpu_uuid, []).append(r.values)
        assert instances
        for values in instances.values():
            assert all(v.keys() >= GPU_WIDE and not NOT_ON_MIG & v.keys() and v[253] == 0 for v in values)
            assert len({tuple(v[k] for k in sorted(GPU_WIDE)) for v in values}) == 1


def test_time_sliced_gpus_report_device_fields(fleet, snapshots):
    shared = {fleet.devices[s.device].key for s in fleet.segments if s.share < 1}
    assert shared
    for snap in snapshots:
        for r in (r for r in snap.readings if r.device.key in shared):
            assert {100, 101, 140, 156, 204, 206, 207, 230, 449} <= r.values.keys()
            assert 1009 not in r.values  # no profiling when shared


def test_only_video_serving_pods_use_the_video_engines(fleet, times, snapshots):
    decoding = 0
    for t, snap in zip(times, snapshots, strict=True):
        video = {d.key for d, pod, _ in readings_at(fleet, t) if pod is not None
                 and pod.namespace in TEAMS["vision"] and pod.owner_kind in ("Deployment", "StatefulSet")}
        for r in (r for r in snap.readings if 207 in r.values):
            assert r.values[206] <= r.values[207]
            if r.device.key not in video:
                assert r.values[206] == r.values[207] == 0, (t, r.device.key)
            decoding += r.values[207] > 0
    assert decoding


def test_energy_integrates_the_power_readings(fleet):
    source = simulate.SimulatedSource(fleet, node="gpu-node-000")  # whole H100s: power read each instant
    step = simulate_extra.ENERGY_STEP_S
    reads = [_by_key(source.read(fleet.start + DAY + i * step)) for i in range(25)]
    for key in reads[0]:
        energy, power = [r[key][156] for r in reads], [r[key][155] for r in reads]
        assert energy[-1] - energy[0] == sum(round(p * step * 1000) for p in power[:-1])


def test_energy_agrees_with_power_on_average(fleet):
    for node in ("gpu-node-003", "gpu-node-004"):  # no profiling (A100), time-sliced (H100)
        source = simulate.SimulatedSource(fleet, node=node)
        times = [fleet.start + 2 * DAY + i * 900.0 for i in range(97)]
        reads = [_by_key(source.read(t)) for t in times]
        for key in reads[0]:
            mean_w = sum(r[key][155] for r in reads[:-1]) / (len(reads) - 1)
            energy_w = (reads[-1][key][156] - reads[0][key][156]) / 1000 / (times[-1] - times[0])
            assert energy_w == pytest.approx(mean_w, rel=0.1), (node, key)


def test_energy_rate_stays_between_idle_and_tdp(fleet, source):  # MIG GPUs too, which serve no power
    first, b = source.read(fleet.start + 2 * DAY), _by_key(source.read(fleet.start + 2.5 * DAY))
    for r in first.readings:
        spec = GPU_SPECS[r.device.gpu_model]
        watts = (b[r.device.key][156] - r.values[156]) / 1000 / (0.5 * DAY)
        assert spec["idle_w"] - 0.01 <= watts <= spec["tdp_w"], r.device.key


@pytest.fixture(scope="module")
def short_source():
    return simulate.SimulatedSource(build_fleet(gpus=40, seed=3, days=1))  # a one-day window: wraps often


def _assert_never_decrease(snapshots) -> None:
    for earlier, later in itertools.pairwise(snapshots):
        before = _by_key(earlier)
        for key, values in _by_key(later).items():
            assert all(values[fid] >= before[key][fid] for fid in WALL_CLOCK_COUNTERS), key


def test_counters_never_decrease_across_wraps(short_source):
    fleet = short_source.fleet
    end, span = fleet.end, fleet.end - fleet.start
    times = [end - 600, end - 300.5, end - 1e-3, end, end + 1e-3, end + 299.9, end + 300, end + span - 1,
             end + span, end + 2.5 * span]
    _assert_never_decrease([short_source.read(t) for t in times])
    a, b, c = (_by_key(short_source.read(fleet.start + (0.3 + k) * span)) for k in range(3))
    for key in a:  # each pass of the window adds the same energy
        assert b[key][156] - a[key][156] > 0 and abs((c[key][156] - b[key][156]) - (b[key][156] - a[key][156])) <= 1


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.floats(min_value=0.0, max_value=1.5 * DAY), min_size=1, max_size=5))
def test_counters_never_decrease(short_source, steps):
    t, times = short_source.fleet.start + 0.6 * DAY, []
    for step in steps:
        t += step
        times.append(t)
    _assert_never_decrease([short_source.read(t) for t in [short_source.fleet.start + 0.6 * DAY, *times]])


def test_faults_are_rare_and_consistent():
    faults = [simulate_extra.faults_of(f"GPU-{i:08x}") for i in range(4000)]

    def share(has) -> float:
        return sum(map(has, faults)) / len(faults)

    assert 0.05 < share(lambda f: f.xid != 0) < 0.15
    assert 0.04 < share(lambda f: f.replay_every_s < math.inf) < 0.12
    assert 0.02 < share(lambda f: f.rows != (0, 0)) < 0.08 and 0 < share(lambda f: f.remap_failed == 1) < 0.01
    assert all(f.xid in (63, 64, 94) for f in faults if f.rows != (0, 0))


def test_a_row_remap_raises_its_xid_and_counts_the_row(fleet):
    uuid = next(d.gpu_uuid for d in fleet.devices if simulate_extra.faults_of(d.gpu_uuid).remaps >= 0)
    f, span = simulate_extra.faults_of(uuid), fleet.end - fleet.start
    meter = simulate_extra.Meter(fleet, [uuid])
    at = fleet.start + f.xid_at * span
    before, after, next_pass = (meter.at(t)[uuid] for t in (at - 60, at + 60, at + span + 60))
    assert before.xid == 0 and after.xid == next_pass.xid == f.xid
    rows = [c.rows_correctable + c.rows_uncorrectable for c in (before, after, next_pass)]
    assert rows[1] - rows[0] == rows[2] - rows[1] == 1
