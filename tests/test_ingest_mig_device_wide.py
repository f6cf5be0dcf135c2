"""A MIG GPU's device-wide fields through ingest: every compatibility profile's exposition of the same
instant loads to the same devices and samples (gpuwatch.ingest.promframes_mig).

The simulated fleet's MIG node (gpu-node-002: MIG GPUs beside whole ones) is rendered in each profile
(``render_at``, what ``gpuwatch export --compat PROFILE`` serves: the dcgm-exporter profiles repeat a
MIG GPU's power on every GPU instance, gpuwatch's serves it once per GPU) and read back with the
``.prom`` reader: the frames are equal, every instance row carries the board's power (counted once per
GPU by the analyses, which take the per-timestamp max), and no MIG GPU keeps a GPU-level sample row.
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import render_at
from gpuwatch.fleet import DEFAULT_START, build_fleet
from gpuwatch.ingest import promfile
from gpuwatch.sources.simulate import SimulatedSource

T = DEFAULT_START + 2.5 * 86400 + 1234.0
NODE = "gpu-node-002"


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=40, seed=0)


@pytest.fixture(scope="module")
def loaded(fleet):
    return {profile: promfile.parse(render_at(fleet, T, node=NODE, options=compat.options(profile)), at=T,
                                    source=profile) for profile in compat.PROFILES}


def test_every_profile_loads_the_same_devices_and_samples(loaded):
    first, *others = loaded.values()
    for profile, frames in zip(list(loaded)[1:], others, strict=True):
        for name in ("devices", "samples"):
            pd.testing.assert_frame_equal(frames[name], first[name], check_dtype=False, obj=f"{profile} {name}")


def test_instance_rows_carry_the_board_power_and_no_board_row_is_left(fleet, loaded):
    readings = SimulatedSource(fleet, node=NODE).read(T).readings
    mig = {r.device.gpu_uuid: r.values[155] for r in readings if r.device.is_mig}
    assert mig
    for profile, frames in loaded.items():
        samples = frames["samples"]
        rows = samples[samples["gpu_uuid"].isin(mig)]
        assert rows["mig_gi_id"].notna().all(), f"{profile}: a MIG GPU kept a GPU-level sample row"
        assert rows["power_watts"].tolist() == pytest.approx([mig[u] for u in rows["gpu_uuid"]]), profile
