"""The nvml source: read() against a FAKE pynvml (tests/fakes/fake_pynvml.py, at the NVML boundary,
scenarios built from real nvidia-smi captures under tests/fixtures/nvml/), parse() on its payload,
and — on a machine with a GPU (``@pytest.mark.gpu``) — ``gpuwatch export --source nvml`` for real.

Also: every default dcgm-exporter field NVML can give arrives in DCGM's unit and arithmetic; each one
the GPU lacks (NOT_SUPPORTED, NO_PERMISSION, any NVMLError) is absent while the rest stay; MIG
instances repeat GPU-level fields and carry their own FB; PROVIDED_FIELD_IDS is exactly what a
fully capable device reports. Failure signals (issue 15): the clock event reasons bitmask as DCGM's
field 112 (older drivers' throttle call as the fallback), double-bit ECC totals only while ECC mode is
on, and compute processes with their MIG instance attached to the device they run on.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import urllib.request

import pytest

from gpuwatch.exporter import exp
from gpuwatch.fields import BY_ID, fid
from gpuwatch.sources import SourceOptions, nvml
from gpuwatch.units import MIB
from tests.conftest import FIXTURES
from tests.fakes.fake_pynvml import FakeNvml
from tests.support.prometheus import free_port


def scenario(name: str) -> dict:
    return json.loads((FIXTURES / "nvml" / f"{name}.json").read_text())


def open_fake(name: str | dict, **changes):
    fake = FakeNvml(scenario(name) if isinstance(name, str) else name)
    return fake, nvml.open_source(SourceOptions(node="n1"), nvml=fake)


NEW = {name: fid(name) for name in (
    "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")}
CLOCKS, DBE_VOL, DBE_AGG = NEW["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"], NEW["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"], NEW[
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"]
# The h100 capture's GPU with every optional NVML answer: reserved = total - used - free (478 MiB, as
# memory info v2 reports it), NVLink all-link data counters in KiB at NVML's µs timestamps. ECC mode
# Enabled/Enabled as in the capture (its counts are 0; here 2 volatile and 5 lifetime double-bit errors);
# clock events SW power cap + HW thermal (0x44: the capture shows 0x0 under load and 0x1 = idle).
GPU_LEVEL = {"pcie_replay": 3, "encoder_util": 12, "decoder_util": 30, "clocks_event_reasons": 0x44,
             "ecc_mode": [1, 1], "ecc_errors": {"uncorrected": {"volatile": 2, "aggregate": 5},
                                                "corrected": {"volatile": 40, "aggregate": 900}},
             "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": 0, "failure": 0},
             "grid_licensing": {"supported": 0, "features": []},
             "field_values": {"82": 48, "138": 1_000_000, "139": 2_000_000},
             "field_timestamp_us": 1_700_000_000_000_000}


def capable(name: str = "h100", **gpu_changes) -> dict:
    data = scenario(name)
    gpu = data["gpus"][0]
    gpu |= copy.deepcopy(GPU_LEVEL) | gpu_changes
    for mem in [gpu["memory"], *(m["memory"] for m in gpu.get("mig", []))]:
        mem.setdefault("reserved", mem["total"] - mem["used"] - mem["free"])
    return data


def advance_nvlink(fake, *, tx_kib: int, rx_kib: int, seconds: float, gpu: int = 0) -> None:
    """Move the fake's NVLink counters and their NVML timestamp forward, as traffic and time would."""
    g = fake.scenario["gpus"][gpu]
    g["field_values"] = g["field_values"] | {"138": g["field_values"]["138"] + tx_kib,
                                              "139": g["field_values"]["139"] + rx_kib}
    g["field_timestamp_us"] += int(seconds * 1e6)


def read_twice(fake, source, **advance):
    source.read(0)
    advance_nvlink(fake, **({"tx_kib": 30_000_000, "rx_kib": 20_000_000, "seconds": 2.0} | advance))
    return source.read(2)


def test_whole_gpu_values_in_dcgm_units():
    _, source = open_fake("h100")
    first = source.read(0).readings[0]
    assert 1002 not in first.values, "GPM needs two samples: no profiling values on the first read"
    r = source.read(1).readings[0]
    assert r.values[203] == 100 and r.values[204] == 11            # %
    assert r.values[252] == 19818 and r.values[251] == 61263       # MiB
    assert r.values[155] == pytest.approx(631.95)                   # mW -> W
    assert r.values[1002] == pytest.approx(0.97) and r.values[1003] == pytest.approx(0.4125)  # GPM % -> ratio
    assert r.values[1009] == 12 * 2**20                             # MiB/s -> B/s
    assert r.values[230] == 79, "last XID from the event set"
    assert {p.pid: p.values.get(203) for p in r.processes} == {11327: None, 11328: None, 11345: 99}
    assert r.device.pci_bus_id == "00000000:00:09.0" and r.device.gpu_model == "NVIDIA H100 80GB HBM3"


def test_mig_instances_with_placement_and_no_gpu_util():
    _, source = open_fake("h100-mig")
    snap = source.read(0)
    assert [r.device.mig_gi_id for r in snap.readings] == [2, 3, 9, 10]
    by_gi = {r.device.mig_gi_id: r for r in snap.readings}
    assert by_gi[2].device.mig_profile == "3g.40gb" and by_gi[2].device.mig_profile_id == 9
    assert (by_gi[2].device.mig_placement_start, by_gi[2].device.mig_placement_size) == (4, 4)
    assert by_gi[9].device.mig_uuid.startswith("MIG-")
    assert all(203 not in r.values for r in snap.readings), "GPU_UTIL does not exist on MIG"
    assert {r.values[150] for r in snap.readings} == {42}, "GPU-wide fields repeat on every instance"
    assert by_gi[3].values[250] == 20096
    assert by_gi[10].device.fb_total_bytes == 9984 * 2**20


def test_mig_profile_name_strips_compute_instance_part():
    assert nvml.mig_profile_name("NVIDIA H200 MIG 1c.3g.71gb") == "3g.71gb"
    assert nvml.mig_profile_name("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert nvml.mig_profile_name("MIG 1g.10gb+me") == "1g.10gb+me"


def test_lost_gpu_is_reported_not_raised():
    fake, source = open_fake("h100")
    source.read(0)
    fake.scenario["gpus"][0]["lost"] = True
    snap = source.read(1)
    assert snap.readings == () and snap.lost == (scenario("h100")["gpus"][0]["uuid"],)
    assert "GPU is lost" in snap.problems[0]


def test_parse_is_pure_on_a_captured_payload():
    fake, _source = open_fake("h100")
    raw = nvml.read(fake, nvml.ReadState())
    again = json.loads(json.dumps(raw))  # a payload survives JSON (fixture-able)
    assert nvml.parse(again, node="n1") == nvml.parse(raw, node="n1")


def test_never_calls_state_changing_nvml():
    fake, source = open_fake("h100-mig")
    for name in ("nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance", "nvmlDeviceSetApplicationsClocks",
                 "nvmlDeviceResetGpuLockedClocks", "nvmlGpuInstanceDestroy", "nvmlDeviceSetGpuLockedClocks"):
        setattr(fake, name, lambda *a, _n=name: pytest.fail(f"{_n} changes GPU state"))
    source.read(0)
    source.read(1)
    source.close()
    assert fake.initialised == 0


def test_driver_not_loaded_at_start_is_retried():
    fake = FakeNvml(scenario("h100") | {"driver_not_loaded": True})
    source = nvml.open_source(SourceOptions(node="n1"), nvml=fake)
    with pytest.raises(fake.NVMLError, match="Driver Not Loaded"):
        source.read(0)
    fake.scenario["driver_not_loaded"] = False
    assert source.read(1).readings[0].values[252] == 19818


def test_probe_names_the_problem():
    why = nvml.probe(SourceOptions(node="n1"))
    assert why is None or "NVML not usable" in why


@pytest.mark.gpu
def test_real_gpu_export_serves_dcgm_series(tmp_path):
    port = free_port()
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "nvml", "--kubelet-socket", "",
           "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body = ""
        for _ in range(40):
            time.sleep(0.5)
            try:
                time.sleep(1.2)  # let GPM take its second sample
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                    body = reply.read().decode()
                break
            except OSError:
                continue
        lines = [x for x in body.splitlines() if not x.startswith("#")]
        assert any(x.startswith("DCGM_FI_DEV_FB_USED{") for x in lines), body[:2000]
        assert any(x.startswith("DCGM_FI_DEV_POWER_USAGE{") for x in lines)
        assert 'gpuwatch_source_up{source="nvml"} 1' in body
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            assert reply.status == 200
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_default_dcgm_fields_in_dcgm_units():
    fake, source = open_fake(capable())
    first = source.read(0).readings[0].values
    assert NEW["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] not in first, "a rate needs two samples"
    v = read_twice(fake, source).readings[0].values
    assert v[140] == 48                                             # C (field value, uiVal)
    assert v[202] == 3                                              # PCIe replays, count
    assert (v[206], v[207]) == (12, 30)                             # %, not the sampling period
    assert v[253] == 478 and v[252] == 19818 and v[250] == 81559    # MiB; v2 used excludes reserved
    assert v[449] == 25_000                                         # 50e6 KiB / 2 s / 1000, as DCGM
    assert (v[393], v[394], v[395]) == (1, 2, 0)                    # uncorrectable, correctable, failure
    assert v[526] == 0, "no grid licensing (bare metal): DCGM publishes 0"
    assert v[112] == 0x44 and exp.clock_events(v[112]) == ["power_cap", "hw_thermal"]  # the bitmask, as DCGM
    assert (v[311], v[313]) == (2, 5), "uncorrected (double-bit) volatile and aggregate, not the corrected"


def test_provided_field_ids_are_what_a_fully_capable_device_reports():
    fake, source = open_fake(capable())
    reported = set(read_twice(fake, source).readings[0].values)
    assert reported == nvml.PROVIDED_FIELD_IDS
    assert set(NEW.values()) <= nvml.PROVIDED_FIELD_IDS <= set(BY_ID)


def test_a_gpu_without_the_optional_calls_keeps_its_other_fields():
    _, source = open_fake("h100")  # the capture has none of the optional answers: all NOT_SUPPORTED
    v = source.read(0).readings[0].values
    assert not set(NEW.values()) & set(v)
    assert v[252] == 19818 and v[251] == 61263 and v[150] == 59, "memory info v1 when v2 is missing"


@pytest.mark.parametrize(("key", "gone"), [
    ("pcie_replay", {202}), ("encoder_util", {206}), ("decoder_util", {207}), ("grid_licensing", {526}),
    ("remapped_rows", {393, 394, 395}), ("field_values", {140, 449}), ("clocks_event_reasons", {112}),
    ("ecc_mode", {311, 313}), ("ecc_errors", {311, 313})])
def test_each_unsupported_field_is_absent_alone(key, gone):
    data = capable()
    del data["gpus"][0][key]
    fake, source = open_fake(data)
    if key == "field_values":
        source.read(0)
        reported = set(source.read(2).readings[0].values)
    else:
        reported = set(read_twice(fake, source).readings[0].values)
    assert reported == nvml.PROVIDED_FIELD_IDS - gone


@pytest.mark.parametrize("error", ["NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_UNKNOWN"])
def test_per_field_nvml_errors_leave_only_that_field_absent(error):
    calls = {"nvmlDeviceGetPcieReplayCounter": {202}, "nvmlDeviceGetEncoderUtilization": {206},
             "nvmlDeviceGetRemappedRows": {393, 394, 395}, "nvmlDeviceGetGridLicensableFeatures": {526},
             "nvmlDeviceGetFieldValues": {140, 449}, "nvmlDeviceGetCurrentClocksEventReasons": {112},
             "nvmlDeviceGetEccMode": {311, 313}}
    fake, source = open_fake(capable(errors=dict.fromkeys(calls, error)))
    snap = read_twice(fake, source)
    assert snap.problems == () and snap.lost == ()
    values = snap.readings[0].values
    assert set(values) == nvml.PROVIDED_FIELD_IDS - set().union(*calls.values())
    assert values[207] == 30 and values[253] == 478


def test_a_failed_field_value_entry_drops_only_that_field():
    data = capable(field_values={"82": {"nvmlReturn": "NVML_ERROR_NO_PERMISSION"}, "138": 5, "139": 7})
    fake, source = open_fake(data)
    v = read_twice(fake, source).readings[0].values
    assert 140 not in v and v[449] == 25_000


@pytest.mark.parametrize(("entry", "expected"), [
    (48, 48),                                                           # unsigned int, as NVML types it
    (46.0, 46),                                                         # a real double
    ({"uiVal": 47, "valueType": "NVML_VALUE_TYPE_DOUBLE"}, 47),         # r545 mislabels the uint as double
    ({"sllVal": 51, "valueType": "NVML_VALUE_TYPE_SIGNED_LONG_LONG"}, 51),
    ({"uiVal": 255, "valueType": "NVML_VALUE_TYPE_UNSIGNED_INT"}, None),  # > 200 C: DCGM drops it as bogus
])
def test_memory_temperature_is_decoded_by_value_type(entry, expected):
    _, source = open_fake(capable(field_values={"82": entry}))
    assert source.read(0).readings[0].values.get(140) == expected


def test_nvlink_bandwidth_reads_all_links_and_is_dcgm_rate():
    fake, source = open_fake(capable())
    assert read_twice(fake, source, tx_kib=3_000, rx_kib=1_000, seconds=0.5).readings[0].values[449] == 8
    advance_nvlink(fake, tx_kib=0, rx_kib=0, seconds=1)
    assert source.read(3).readings[0].values[449] == 0, "idle links: 0, not absent"
    fake.scenario["gpus"][0]["field_values"] |= {"138": 0, "139": 0}  # driver reload reset the counters
    advance_nvlink(fake, tx_kib=0, rx_kib=0, seconds=1)
    assert 449 not in source.read(4).readings[0].values, "no negative rate across a counter reset"


def test_nvlink_without_nvml_timestamps_uses_the_read_time():
    fake, source = open_fake(capable(field_timestamp_us=0))
    source.read(1000.0)
    advance_nvlink(fake, tx_kib=4_000_000, rx_kib=0, seconds=0)
    assert source.read(1002.0).readings[0].values[449] == 2_000


@pytest.mark.parametrize(("licensing", "expected"), [
    ({"supported": 0, "features": []}, 0),                                  # bare metal, as DCGM serves it
    ({"supported": 1, "features": [{"code": 1, "state": 1}]}, 1),           # vGPU feature licensed
    ({"supported": 1, "features": [{"code": 2, "state": 1}, {"code": 1, "state": 0}]}, 0),
    ({"supported": 1, "features": [{"code": 2, "state": 1}]}, None),        # no vGPU feature: DCGM writes nothing
    (None, None),                                                           # call NOT_SUPPORTED
])
def test_vgpu_license_status_follows_dcgm(licensing, expected):
    _, source = open_fake(capable(grid_licensing=licensing))
    assert source.read(0).readings[0].values.get(526) == expected


def test_mig_instances_repeat_gpu_level_fields_and_own_their_fb():
    data = capable("h100-mig")
    data["gpus"][0]["memory"]["reserved"] = 600 * MIB
    for m in data["gpus"][0]["mig"]:
        m["memory"]["reserved"] = m["gi_id"] * 10 * MIB
    fake, source = open_fake(data)
    snap = read_twice(fake, source)
    assert [r.device.mig_gi_id for r in snap.readings] == [2, 3, 9, 10]
    gpu_level = {140: 48, 202: 3, 206: 12, 207: 30, 393: 1, 394: 2, 395: 0, 449: 25_000, 526: 0, 112: 0x44,
                 311: 2, 313: 5}
    for r in snap.readings:
        assert {k: r.values.get(k) for k in gpu_level} == gpu_level, r.device.mig_gi_id
        assert 203 not in r.values
    assert {r.device.mig_gi_id: r.values[253] for r in snap.readings} == {2: 20, 3: 30, 9: 90, 10: 100}
    assert {r.values[250] for r in snap.readings if r.device.mig_gi_id == 3} == {20096}


def test_parse_is_pure_on_a_payload_with_every_field():
    fake, _source = open_fake(capable())
    state = nvml.ReadState()
    nvml.read(fake, state)
    advance_nvlink(fake, tx_kib=1_000, rx_kib=1_000, seconds=1)
    raw = nvml.read(fake, state)
    again = json.loads(json.dumps(raw))
    assert nvml.parse(again, node="n1") == nvml.parse(raw, node="n1")
    assert nvml.parse(again, node="n1").readings[0].values[449] == 2


def test_scenarios_are_not_mutated_between_tests():
    assert copy.deepcopy(scenario("h100")) == scenario("h100")


def _refuse(name: str):
    return lambda *a: pytest.fail(f"{name} must not be called here")


@pytest.mark.parametrize("mode", [[0, 0], [0, 1]])  # off; off until the next reboot (pending on)
def test_ecc_off_leaves_the_ecc_fields_out_without_asking_for_counts(mode):
    fake, source = open_fake(capable(ecc_mode=mode))
    fake.nvmlDeviceGetTotalEccErrors = _refuse("nvmlDeviceGetTotalEccErrors")  # counts are meaningless then
    v = source.read(0).readings[0].values
    assert not {311, 313} & set(v) and v[112] == 0x44 and v[252] == 19818


def test_a_gpu_without_ecc_has_no_ecc_fields_never_zero():
    data = capable()
    del data["gpus"][0]["ecc_mode"]  # GeForce: "ECC Mode Current: N/A" in the real RTX captures
    v = open_fake(data)[1].read(0).readings[0].values
    assert 311 not in v and 313 not in v


def test_zero_ecc_errors_are_zero_and_each_counter_stands_alone():
    # the real H100 capture: ECC enabled, uncorrectable volatile 0; here the aggregate counter is not answered
    v = open_fake(capable(ecc_errors={"uncorrected": {"volatile": 0}}))[1].read(0).readings[0].values
    assert v[311] == 0 and 313 not in v


def test_clock_events_fall_back_to_the_throttle_call_on_older_drivers():
    data = capable(errors={"nvmlDeviceGetCurrentClocksEventReasons": "NVML_ERROR_FUNCTION_NOT_FOUND"},
                   clocks_event_reasons=0x1)  # pre-R535 libnvidia-ml: only the throttle symbol exists
    assert open_fake(data)[1].read(0).readings[0].values[112] == 0x1
    fake, source = open_fake(capable(clocks_event_reasons=0x4))
    fake.nvmlDeviceGetCurrentClocksEventReasons = None  # an nvidia-ml-py from before the rename
    assert source.read(0).readings[0].values[112] == 0x4


def test_clock_events_unsupported_is_absent_and_not_retried_under_the_old_name():
    fake, source = open_fake(capable(errors={"nvmlDeviceGetCurrentClocksEventReasons": "NVML_ERROR_NOT_SUPPORTED"}))
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = _refuse("the older call")
    assert 112 not in source.read(0).readings[0].values


def test_clock_events_idle_bit_and_no_reason_are_values_not_gaps():
    for mask in (0x0, 0x1):  # the H100 capture under load and idle
        v = open_fake(capable(clocks_event_reasons=mask))[1].read(0).readings[0].values
        assert v[112] == mask


def test_a_gpu_lost_while_reading_ecc_is_reported_lost():
    _, source = open_fake(capable(errors={"nvmlDeviceGetEccMode": "NVML_ERROR_GPU_IS_LOST"}))
    snap = source.read(0)
    assert snap.readings == () and snap.lost == (scenario("h100")["gpus"][0]["uuid"],)


# The real H100 MIG capture's load phase: nvidia-smi lists GPU 0, GI 2, CI 0, pids 21180 (2296 MiB),
# 21181 (1272 MiB), 21198 (7484 MiB).
MIG_PROCESSES = [{"pid": 21180, "used_memory": 2296 * MIB, "gi_id": 2, "ci_id": 0},
                 {"pid": 21181, "used_memory": 1272 * MIB, "gi_id": 2, "ci_id": 0},
                 {"pid": 21198, "used_memory": 7484 * MIB, "gi_id": 2, "ci_id": 0}]


def test_mig_processes_carry_their_instance_and_land_on_its_reading():
    data = scenario("h100-mig")
    data["gpus"][0]["processes"] = copy.deepcopy(MIG_PROCESSES)
    fake, source = open_fake(data)
    raw = nvml.read(fake, nvml.ReadState())
    assert [(p["pid"], p["gpu_instance_id"], p["compute_instance_id"], p["used_memory"]) for p in
            raw["gpus"][0]["processes"]] == [(p["pid"], 2, 0, p["used_memory"]) for p in MIG_PROCESSES]
    by_gi = {r.device.mig_gi_id: r for r in source.read(0).readings}
    assert {p.pid: p.values[252] for p in by_gi[2].processes} == {21180: 2296, 21181: 1272, 21198: 7484}
    assert all(by_gi[gi].processes == () for gi in (3, 9, 10))


def test_whole_gpu_processes_have_no_instance_and_unknown_memory_stays_unknown():
    data = scenario("h100")
    data["gpus"][0]["processes"][0]["used_memory"] = None  # NVML_VALUE_NOT_AVAILABLE
    fake, source = open_fake(data)
    procs = nvml.read(fake, nvml.ReadState())["gpus"][0]["processes"]
    assert {(p["gpu_instance_id"], p["compute_instance_id"]) for p in procs} == {(None, None)}
    assert procs[0]["used_memory"] is None
    by_pid = {p.pid: p.values for p in source.read(0).readings[0].processes}
    assert 252 not in by_pid[11327] and by_pid[11328][252] == 1542


def test_processes_not_listable_leave_the_readings_alone():
    data = scenario("h100-mig")
    data["gpus"][0]["processes"] = copy.deepcopy(MIG_PROCESSES)
    data["gpus"][0]["errors"] = {"nvmlDeviceGetComputeRunningProcesses": "NVML_ERROR_NO_PERMISSION"}
    snap = open_fake(data)[1].read(0)
    assert snap.problems == () and [r.processes for r in snap.readings] == [()] * 4
    assert {r.values[250] for r in snap.readings if r.device.mig_gi_id == 3} == {20096}
