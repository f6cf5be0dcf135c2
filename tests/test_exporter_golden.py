"""Golden exposition of the simulate source at a fixed time, and the attribution laws it must keep.

``render_at`` is what ``gpuwatch export --source simulate --simulate-kubelet`` serves at that
instant (the kubelet's allocations come from the same fleet). Golden files are for review:
``pytest --update-golden`` rewrites them. The other tests check behaviour the golden file shows:
one series per sharing pod (``vgpu``), no GPU_UTIL on MIG, units converted to DCGM's.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from gpuwatch.exporter.collector import render_at
from gpuwatch.fleet import DEFAULT_START, build_fleet, readings_at
from gpuwatch.sources.simulate import allocations_at

T = DEFAULT_START + 2.5 * 86400 + 1234.0  # Wednesday noon of the simulated week, +1234 s


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=40, seed=0)


@pytest.mark.parametrize("node", ["gpu-node-002", "gpu-node-004"])  # MIG node, time-sliced node
def test_golden_exposition(fleet, golden, node):
    golden(f"exporter/simulate-{node}.prom", render_at(fleet, T, node=node))


def test_render_is_deterministic_and_hostname_is_the_node(fleet):
    text = render_at(fleet, T, node="gpu-node-001", hostname_label="Hostname")
    assert text == render_at(fleet, T, node="gpu-node-001", hostname_label="Hostname")
    hosts = set(re.findall(r'Hostname="([^"]+)"', text))
    assert hosts == {"gpu-node-001"} and 'hostname="' not in text


def test_every_sharing_pod_gets_its_own_series(fleet):
    text = render_at(fleet, T, node="gpu-node-004")
    shared = [a for a in allocations_at(fleet, T, node="gpu-node-004") if a.vgpu is not None]
    assert len(shared) >= 2, "fixture time should have pods time-slicing a GPU"
    util = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and "vgpu=" in line]
    pods = {re.search(r'pod="([^"]+)"', line)[1] for line in util}
    assert pods == {a.pod for a in shared}
    series = Counter(line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#"))
    assert max(series.values()) == 1, "a series was emitted twice (last-writer-wins or duplicates)"


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
