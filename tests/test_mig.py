"""gpuwatch.mig: the placement table against nvidia-smi's own output, profile-name parsing across
drivers and GPUs, and the placement search against brute force (hypothesis): layouts never
overlap and respect valid starts and max counts, stranded slices match a slice-by-slice
enumeration, and the repack is valid, optimal and never worse than the current layout.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch import mig
from gpuwatch.mig import Placement as P

# Verbatim `nvidia-smi mig -lgipp` (A100/H100; reference/dcgm-and-mig.md §3.2) and the MIG user
# guide's max instances / compute slices per profile id: the spec, transcribed independently.
LGIPP = """GPU 0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU 0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU 0 Profile ID 15 Placements: {0,2,4,6}:2
GPU 0 Profile ID 14 Placements: {0,2,4}:2
GPU 0 Profile ID 9 Placements: {0,4}:4
GPU 0 Profile ID 5 Placement : {0}:4
GPU 0 Profile ID 0 Placement : {0}:8"""
MAX_COUNT = {19: 7, 20: 1, 15: 4, 14: 3, 9: 2, 5: 1, 0: 1}
COMPUTE = {19: 1, 20: 1, 15: 1, 14: 2, 9: 3, 5: 4, 0: 7}


def spec() -> dict[int, tuple[tuple[int, ...], int]]:
    out = {}
    for line in LGIPP.splitlines():
        pid, starts, size = re.search(r"Profile ID (\d+) Placements? ?: \{([\d,]+)\}:(\d)", line).groups()
        out[int(pid)] = (tuple(int(s) for s in starts.split(",")), int(size))
    return out


def brute_valid(placements) -> bool:
    """Cell by cell: each of the 8 memory slices has at most one owner; starts, counts, compute."""
    table, cells = spec(), [0] * 8
    for p in placements:
        starts, size = table[p.profile_id]
        if p.start not in starts:
            return False
        for cell in range(p.start, p.start + size):
            cells[cell] += 1
    counts = {pid: sum(p.profile_id == pid for p in placements) for pid in table}
    return (max(cells) <= 1 and all(counts[pid] <= MAX_COUNT[pid] for pid in table)
            and sum(COMPUTE[p.profile_id] for p in placements) <= 7)


def brute_stranded(placements, demand) -> list[int]:
    """A free slice is stranded unless creating some demanded instance over it would be valid."""
    table = spec()
    taken = {c for p in placements for c in range(p.start, p.start + table[p.profile_id][1])}
    usable = set()
    for pid in demand:
        for start in table[pid][0]:
            if brute_valid([*placements, P(pid, start)]):
                usable.update(range(start, start + table[pid][1]))
    return [c for c in range(8) if c not in taken and c not in usable]


layouts = st.sampled_from(mig.all_layouts())
demands = st.sets(st.sampled_from(sorted(mig.PROFILES)), min_size=1)


def test_table_matches_nvidia_smi():
    table = spec()
    assert set(mig.PROFILES) == set(table)
    for pid, (starts, size) in table.items():
        profile = mig.PROFILES[pid]
        assert (profile.starts, profile.size) == (starts, size)
        assert (profile.max_count, profile.compute_slices) == (MAX_COUNT[pid], COMPUTE[pid])


@given(st.sets(st.sampled_from(mig.ALL_PLACEMENTS), max_size=8))
def test_all_layouts_is_exactly_the_valid_sets(placements):
    assert (tuple(sorted(placements)) in set(mig.all_layouts())) == brute_valid(placements)


def test_every_enumerated_layout_is_valid_unique_and_none_missing():
    found = mig.all_layouts()
    assert len(set(found)) == len(found)
    assert all(brute_valid(layout) and mig.check(layout) == layout for layout in found)
    # valid sets are closed under removal, so growing valid sets one placement at a time finds all
    placements = [P(pid, s) for pid, (starts, _) in spec().items() for s in starts]
    valid, frontier = {frozenset()}, [frozenset()]
    while frontier:
        grown = {layout | {p} for layout in frontier for p in placements
                 if p not in layout and brute_valid([*layout, p])} - valid
        valid |= grown
        frontier = list(grown)
    assert {frozenset(layout) for layout in found} == valid


@pytest.mark.parametrize(("layout", "fault"), [
    ([P(19, 0), P(14, 0)], "overlaps"),
    ([P(14, 1)], "not a valid placement"),
    ([P(20, 0), P(20, 3)], "at most 1"),
    ([P(7, 0)], "unknown MIG profile id 7"),
])
def test_check_names_the_fault(layout, fault):
    with pytest.raises(ValueError, match=fault):
        mig.check(layout)


def test_known_fragmentation_facts():
    seven = [P(19, s) for s in range(7)]
    assert mig.free_slices(seven) == (7,)
    assert mig.stranded_slices(seven, [19]) == (7,)  # 1g can never use slice 7
    assert mig.stranded_slices([P(19, 0), P(19, 1), P(19, 5)], [9]) == (2, 3, 4, 6, 7)  # 1g at 5 blocks 3g@4
    assert mig.free_slices([P(5, 0), P(9, 4)]) == ()  # 4g@0 + 3g@4 uses all
    assert mig.stranded_slices([P(9, 0)], [15]) == ()  # 1g double-memory reaches slice 7 from 6


def test_repack_moves_the_blocking_instance():
    plan = mig.repack([P(19, 0), P(19, 1), P(19, 5)], {9: 1.0})
    assert plan.fits and plan.moves == 1
    assert P(9, 4) in mig.placeable(plan.layout, 9)
    stuck = mig.repack([P(19, s) for s in range(7)], {9: 1.0})  # no room for a 3g whatever we do
    assert (stuck.fits, stuck.moves, stuck.unfit) == (False, 0, (9,))


@settings(max_examples=300)
@given(layouts, demands)
def test_stranded_equals_brute_force(layout, demand):
    assert list(mig.stranded_slices(layout, demand)) == brute_stranded(list(layout), demand)


def score(layout, current, weights):
    """Independent scoring: unplaceable demand weight, moved instances, stranded slices."""
    unfit = sum(w for pid, w in weights.items() if not any(brute_valid([*layout, P(pid, s)]) for s in spec()[pid][0]))
    moved = len(current) - len(set(current) & set(layout))
    return unfit, moved, len(brute_stranded(list(layout), weights))


@settings(max_examples=150, deadline=None)
@given(layouts.filter(lambda layout: len(layout) <= 4),
       st.dictionaries(st.sampled_from(sorted(mig.PROFILES)), st.integers(1, 5), min_size=1))
def test_repack_is_valid_optimal_and_never_worse(current, weights):
    plan = mig.repack(current, weights)
    assert brute_valid(plan.layout)
    assert sorted(p.profile_id for p in plan.layout) == sorted(p.profile_id for p in current)
    got = score(plan.layout, current, weights)
    assert got == (sum(weights[k] for k in plan.unfit), plan.moves, len(plan.stranded))
    assert got <= score(current, current, weights)
    # brute force: every way to place each in-use instance at any valid start of its profile
    options = [[P(p.profile_id, s) for s in spec()[p.profile_id][0]] for p in current]
    best = min(score(c, current, weights) for c in itertools.product(*options) if brute_valid(c))
    assert got == best


@pytest.mark.parametrize(("name", "memory_gib", "expected"), [
    ("1g.10gb", 79.65, 19), ("1g.20gb", 79.65, 15), ("2g.20gb", 79.65, 14), ("3g.40gb", 79.65, 9),
    ("4g.40gb", 79.65, 5), ("7g.80gb", 79.65, 0), ("3g.39gb", 80.0, 9),   # A100-80GB on 535/545 drivers
    ("1g.5gb", 39.59, 19), ("1g.10gb", 39.59, 15), ("3g.20gb", 39.59, 9),  # A100-40GB
    ("1g.18gb", 140.4, 19), ("1g.35gb", 140.4, 15), ("3g.71gb", 140.4, 9), ("7g.141gb", 140.4, 0),  # H200
    ("1g.10gb+me", 79.65, 20), ("nvidia.com/mig-1g.10gb.me", 79.65, 20),
    ("nvidia.com/mig-3g.40gb", 79.65, 9), ("1g.18gb", None, 19), ("1g.20gb", None, 15),
])
def test_parse_profile_keys_on_slices_not_names(name, memory_gib, expected):
    memory = None if memory_gib is None else memory_gib * 2**30
    assert mig.parse_profile(name, gpu_memory_bytes=memory) == expected


@pytest.mark.parametrize(("name", "memory_gib", "fault"), [
    ("1g.10gb", None, "ambiguous"),
    ("nvidia.com/gpu", None, "not a MIG profile"),
    ("5g.50gb", None, "not in the A100/H100/H200 placement table"),
    ("4g.24gb", 24.0, "does not match"),  # A30: 4 memory slices, a different table
])
def test_parse_profile_rejects_what_it_cannot_place(name, memory_gib, fault):
    memory = None if memory_gib is None else memory_gib * 2**30
    with pytest.raises(ValueError, match=fault):
        mig.parse_profile(name, gpu_memory_bytes=memory)


def test_best_case_and_describe():
    layout = mig.best_case([19, 19, 19], demand=[9])
    assert mig.stranded_slices(layout, [9]) == (3,) and P(9, 4) in mig.placeable(layout, 9)
    assert mig.describe([P(19, 5), P(9, 0)], {9: "3g.40gb"}) == "3g.40gb@0,1g@5"
    with pytest.raises(ValueError, match="cannot share one GPU"):
        mig.best_case([5, 5], demand=[19])


def test_moves_pair_what_a_repack_moves_and_keep_what_stays():
    from gpuwatch.mig import Placement, moves, repack

    one_g = 19  # 1g.10gb on an 80 GB GPU: one memory slice
    current = [Placement(one_g, s) for s in (2, 4, 5, 6)]
    plan = repack(current, {one_g: 1.0, 5: 1.0})  # 5 = 4g.40gb: wants slices 0-3 free or 4-7
    pairs = moves(current, plan.layout)
    assert len(pairs) == plan.moves
    assert {src for src, _ in pairs} | set(plan.layout) >= set(current) - {src for src, _ in pairs}
    assert all(src.profile_id == dst.profile_id and src != dst for src, dst in pairs)
    assert moves(current, current) == ()
    with pytest.raises(ValueError, match="same instances"):
        moves(current, [Placement(one_g, 0)])
