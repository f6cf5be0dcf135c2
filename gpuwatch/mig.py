"""MIG geometry: the placement table (docs/architecture.md#mig-placement) and an exact placement search.

A100, H100 and H200 GPUs have 8 memory slices and 7 compute slices; a GPU instance occupies
``size`` consecutive memory slices from one of its profile's valid ``start`` slices. Everything
here keys on NVML profile ids, never on names (names vary by driver and memory size). The space is
tiny (25 placements, 2,319 valid layouts): the search enumerates them once and memoizes; pure Python.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, reduce

from gpuwatch.units import MIB

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
# GPU models with this geometry (7 compute, 8 memory slices), matched case-insensitively on the model
# name DCGM/NVML report: A100/A800, H100/H800/H20/H200/GH200, B100/B200/GB200/B300/GB300 (NVIDIA's MIG
# user guide, supported GPUs). Anything else (L40S, L4, A10, consumer boards; A30's 4-slice geometry)
# is never offered a MIG profile: an unknown model is not MIG-capable.
CAPABLE_MODEL_PATTERN = r"\b(a100|a800|h100|h800|h20|h200|gh200|b100|b200|gb200|b300|gb300)\b"


@dataclass(frozen=True)
class Profile:
    """One MIG profile: compute slices, memory slices (``size``), valid starts, max instances."""

    id: int
    label: str  # driver-independent short name, for display only
    compute_slices: int
    size: int
    starts: tuple[int, ...]
    max_count: int


PROFILES: dict[int, Profile] = {p.id: p for p in (
    Profile(19, "1g", 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    Profile(20, "1g+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    Profile(15, "1g.2x", 1, 2, (0, 2, 4, 6), 4),
    Profile(14, "2g", 2, 2, (0, 2, 4), 3),
    Profile(9, "3g", 3, 4, (0, 4), 2),
    Profile(5, "4g", 4, 4, (0,), 1),
    Profile(0, "7g", 7, 8, (0,), 1),
)}


@dataclass(frozen=True, order=True)
class Placement:
    """A GPU instance's position: profile id and first memory slice."""

    profile_id: int
    start: int

    @property
    def profile(self) -> Profile:
        return PROFILES[self.profile_id]

    @property
    def mask(self) -> int:  # bit i set = memory slice i occupied
        return ((1 << self.profile.size) - 1) << self.start

    def __str__(self) -> str:
        return f"{self.profile.label}@{self.start}"


Layout = tuple[Placement, ...]  # sorted, so equal layouts are equal tuples
ALL_PLACEMENTS: Layout = tuple(sorted(Placement(p.id, s) for p in PROFILES.values() for s in p.starts))


# --- what real GPUs reported --------------------------------------------------------------------

@dataclass(frozen=True)
class Captured:
    """One GPU memory size's MIG profiles as NVML reported them: a GPU instance's memory (MiB,
    nvmlGpuInstanceProfileInfo ``memorySizeMB``; a MIG device's FB total is the same number) by its
    memory slices — every profile of one size holds the same (an H100's 1g.20gb and 2g.20gb: 20096) —
    SMs and names by profile, and the whole GPU's SMs. Neither memory nor SMs is a slice fraction: an
    H100's 1g.10gb holds 9984 MiB, not 81559 / 8 = 10195, and 16 of 132 SMs, not 1/7 of them."""

    gpu_sms: int | None
    memory_mib: Mapping[int, int]  # memory slices -> an instance's MiB
    sms: Mapping[int, int]  # profile id -> SMs (missing: not captured)
    names: Mapping[int, str]  # profile id -> NVIDIA's name without "MIG " (a formula misses some: 3g.71gb)

    def instance_mib(self, profile_id: int) -> int | None:
        return self.memory_mib.get(PROFILES[profile_id].size)


# Keyed by the whole GPU's memory in MiB as NVML and DCGM report it (FB total); only what real GPUs
# answered. 81559 = H100 80GB HBM3: tests/fixtures/real/h100-sxm-580 (driver 580, every profile; a public
# nvidia-smi capture of MIG instances at driver 590 shows the same MiB). 143771 = H200 141GB: the MIG
# instances of a public nvidia-smi capture at driver 590 (1g.18gb 16384, 2g.35gb 33280, 3g.71gb 71424 MiB),
# names and SMs from a public ``nvidia-smi mig -lgip`` (NVIDIA mig-parted issue 120). 81920 = A100 80GB:
# a public ``nvidia-smi mig -lgip`` (mig-parted issue 97: 1g.10gb 9.50 GiB 14 SMs, 2g.20gb 19.50 GiB
# 28 SMs, 3g.40gb 39.25 GiB 42 SMs), each GiB figure's lower rounding bound in MiB (9.495 GiB -> 9722),
# of the GPU's 108 SMs. A size missing here has unknown instance memory.
CAPTURED: dict[int, Captured] = {
    81559: Captured(132, {1: 9984, 2: 20096, 4: 40448, 8: 81152},
                    {19: 16, 20: 16, 15: 26, 14: 32, 9: 60, 5: 64, 0: 132},
                    {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb",
                     0: "7g.80gb"}),
    143771: Captured(132, {1: 16384, 2: 33280, 4: 71424}, {19: 16, 15: 26, 14: 32, 9: 60, 5: 64},
                     {19: "1g.18gb", 20: "1g.18gb+me", 15: "1g.35gb", 14: "2g.35gb", 9: "3g.71gb", 5: "4g.71gb",
                      0: "7g.141gb"}),
    81920: Captured(108, {1: 9722, 2: 19962, 4: 40186}, {19: 14, 14: 28, 9: 42},
                    {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb",
                     0: "7g.80gb"}),
}


def captured_profiles(gpu_memory_bytes: float) -> Captured | None:
    """What real GPUs of this memory size reported for their MIG profiles (None: none captured)."""
    return CAPTURED.get(int(gpu_memory_bytes) // MIB)


# --- profile names ------------------------------------------------------------------------------

_NAME = re.compile(r"^(?:nvidia\.com/mig-)?(\d)g\.(\d+(?:\.\d+)?)gb([+.]me)?$")
_BY_COMPUTE = {2: 14, 3: 9, 4: 5, 7: 0}
# 1g names that say 1 or 2 memory slices on any GPU (1g.10gb is 19 on 80 GB GPUs, 15 on 40 GB).
_ONE_G_SLICES = {5: 1, 12: 1, 18: 1, 23: 1, 20: 2, 24: 2, 35: 2, 36: 2, 45: 2}


def parse_profile(name: str, *, gpu_memory_bytes: float | None = None) -> int:
    """Profile id of a MIG profile name or device-plugin resource (``nvidia.com/mig-1g.10gb``).

    Accepts driver variants (``3g.39gb``, ``1g.18gb``, ``1g.10gb+me``, resource ``….me``). A 1g
    name needs ``gpu_memory_bytes`` (the whole GPU's) where its memory is ambiguous. Raises
    ``ValueError`` naming the problem for anything not in the 8-slice table.
    """
    match = _NAME.match(name.strip().lower())
    if not match:
        raise ValueError(f"not a MIG profile name: {name!r} (expected e.g. '1g.10gb', 'nvidia.com/mig-3g.40gb')")
    compute, gigabytes, media = int(match[1]), float(match[2]), bool(match[3])
    if compute == 1:
        return 20 if media else (19 if _one_g_slices(name, gigabytes, gpu_memory_bytes) == 1 else 15)
    if media or compute not in _BY_COMPUTE:
        raise ValueError(f"MIG profile {name!r} is not in the A100/H100/H200 placement table")
    profile_id = _BY_COMPUTE[compute]
    if gpu_memory_bytes and round(gigabytes * 2**33 / gpu_memory_bytes) != PROFILES[profile_id].size:
        raise ValueError(f"MIG profile {name!r} does not match a {gpu_memory_bytes / 2**30:.0f} GiB GPU's table")
    return profile_id


def _one_g_slices(name: str, gigabytes: float, gpu_memory_bytes: float | None) -> int:
    if gpu_memory_bytes:  # GiB per memory slice = memory / 2**30 / 8
        return 1 if gigabytes * 2**33 / gpu_memory_bytes < 1.5 else 2
    if int(gigabytes) in _ONE_G_SLICES:
        return _ONE_G_SLICES[int(gigabytes)]
    raise ValueError(f"MIG profile {name!r} is ambiguous (1 or 2 memory slices) without the GPU's memory")


# --- layouts ------------------------------------------------------------------------------------

def check(layout: Iterable[Placement]) -> Layout:
    """Validate a GPU's instances; returns them sorted. Raises ``ValueError`` naming the fault."""
    layout = tuple(sorted(layout))
    used, compute = 0, 0
    for placement in layout:
        if placement.profile_id not in PROFILES:
            raise ValueError(f"unknown MIG profile id {placement.profile_id} (known: {sorted(PROFILES)})")
        if placement.start not in placement.profile.starts:
            raise ValueError(f"{placement}: start {placement.start} is not a valid placement "
                             f"for profile {placement.profile_id}")
        if used & placement.mask:
            raise ValueError(f"{placement} overlaps another instance on the same GPU")
        used, compute = used | placement.mask, compute + placement.profile.compute_slices
    for profile_id, n in Counter(p.profile_id for p in layout).items():
        if n > PROFILES[profile_id].max_count:
            raise ValueError(f"{n} instances of profile {profile_id}; at most {PROFILES[profile_id].max_count} fit")
    if compute > COMPUTE_SLICES:
        raise ValueError(f"instances use {compute} compute slices; a GPU has {COMPUTE_SLICES}")
    return layout


def occupied_mask(layout: Iterable[Placement]) -> int:
    return reduce(int.__or__, (p.mask for p in layout), 0)


def free_slices(layout: Iterable[Placement]) -> tuple[int, ...]:
    """Memory slices no instance occupies."""
    mask = occupied_mask(layout)
    return tuple(i for i in range(MEMORY_SLICES) if not mask >> i & 1)


def placeable(layout: Iterable[Placement], profile_id: int) -> Layout:
    """Placements of ``profile_id`` that could be created next on a GPU holding ``layout``."""
    return _placeable(tuple(sorted(layout)), profile_id)


@cache
def _placeable(layout: Layout, profile_id: int) -> Layout:
    profile = PROFILES[profile_id]
    used = occupied_mask(layout)
    count = sum(p.profile_id == profile_id for p in layout)
    compute = sum(p.profile.compute_slices for p in layout)
    if count >= profile.max_count or compute + profile.compute_slices > COMPUTE_SLICES:
        return ()
    return tuple(p for p in (Placement(profile_id, s) for s in profile.starts) if not used & p.mask)


def stranded_slices(layout: Iterable[Placement], demand: Iterable[int]) -> tuple[int, ...]:
    """Free memory slices on which no profile in ``demand`` (ids) can be placed."""
    return _stranded(tuple(sorted(layout)), frozenset(demand))


@cache
def _stranded(layout: Layout, demand: frozenset[int]) -> tuple[int, ...]:
    usable = occupied_mask(p for profile_id in demand for p in _placeable(layout, profile_id))
    return tuple(i for i in free_slices(layout) if not usable >> i & 1)


@cache
def all_layouts() -> tuple[Layout, ...]:
    """Every valid layout (the empty one included), each sorted."""
    out: list[Layout] = []

    def extend(layout: Layout, index: int) -> None:
        out.append(layout)
        for i in range(index, len(ALL_PLACEMENTS)):
            with contextlib.suppress(ValueError):  # placements in sorted order: layouts stay sorted
                extend(check((*layout, ALL_PLACEMENTS[i])), i + 1)

    extend((), 0)
    return tuple(out)


@cache
def _layouts_by_profiles() -> dict[tuple[int, ...], tuple[Layout, ...]]:
    index: dict[tuple[int, ...], list[Layout]] = {}
    for layout in all_layouts():
        index.setdefault(tuple(sorted(p.profile_id for p in layout)), []).append(layout)
    return {k: tuple(v) for k, v in index.items()}


def layouts_for(profile_ids: Iterable[int]) -> tuple[Layout, ...]:
    """Every valid layout holding exactly these profiles (a multiset); empty if none fits."""
    return _layouts_by_profiles().get(tuple(sorted(profile_ids)), ())


@dataclass(frozen=True)
class Repack:
    """The cheapest re-layout of a GPU's in-use instances (idle instances are destroyed).

    ``moves``: in-use instances destroyed and recreated elsewhere; ``unfit``: demanded profile ids
    that still cannot be created; ``stranded``: free slices no demanded profile can use.
    """

    layout: Layout
    moves: int
    unfit: tuple[int, ...]
    stranded: tuple[int, ...]

    @property
    def fits(self) -> bool:
        return not self.unfit


def repack(in_use: Iterable[Placement], demand: Mapping[int, float]) -> Repack:
    """Search every layout of the in-use instances for the one that lets the most demand be placed.

    Order of preference: least unplaceable demand weight (``demand`` = profile id -> count or
    frequency), then fewest moved in-use instances, then fewest stranded slices, then the first
    layout in sorted order (deterministic). The current layout is always a candidate, so the
    result is never worse than doing nothing.
    """
    weights = tuple(sorted((k, float(v)) for k, v in demand.items() if v > 0))
    return _repack(check(in_use), weights)


@cache
def _repack(current: Layout, weights: tuple[tuple[int, float], ...]) -> Repack:
    demand = frozenset(k for k, _ in weights)

    def key(layout: Layout) -> tuple:
        unfit_weight = sum(w for k, w in weights if not _placeable(layout, k))
        return unfit_weight, len(set(current) - set(layout)), len(_stranded(layout, demand)), layout

    best = min(layouts_for(p.profile_id for p in current), key=key)  # current itself is a candidate
    return Repack(layout=best, moves=len(set(current) - set(best)), stranded=_stranded(best, demand),
                  unfit=tuple(k for k, _ in weights if not _placeable(best, k)))


def moves(current: Iterable[Placement], target: Iterable[Placement]) -> tuple[tuple[Placement, Placement], ...]:
    """Which instance goes where: (from, to) for each in-use instance of ``current`` that ``target``
    places elsewhere. Instances at the same place stay; the others pair up per profile in slice order
    (so the count equals Repack.moves). ``target`` must hold the same profiles as ``current``."""
    current, target = set(current), set(target)
    leaving = sorted(current - target, key=lambda p: (p.profile_id, p.start))
    arriving = sorted(target - current, key=lambda p: (p.profile_id, p.start))
    if [p.profile_id for p in leaving] != [p.profile_id for p in arriving]:
        raise ValueError("a repack must hold the same instances as the layout it replaces")
    return tuple(zip(leaving, arriving, strict=True))


def best_case(profile_ids: Iterable[int], demand: Iterable[int]) -> Layout:
    """The layout of these profiles with the fewest stranded slices; ``ValueError`` if none fits."""
    demand = frozenset(demand)
    profile_ids = tuple(profile_ids)
    candidates = layouts_for(profile_ids)
    if not candidates:
        raise ValueError(f"MIG profiles {sorted(profile_ids)} cannot share one GPU")
    return min(candidates, key=lambda layout: (len(_stranded(layout, demand)), layout))


def describe(layout: Iterable[Placement], names: Mapping[int, str] | None = None) -> str:
    """``3g.40gb@0,1g.10gb@5`` with ``names`` (profile id -> name), else driver-independent labels."""
    names = names or {}
    ordered = sorted(layout, key=lambda p: p.start)
    return ",".join(f"{names.get(p.profile_id, p.profile.label)}@{p.start}" for p in ordered)
