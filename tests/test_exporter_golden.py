"""Golden exposition of the simulate source at a fixed time, per compatibility profile, and the
attribution laws every profile must keep.

``render_at`` is what ``gpuwatch export --source simulate --simulate-kubelet --compat PROFILE``
serves at that instant (the kubelet's allocations come from the same fleet). Golden files are for
review: ``pytest --update-golden`` rewrites them. The other tests check behaviour the golden files
show: on a time-sliced node one device-level series per GPU and field, so sums over a family equal
the per-UUID sums in every profile (a MIG GPU's device-wide fields repeat on each instance in the
dcgm-exporter profiles, as upstream: tests/test_exporter_mig_sums.py); on a shared GPU the dcgm-exporter profiles label that series with the pod the
kubelet listed last, gpuwatch's adds each pod's own GPU_UTIL/FB_USED and keeps the remainder on
the device; no GPU_UTIL on MIG; units converted to DCGM's.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import render_at
from gpuwatch.fleet import DEFAULT_START, build_fleet, readings_at
from gpuwatch.sources.simulate import allocations_at

T = DEFAULT_START + 2.5 * 86400 + 1234.0  # Wednesday noon of the simulated week, +1234 s


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=40, seed=0)


@pytest.mark.parametrize("profile", list(compat.PROFILES))
@pytest.mark.parametrize("node", ["gpu-node-002", "gpu-node-004"])  # MIG node, time-sliced node
def test_golden_exposition(fleet, golden, node, profile):
    golden(f"exporter/{profile}/simulate-{node}.prom", render_at(fleet, T, node=node, options=compat.options(profile)))


def test_render_is_deterministic_and_hostname_is_the_node(fleet):
    options = compat.options("dcgm-exporter-4.8")
    text = render_at(fleet, T, node="gpu-node-001", options=options)
    assert text == render_at(fleet, T, node="gpu-node-001", options=options)
    hosts = set(re.findall(r'Hostname="([^"]+)"', text))
    assert hosts == {"gpu-node-001"} and 'hostname="' not in text


def _series(text: str, name: str) -> list[tuple[dict, float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.rindex("}")]))
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def _shared(fleet) -> dict[str, list]:
    """GPU UUID -> the allocations of the GPUs several pods share at T on gpu-node-004, kubelet order."""
    by_gpu: dict[str, list] = {}
    for a in allocations_at(fleet, T, node="gpu-node-004"):
        by_gpu.setdefault(a.device_id, []).append(a)
    shared = {uuid: found for uuid, found in by_gpu.items() if len({(a.namespace, a.pod) for a in found}) > 1}
    assert len(shared) >= 2, "fixture time should have pods time-slicing GPUs"
    return shared


@pytest.mark.parametrize("profile", list(compat.PROFILES))
def test_one_device_series_per_gpu_so_sums_are_the_devices(fleet, profile):
    text = render_at(fleet, T, node="gpu-node-004", options=compat.options(profile))
    power = "DCGM_FI_DEV_BOARD_POWER_WATTS" if profile == "dcgm-exporter-4.9" else "DCGM_FI_DEV_POWER_USAGE"
    util = "DCGM_FI_DEV_GPU_UTIL_RATIO" if profile == "dcgm-exporter-4.9" else "DCGM_FI_DEV_GPU_UTIL"
    series = Counter(line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#"))
    assert max(series.values()) == 1, "a series was emitted twice"
    uuids = Counter(labels["UUID"] for labels, _ in _series(text, power))
    assert set(uuids.values()) == {1}, "a device-wide field must be one series per GPU"
    device = {r.device.gpu_uuid: r.values for r in _readings(fleet)}
    for uuid, values in device.items():  # per UUID, the series add up to the device's own value
        total = sum(v for labels, v in _series(text, util) if labels["UUID"] == uuid)
        factor = 0.01 if profile == "dcgm-exporter-4.9" else 1.0
        assert total == pytest.approx(values[203] * factor), uuid
    assert "vgpu=" not in "".join(x for x in text.splitlines() if x.startswith("DCGM_"))


def _readings(fleet):
    from gpuwatch.sources.simulate import SimulatedSource

    return SimulatedSource(fleet, node="gpu-node-004").read(T).readings


@pytest.mark.parametrize("profile", ["dcgm-exporter-4.8", "dcgm-exporter-4.9"])
def test_dcgm_exporter_profiles_label_a_shared_gpu_with_the_last_listed_pod(fleet, profile):
    text = render_at(fleet, T, node="gpu-node-004", options=compat.options(profile))
    name = "DCGM_FI_DEV_FB_USED" if profile == "dcgm-exporter-4.8" else "DCGM_FI_DEV_FB_USED_BYTES"
    for uuid, found in _shared(fleet).items():
        [(labels, _)] = [s for s in _series(text, name) if s[0]["UUID"] == uuid]
        assert (labels["namespace"], labels["pod"]) == (found[-1].namespace, found[-1].pod)
    info = _series(text, "gpuwatch_gpu_allocation_info")
    for uuid, found in _shared(fleet).items():  # every sharer stays listed
        assert {x["pod"] for x, _ in info if x["UUID"] == uuid} == {a.pod for a in found}


def test_gpuwatch_profile_serves_each_sharing_pods_own_share(fleet):
    text = render_at(fleet, T, node="gpu-node-004", options=compat.options("gpuwatch"))
    readings = {r.device.gpu_uuid: r for r in _readings(fleet)}
    for uuid, found in _shared(fleet).items():
        util = [s for s in _series(text, "DCGM_FI_DEV_GPU_UTIL") if s[0]["UUID"] == uuid]
        pods = {labels["pod"]: v for labels, v in util if "pod" in labels}
        assert set(pods) == {a.pod for a in found}
        own = {p.pod: p.values[203] for p in readings[uuid].processes}
        assert pods == {pod: own.get(pod, 0) for pod in pods} or sum(own.values()) > readings[uuid].values[203]
        [(device_labels, _)] = [s for s in _series(text, "DCGM_FI_DEV_POWER_USAGE") if s[0]["UUID"] == uuid]
        assert "pod" not in device_labels, "a shared GPU's device-wide fields carry no pod"
        temp = [s for s in _series(text, "DCGM_FI_DEV_GPU_TEMP") if s[0]["UUID"] == uuid]
        assert len(temp) == 1 and "pod" not in temp[0][0], "fields not measured per process stay on the device"


def test_units_are_dcgms(fleet):
    node = "gpu-node-000"
    text = render_at(fleet, T, node=node)
    for device, pod, values in readings_at(fleet, T, node=node):
        if device.is_mig or values["gpu_util"] != values["gpu_util"]:
            continue
        line = next(x for x in text.splitlines()
                    if x.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'UUID="{device.gpu_uuid}"' in x)
        assert int(line.rsplit(" ", 1)[1]) == round(values["gpu_util"] * 100)  # ratio -> %
        fb = next(x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_FB_USED{") and f'UUID="{device.gpu_uuid}"' in x)
        assert int(fb.rsplit(" ", 1)[1]) == int(values["fb_used_bytes"] // 2**20)  # bytes -> MiB
        if pod is not None:
            assert f'pod="{pod.pod}"' in line and f'namespace="{pod.namespace}"' in line


def test_mig_instances_have_no_gpu_util_but_gr_engine(fleet):
    text = render_at(fleet, T, node="gpu-node-002")
    mig = [x for x in text.splitlines() if "GPU_I_ID=" in x and x.startswith("DCGM_")]
    assert mig and not any(x.startswith("DCGM_FI_DEV_GPU_UTIL{") for x in mig)
    assert any(x.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{") for x in mig)
    info = [x for x in text.splitlines() if x.startswith("gpuwatch_mig_instance_info{")]
    assert info and all('placement_start="' in x and 'mig_uuid="MIG-' in x for x in info)


def test_openmetrics_render_for_backfill(fleet):
    text = render_at(fleet, T, node="gpu-node-000", openmetrics=True)
    assert text.endswith("# EOF\n")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" not in text
    sample = next(x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert sample.endswith(f" {T:.3f}")
