"""The dcgm source against stand-in DCGM bindings (tests/fakes/dcgm: a FAKE at the DCGM boundary
with DCGM's real module names and call shapes), put on the path with ``--dcgm-bindings`` exactly
as a real install is. Checks parse() on captured payloads (sentinels dropped, MIG instances from
the hierarchy, profile from field 50), the field list vs METRICS, a dead hostengine, and
``gpuwatch export --source auto`` choosing dcgm when the bindings import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from gpuwatch.sources import SourceOptions, dcgm
from tests.conftest import FIXTURES, ROOT
from tests.support.prometheus import free_port

FAKES = str(ROOT / "tests" / "fakes" / "dcgm")
NS64, NSFP = 0x7FFFFFFFFFFFFFF0 + 2, 140737488355328.0 + 2


@pytest.fixture
def bindings():
    mods = dcgm.load_bindings(FAKES)
    import _fake_state

    return mods, _fake_state


def load(state, name: str) -> dict:
    return state.load(json.loads((FIXTURES / "dcgm" / name).read_text()))


def test_parse_drops_every_sentinel():
    raw = {"gpus": [{"gpu_id": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:01:00.0", "model": "X"}], "instances": [],
           "values": {"1": {"0": {"100": 1410, "150": NS64, "155": NSFP, "203": 0x7FFFFFFFFFFFFFF0,
                                  "230": 0x7FFFFFFFFFFFFFF3, "1001": 0.5, "1": "<<<NOT_SUPPORTED>>>"}}}}
    snap = dcgm.parse(raw, node="n")
    assert dict(snap.readings[0].values) == {100: 1410, 1001: 0.5}
    assert snap.driver_version is None


def test_lost_gpu_all_blank(bindings):
    raw = {"gpus": [{"gpu_id": 0, "uuid": "GPU-a", "pci_bus_id": "", "model": "X"}], "instances": [],
           "values": {"1": {"0": {"100": NS64}}}}
    snap = dcgm.parse(raw, node="n")
    assert snap.lost == ("GPU-a",) and "lost" in snap.problems[0]


def test_mig_from_hierarchy_with_nvml_identities(bindings):
    mods, state = bindings
    load(state, "h100-mig.json")
    from tests.fakes.fake_pynvml import FakeNvml

    nvml_fake = FakeNvml(json.loads((FIXTURES / "nvml" / "h100-mig.json").read_text()))
    source = dcgm.open_source(SourceOptions(node="n"), dcgm=mods, nvml=nvml_fake)
    snap = source.read(0)
    devices = {r.device.mig_gi_id: r.device for r in snap.readings}
    assert set(devices) == {2, 3, 9, 10}
    assert devices[2].mig_profile == "3g.40gb" and devices[2].mig_uuid.startswith("MIG-")
    assert (devices[2].mig_placement_start, devices[2].mig_placement_size) == (4, 4)
    assert all(203 not in r.values for r in snap.readings)
    source.close()


def test_dead_hostengine_raises_for_source_up(bindings):
    mods, state = bindings
    scenario = load(state, "l40s.json")
    source = dcgm.open_source(SourceOptions(node="n"), dcgm=mods)
    assert source.read(0).readings
    scenario["hostengine_down"] = True
    with pytest.raises(ConnectionError, match="nv-hostengine"):
        source.read(1)
    with pytest.raises(Exception, match="DCGM error -6"):  # reconnect attempt fails too
        source.read(2)
    scenario["hostengine_down"] = False
    assert source.read(3).readings, "reconnects once the hostengine is back"


def test_hostengine_down_at_start_is_not_a_crash(bindings):
    mods, state = bindings
    load(state, "l40s.json")["hostengine_down"] = True
    source = dcgm.open_source(SourceOptions(node="n", dcgm_host="localhost:5555"), dcgm=mods)
    with pytest.raises(Exception, match="DCGM error"):
        source.read(0)
    state.get()["hostengine_down"] = False
    assert source.read(1).readings[0].device.gpu_model == "NVIDIA L40S"
    assert source.handle.address == "localhost:5555"


def test_profiling_off_does_not_watch_prof_fields(bindings):
    mods, state = bindings
    load(state, "l40s.json")
    source = dcgm.open_source(SourceOptions(node="n", profiling=False), dcgm=mods)
    assert not any(1000 <= f < 1100 for f in source.fields)
    assert all(1001 not in r.values for r in source.read(0).readings)


def test_auto_without_a_source_serves_healthz_naming_both(tmp_path):
    """No usable source: the exporter serves /healthz 503 naming both (as --source nvml does without a
    driver) instead of exiting 2, which a DaemonSet turns into a crash loop (tests/test_cli_edges.py too)."""
    from gpuwatch.sources import nvml

    if nvml.probe(SourceOptions(node="n")) is None:
        pytest.skip("NVML works on this machine, so auto would pick it")
    port = free_port()
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--dcgm-bindings", str(tmp_path / "no-dcgm"),
           "--kubelet-socket", str(tmp_path / "absent.sock"), "--listen", f"127.0.0.1:{port}", "--interval", "0.2"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body = ""
        for _ in range(60):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
            except urllib.error.HTTPError as exc:
                body = exc.read().decode()
                if "no GPU source usable" in body:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        assert process.poll() is None
        assert "dcgm: DCGM Python bindings not importable" in body and "nvml: NVML not usable" in body, body
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.mark.slow
def test_export_auto_picks_dcgm_bindings(tmp_path):
    port = free_port()
    env = os.environ | {"GPUWATCH_FAKE_DCGM": str(FIXTURES / "dcgm" / "l40s.json"), "NODE_NAME": "gpu1-wl8sg"}
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--dcgm-bindings", FAKES, "--kubelet-socket",
           str(tmp_path / "absent.sock"), "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body = ""
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                    body = reply.read().decode()
                break
            except OSError:
                time.sleep(0.25)
        assert 'gpuwatch_source_up{source="dcgm"} 1' in body, body[:3000]
        assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43"' in body
        assert 'Hostname="gpu1-wl8sg"' in body
        assert 'gpuwatch_attribution_error_info{reason="socket_missing"} 1' in body
    finally:
        process.terminate()
        process.wait(timeout=15)
