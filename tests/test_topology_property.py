"""Property tests against brute force on random small nodes (docs/architecture.md#topology): the block
searches of gpuwatch.topology (including unknown pairs and unknown NUMA nodes), and the placement
finisher's judgement: an optimal placement is never flagged, a pod or job that could not have been
placed better is never charged, and one that could have been is flagged."""

from __future__ import annotations

from itertools import combinations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch import topology
from gpuwatch.analyses import topology_placement as tp
from gpuwatch.analyses.node_layouts import Node

PARAMS = {"placement_comm_share": 0.1, "placement_numa_penalty": 0.05}
T = pd.Timestamp("2026-03-02T01:00:00")


@st.composite
def layouts(draw, min_size: int = 1, max_size: int = 6, unknown: bool = True):
    n = draw(st.integers(min_size, max_size))
    gpus = [f"g{i}" for i in range(n)]
    links = []
    for i, j in combinations(range(n), 2):
        r = draw(st.one_of(st.none(), st.integers(0, 5)) if unknown else st.integers(0, 5))
        if r is not None:
            links.append((gpus[i], gpus[j], topology.LINKS[r], draw(st.sampled_from((4, 12, 18))) if r == 0 else None))
    numa = {g: draw(st.one_of(st.none(), st.integers(0, 1)) if unknown else st.integers(0, 1)) for g in gpus}
    return topology.Layout.build(gpus, links, numa)


def _subsets(mask: int):
    bits = [i for i in range(mask.bit_length()) if mask >> i & 1]
    for size in range(len(bits) + 1):
        for combo in combinations(bits, size):
            yield sum(1 << i for i in combo)


def _clique(layout, mask: int, max_rank: int, same_numa: bool) -> bool:
    members = layout.members(mask)
    if same_numa and any(layout.numa[i] is None for i in members):
        return False
    for i, j in combinations(members, 2):
        r = layout.ranks[i][j]
        if r is None or r > max_rank or (same_numa and layout.numa[i] != layout.numa[j]):
            return False
    return True


@settings(max_examples=150, deadline=None)
@given(layouts(), st.integers(0, 63), st.integers(0, 5), st.booleans())
def test_largest_free_block_is_the_brute_force_maximum(layout, free, max_rank, same_numa):
    free &= (1 << layout.size) - 1
    got = layout.largest_block(free, max_rank=max_rank, same_numa=same_numa)
    best = max((m.bit_count() for m in _subsets(free) if _clique(layout, m, max_rank, same_numa)), default=0)
    assert got & ~free == 0 and _clique(layout, got, max_rank, same_numa)
    assert got.bit_count() == best


@settings(max_examples=150, deadline=None)
@given(layouts(), st.integers(0, 63), st.integers(1, 6))
def test_best_block_is_the_brute_force_best(layout, free, k):
    free &= (1 << layout.size) - 1
    keys = []
    for m in _subsets(free):
        if m.bit_count() == k and layout.worst_rank(m) is not None:
            span = layout.numa_span(m)
            keys.append((layout.worst_rank(m), span if span is not None else k + 1, layout.members(m)))
    got = layout.best_block(free, k)
    if not keys:
        assert got is None
    else:
        assert got is not None and got & ~free == 0
        span = layout.numa_span(got)
        assert (layout.worst_rank(got), span if span is not None else k + 1, layout.members(got)) == min(keys)


def _packing(layout, free: int, k: int) -> int:
    blocks = [m for m in _subsets(free) if m.bit_count() == k and _clique(layout, m, 0, False)]

    def best(i: int, used: int) -> int:
        if i == len(blocks):
            return 0
        skip = best(i + 1, used)
        return max(skip, 1 + best(i + 1, used | blocks[i])) if not blocks[i] & used else skip
    return best(0, 0)


@settings(max_examples=100, deadline=None)
@given(layouts(max_size=7), st.integers(0, 127), st.sampled_from(topology.BLOCK_SIZES))
def test_disjoint_nvlink_blocks_are_the_brute_force_packing(layout, free, k):
    free &= (1 << layout.size) - 1
    assert topology.disjoint_blocks(layout, free, k) == _packing(layout, free, k)


def _node(layout, name: str = "n", model: str = "m") -> Node:
    known = all(layout.ranks[i][j] is not None for i, j in combinations(range(layout.size), 2))
    return Node(name=name, gpu_model=model, layout=layout, indices=tuple(range(layout.size)),
                clique=(None,) * layout.size, known=known)


def _alloc(pod: str, node: str, mask: int, *, job: str | None = None) -> tp.Alloc:
    return tp.Alloc(namespace="ns", pod=pod, node=node, team="t", job=job, start=T, end=None, gpus=mask.bit_count(),
                    mask=mask, whole=True, gpu_hours=1.0, cost=10.0, nvlink_sum=0.0, nvlink_samples=0)


def _brute_better(layout, candidates: int, own: int) -> bool:
    k = own.bit_count()
    return any(topology.better(layout, m, own) for m in _subsets(candidates) if m.bit_count() == k)


@settings(max_examples=150, deadline=None)
@given(layouts(min_size=2, max_size=6), st.data())
def test_a_pod_is_flagged_exactly_when_a_better_block_was_free(layout, data):
    full = (1 << layout.size) - 1
    own = data.draw(st.integers(1, full).filter(lambda m: m.bit_count() >= 2))
    held = data.draw(st.integers(0, full)) & ~own
    allocs = [_alloc("pod", "n", own)] + ([_alloc("other", "n", held)] if held else [])
    fleet = tp.Fleet({"n": _node(layout)}, allocs)
    row = tp.pod_row(fleet, allocs[0], PARAMS)
    if not fleet.nodes["n"].known:
        assert row["verdict"] == tp.UNKNOWN and row["penalty_usd"] is None
        return
    could = _brute_better(layout, full & ~held, own)
    assert (row["verdict"] == "misplaced") == could
    if not could:  # could not have been placed better: never charged
        assert row["penalty_share"] == 0 and row["penalty_usd"] == 0
    elif row["penalty_share"] is not None:
        assert 0 < row["penalty_share"] < 1 or row["penalty_share"] == 0.0


@settings(max_examples=100, deadline=None)
@given(layouts(min_size=2, max_size=6, unknown=False), st.data())
def test_an_optimal_placement_is_never_flagged(layout, data):
    full = (1 << layout.size) - 1
    held = data.draw(st.integers(0, full))
    k = data.draw(st.integers(2, layout.size))
    best = layout.best_block(full & ~held, k)
    if best is None:
        return
    allocs = [_alloc("pod", "n", best)] + ([_alloc("other", "n", held)] if held else [])
    row = tp.pod_row(tp.Fleet({"n": _node(layout)}, allocs), allocs[0], PARAMS)
    assert row["verdict"] == "well_placed" and row["penalty_usd"] == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=5), st.integers(1, 2), st.data())
def test_a_job_on_as_few_nodes_as_possible_is_never_charged(held_counts, per_pod, data):
    """Nodes of 4 NV GPUs with some held; a job of n pods x per_pod GPUs placed on chosen nodes."""
    layout = topology.Layout.build([f"g{i}" for i in range(4)],
                                   [(f"g{i}", f"g{j}", "NV", 12) for i, j in combinations(range(4), 2)],
                                   {f"g{i}": 0 for i in range(4)})
    names = [f"n{i}" for i in range(len(held_counts))]
    allocs, pods = [], []
    room = {}
    for name, held in zip(names, held_counts, strict=True):
        if held:
            allocs.append(_alloc(f"fill-{name}", name, (1 << held) - 1))
        room[name] = (4 - held) // per_pod
    slots = [name for name in names for _ in range(room[name])]
    if len(slots) < 2:
        return
    chosen = data.draw(st.lists(st.sampled_from(slots), min_size=2, max_size=len(slots)))
    used: dict[str, int] = {}
    for i, name in enumerate(chosen):
        if used.get(name, 0) >= room[name]:
            return
        start = held_counts[names.index(name)] + used.get(name, 0) * per_pod
        used[name] = used.get(name, 0) + 1
        pods.append(_alloc(f"p{i}", name, ((1 << per_pod) - 1) << start, job="job"))
    fleet = tp.Fleet({n: _node(layout, n) for n in names}, allocs + pods)
    row = tp.job_row(fleet, pods, PARAMS)
    capacities = sorted(room.values(), reverse=True)
    needed = next(m for m in range(1, len(capacities) + 1) if sum(capacities[:m]) >= len(pods))
    assert row["min_nodes"] == needed
    if len(used) <= needed:
        assert row["verdict"] != "spread" and row["penalty_usd"] in (0, 0.0)
    else:  # charged only against one node: spread over several where several were needed anyway keeps the network
        assert row["verdict"] == "spread"
        assert (row["penalty_usd"] > 0) if needed == 1 else (row["penalty_usd"] == 0)
