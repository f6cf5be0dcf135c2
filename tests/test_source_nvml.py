"""The nvml source: read() against a FAKE pynvml (tests/fakes/fake_pynvml.py, at the NVML boundary,
scenarios built from real nvidia-smi captures under tests/fixtures/nvml/), parse() on its payload,
and — on a machine with a GPU (``@pytest.mark.gpu``) — ``gpuwatch export --source nvml`` for real.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import urllib.request

import pytest

from gpuwatch.sources import SourceOptions, nvml
from tests.conftest import FIXTURES
from tests.fakes.fake_pynvml import FakeNvml
from tests.support.prometheus import free_port


def scenario(name: str) -> dict:
    return json.loads((FIXTURES / "nvml" / f"{name}.json").read_text())


def open_fake(name: str, **changes):
    fake = FakeNvml(scenario(name))
    return fake, nvml.open_source(SourceOptions(node="n1"), nvml=fake)


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


def test_scenarios_are_not_mutated_between_tests():
    assert copy.deepcopy(scenario("h100")) == scenario("h100")
