"""Shared GPUs through ingest: every compatibility profile's exposition of the same instant loads to
the same (ts, device, pod) rows (gpuwatch.ingest.promframes_shared).

The simulated fleet at a time when pods time-slice GPUs on gpu-node-004 is rendered in each profile
(``render_at``, what ``gpuwatch export --compat PROFILE`` serves) and read back with the ``.prom``
reader: each pod holding a device gets one row in every profile; device-wide fields (power,
temperature-like fields) are the device's on every sharer's row, profiling fields (SM, tensor, DRAM
activity, NVLink traffic: the sharers' work together) are unknown on them; per-process fields are
each pod's own share in gpuwatch's profile and the device's value in the dcgm-exporter ones (which
cannot tell the sharers apart); no device-level row is left beside its pods.
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import render_at
from gpuwatch.fleet import DEFAULT_START, build_fleet
from gpuwatch.ingest import promfile
from gpuwatch.sources.simulate import SimulatedSource, allocations_at

T = DEFAULT_START + 2.5 * 86400 + 1234.0
NODE = "gpu-node-004"


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=40, seed=0)


@pytest.fixture(scope="module")
def loaded(fleet):
    out = {}
    for profile in compat.PROFILES:
        text = render_at(fleet, T, node=NODE, options=compat.options(profile))
        samples = promfile.parse(text, at=T, source=profile)["samples"]
        out[profile] = samples.set_index(["gpu_uuid", "pod"]).sort_index()
    return out


def _holders(fleet) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for a in allocations_at(fleet, T, node=NODE):
        found.setdefault(a.device_id, set()).add(a.pod)
    return found


def test_every_profile_loads_one_row_per_pod_holding_a_device(fleet, loaded):
    want = sorted((uuid, pod) for uuid, pods in _holders(fleet).items() for pod in pods)
    for profile, samples in loaded.items():
        assert sorted(samples.index) == want, profile
        assert samples.index.get_level_values("pod").notna().all(), profile


def test_device_wide_fields_are_the_devices_on_every_sharers_row(fleet, loaded):
    readings = {r.device.gpu_uuid: r.values for r in SimulatedSource(fleet, node=NODE).read(T).readings}
    for profile, samples in loaded.items():
        for (uuid, _pod), row in samples.iterrows():
            assert row["power_watts"] == pytest.approx(readings[uuid][155]), profile


def test_per_process_fields_are_each_pods_share_only_where_served(fleet, loaded):
    readings = {r.device.gpu_uuid: r for r in SimulatedSource(fleet, node=NODE).read(T).readings}
    shared = {uuid: pods for uuid, pods in _holders(fleet).items() if len(pods) > 1}
    assert shared
    for uuid, pods in shared.items():
        device = readings[uuid].values[203] / 100
        for profile in ("dcgm-exporter-4.8.2", "dcgm-exporter-4.8.4", "dcgm-exporter-4.9"):
            got = loaded[profile].loc[uuid, "gpu_util"]
            assert got.tolist() == pytest.approx([device] * len(got)), (profile, uuid)
        own = loaded["gpuwatch"].loc[uuid, "gpu_util"]
        assert own.sum() <= device + 1e-9
        processes = {p.pod: p.values[203] / 100 for p in readings[uuid].processes}
        if sum(processes.values()) <= device:
            assert own.to_dict() == pytest.approx({pod: processes.get(pod, 0.0) for pod in pods})


def test_the_two_naming_generations_load_the_same_values(loaded):
    a, b = loaded["dcgm-exporter-4.8.2"], loaded["dcgm-exporter-4.9"]
    columns = [c for c in a.columns if c not in ("ts",) and pd.api.types.is_float_dtype(a[c])]
    pd.testing.assert_frame_equal(a[columns], b[columns], check_dtype=False, rtol=1e-9)


def test_profiling_fields_are_unknown_on_a_shared_devices_rows_and_kept_on_a_pod_alone(fleet, loaded):
    """SM activity on a device several pods hold is their work together, no pod's (a spin kernel beside a
    matmul reads the matmul's on a real H100, tests/test_real_h100.py): unknown on each sharer's row in
    every profile, so staging judges no sharer by its neighbour; a pod alone on its GPU keeps the device's."""
    from gpuwatch.ingest.promframes_shared import ACTIVITY

    readings = {r.device.gpu_uuid: r.values for r in SimulatedSource(fleet, node=NODE).read(T).readings}
    holders = _holders(fleet)
    alone = [uuid for uuid, pods in holders.items() if len(pods) == 1 and 1002 in readings[uuid]]
    assert alone and any(len(pods) > 1 for pods in holders.values())
    for profile, samples in loaded.items():
        for (uuid, _pod), row in samples.iterrows():
            if len(holders[uuid]) > 1:
                assert row[list(ACTIVITY)].isna().all(), (profile, uuid)
            elif uuid in alone:
                assert row["sm_active"] == pytest.approx(readings[uuid][1002]), (profile, uuid)
