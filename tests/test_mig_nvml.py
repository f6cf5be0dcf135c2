"""On a real MIG-capable GPU (gpu marker: skipped without /dev/nvidia0), NVML's own possible
placements per profile id equal gpuwatch.mig's table (docs/architecture.md#mig-placement "confirm via NVML at runtime").
NVML returns them whether MIG mode is on or off, so this changes no GPU setting.
"""

from __future__ import annotations

import ctypes

import pytest

from gpuwatch import mig

pytestmark = pytest.mark.gpu


def possible_placements(pynvml, handle, profile_id: int) -> list[tuple[int, int]]:
    placements = (pynvml.c_nvmlGpuInstancePlacement_t * mig.MEMORY_SLICES)()
    count = ctypes.c_uint(mig.MEMORY_SLICES)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, placements, ctypes.byref(count))
    return sorted((placements[i].start, placements[i].size) for i in range(count.value))


def test_nvml_placements_match_the_table():
    pynvml = pytest.importorskip("pynvml")
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        try:
            first = possible_placements(pynvml, handle, 19)
        except pynvml.NVMLError as err:
            pytest.skip(f"{name}: no MIG placements from NVML ({err})")
        if len(first) != 7:
            pytest.skip(f"{name}: not an 8-slice MIG GPU (A100/H100/H200): 1g placements {first}")
        for profile in mig.PROFILES.values():
            got = possible_placements(pynvml, handle, profile.id)
            assert got == [(s, profile.size) for s in profile.starts], f"{name} profile {profile.id}"
    finally:
        pynvml.nvmlShutdown()
