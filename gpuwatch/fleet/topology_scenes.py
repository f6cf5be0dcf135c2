"""The scenes gpuwatch.fleet.topology_plant plays on its extra nodes: each takes a few nodes from an
instant ``t0`` and returns when its last pod ends. A lane runs a cycle of scenes on the same nodes in
evenly spaced slots over the window, at most ``cap`` of them, so short and long traces hold about as
many of each.

Timing: fillers (one-GPU pods) take their GPUs in a scene's first 5 minutes; the scene's subject
starts (or is created, when it must wait) 10-20 minutes in, while they all hold.

* node scenes, on one node, a k-GPU pod: ``misplaced`` on a block worse (worst link, then NUMA nodes)
  than the best k-block free; ``decoy`` where the best free k-block is worse than an empty node's, on
  that block; ``good`` on an empty node's best block;
* ``spread``: a 2 x 4-GPU job, one pod on each of two nodes, while one of them was empty; with
  ``needed`` (its decoy) neither node had 8 free;
* ``waiter``: a pod asking for r GPUs of the pool's model, created while each node has fewer than r
  free and the pool in total ``blocked``: at least r, else fewer (``full``); it runs when one node's
  fillers end, on that node's best r-block, or (``stay``) waits to the trace's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from itertools import combinations

from gpuwatch import topology
from gpuwatch.fleet.catalog import uid

MINUTE, HOUR = 60.0, 3600.0
SETTLE = (10 * MINUTE, 20 * MINUTE)  # from a scene's start to its subject's
RUN = (45 * MINUTE, 120 * MINUTE)  # a subject's run
WAIT = (35 * MINUTE, 75 * MINUTE)  # a waiter's wait before it runs
HOLD = 30 * MINUTE  # fillers hold at least this long past the subject's start, at most past its end
SHORT, LONG = 3 * HOUR, 3.75 * HOUR  # slots: the longest a scene without, and with, a waiter takes
DRAWS = 200  # random filler sets tried for a node scene (the first that fits is kept)

Scene = Callable[..., float]


def play(plot, *, l40s: list, hgx, gb200: list, window: tuple[float, float]) -> None:
    """Every lane's scenes in ``window``, then the waiters that stay Pending to the trace's end."""
    lo, hi = window
    _lane(plot, _hgx(hgx), lo, hi, longest=SHORT, cap=10)
    end = _lane(plot, _l40s(*l40s), lo, hi, longest=LONG, cap=14)
    _tail(plot, end, pool=l40s, r=4, blocked=False)
    end = _lane(plot, _gb200(*gb200), lo, hi, longest=LONG, cap=10)
    _tail(plot, end, pool=gb200, r=4, blocked=True)


def _hgx(h) -> list[Scene]:
    return [_node(h, 4, "misplaced"), _node(h, 4, "decoy"), _node(h, 2, "misplaced"), _node(h, 2, "decoy"),
            _node(h, 8, "good"), _node(h, 4, "misplaced"), _node(h, 4, "decoy"), _node(h, 2, "misplaced"),
            _node(h, 2, "decoy"), _node(h, 4, "good")]


def _l40s(a, b) -> list[Scene]:
    pool = [a, b]
    return [_spread(pool, needed=True), _pair(_node(a, 4, "misplaced"), _node(b, 2, "decoy")),
            _waiter(pool, 4, blocked=True), _spread(pool, needed=False),
            _pair(_node(b, 2, "misplaced"), _node(a, 4, "decoy")), _spread(pool, needed=True),
            _waiter(pool, 4, blocked=False), _waiter(pool, 8, blocked=True),
            _pair(_node(a, 2, "misplaced"), _node(b, 4, "misplaced")), _spread(pool, needed=True),
            _waiter(pool, 2, blocked=True), _spread(pool, needed=False), _waiter(pool, 2, blocked=False),
            _pair(_node(b, 4, "decoy"), _node(a, 2, "decoy"))]


def _gb200(a, b) -> list[Scene]:
    pool = [a, b]
    return [_spread(pool, needed=False), _waiter(pool, 4, blocked=True),
            _pair(_node(a, 2, "misplaced"), _node(b, 2, "decoy")), _waiter(pool, 4, blocked=False),
            _waiter(pool, 2, blocked=True), _spread(pool, needed=False), _waiter(pool, 4, blocked=True),
            _pair(_node(b, 2, "misplaced"), _node(a, 2, "decoy")), _waiter(pool, 4, blocked=False),
            _waiter(pool, 2, blocked=True)]


def _lane(plot, scenes: list[Scene], lo: float, hi: float, *, longest: float, cap: int) -> float:
    """Up to ``cap`` scenes in turn, one per slot of [lo, hi); returns when the last one ends."""
    n = min(cap, int((hi - lo) // longest))
    ends = [lo]
    for i in range(n):
        ends.append(scenes[i % len(scenes)](plot, float(math.ceil(lo + i * (hi - lo) / n))))
    return max(ends)


def _node(node, k: int, how: str) -> Scene:
    return partial(_node_scene, node=node, k=k, how=how)


def _pair(*scenes: Scene) -> Scene:
    """Node scenes on different nodes, from the same instant."""
    return lambda plot, t0: max([scene(plot, t0) for scene in scenes])


def _spread(pool: list, *, needed: bool) -> Scene:
    return partial(_spread_scene, pool=pool, needed=needed)


def _waiter(pool: list, r: int, *, blocked: bool) -> Scene:
    return partial(_waiter_scene, pool=pool, r=r, blocked=blocked)


def _node_scene(plot, t0: float, *, node, k: int, how: str) -> float:
    busy, mask = _draw(plot, node, k, how)
    start = t0 + plot.uniform(*SETTLE)
    end = start + plot.uniform(*RUN)
    ends = _fillers(plot, node, busy, t0, lambda: plot.uniform(start + HOLD, end + HOLD))
    plot.pod(node, mask, start, end, stem="train")
    return max([end, *ends])


def _draw(plot, node, k: int, how: str) -> tuple[int, int]:
    """(GPUs the fillers hold, the subject's GPUs) as masks, for a ``how`` node scene."""
    layout = node.layout
    ideal = _quality(layout, layout.best_block(node.all, k))
    if how == "good":
        return 0, layout.best_block(node.all, k)
    for _ in range(DRAWS):
        busy = plot.subset(node.all, int(plot.rng.integers(how == "decoy", node.size - k + 1)))
        free = node.all & ~busy
        best = layout.best_block(free, k)
        if how == "decoy" and _quality(layout, best) > ideal:
            return busy, best
        worse = [m for m in _blocks(free, k) if _quality(layout, m) > _quality(layout, best)]
        if how == "misplaced" and worse:
            return busy, plot.pick(worse)
    raise RuntimeError(f"no {how} {k}-GPU placement drawn on {node.name}")


def _spread_scene(plot, t0: float, *, pool: list, needed: bool) -> float:
    """A 2 x 4-GPU job over both nodes of ``pool``: ``needed`` while one (the first here) was empty,
    else while neither had 8 GPUs free."""
    per_pod, pods = 4, 2
    if needed:
        host = plot.pick([n for n in pool if n.size >= per_pod * pods])
        order = [host, *[n for n in pool if n is not host]]
        busy = [0, *(plot.subset(n.all, int(plot.rng.integers(1, n.size - per_pod + 1))) for n in order[1:])]
    else:
        order = list(pool)
        busy = [plot.subset(n.all, int(plot.rng.integers(max(0, n.size - per_pod * pods + 1), n.size - per_pod + 1)))
                for n in order]
    start = t0 + plot.uniform(*SETTLE)
    end = start + plot.uniform(*RUN)
    ends = [end]
    for node, held in zip(order, busy, strict=True):
        ends += _fillers(plot, node, held, t0, lambda: plot.uniform(start + HOLD, end + HOLD))
    team = plot.team()
    owner = f"{team}-ddp-{plot.next_index()}"
    for i, (node, held) in enumerate(zip(order, busy, strict=True)):
        plot.pod(node, node.layout.best_block(node.all & ~held, per_pod), start, end, stem="ddp", team=team,
                 owner=owner, name=f"{owner}-worker-{i}")
    return max(ends)


def _waiter_scene(plot, t0: float, *, pool: list, r: int, blocked: bool, stay: bool = False) -> float:
    """A pod asking for ``r`` GPUs of the pool's model, unschedulable while node ``b`` (where it runs)
    and ``a`` each have fewer than ``r`` free, ``blocked``: at least ``r`` in total, else fewer."""
    a, b = pool if plot.rng.random() < 0.5 else pool[::-1]
    counts = [(fa, fb) for fa in range(min(a.size, r - 1) + 1) for fb in range(min(b.size, r - 1) + 1)
              if (fa + fb >= r) == blocked]
    free_a, free_b = (plot.subset(n.all, c) for n, c in zip((a, b), plot.pick(counts), strict=True))
    created = t0 + plot.uniform(*SETTLE)
    at = None if stay else created + plot.uniform(*WAIT)
    released = 0 if at is None else plot.subset(b.all & ~free_b, r - free_b.bit_count())

    def later() -> float:
        return plot.base.end if at is None else plot.uniform(at + 10 * MINUTE, at + 60 * MINUTE)
    ends = (_fillers(plot, a, a.all & ~free_a, t0, later) + _fillers(plot, b, b.all & ~free_b & ~released, t0, later)
            + _fillers(plot, b, released, t0, lambda: at))
    team, n = plot.team(), plot.waiters
    plot.waiters += 1
    owner = f"{team}-gang-w{n}"
    name = f"{owner}-{uid('waiter', plot.base.seed, n)[:5]}"
    scheduled = None
    if at is not None:
        end = at + plot.uniform(*RUN)
        scheduled = plot.pod(b, b.layout.best_block(free_b | released, r), at, end, stem="gang", team=team,
                             owner=owner, name=name, pending=True)
        ends.append(end)
    plot.wait(b, r, created, team=team, owner=owner, name=name, scheduled=scheduled)
    return max(ends)


def _tail(plot, t: float, *, pool: list, r: int, blocked: bool) -> None:
    """A waiter from ``t`` that stays Pending to the trace's end (when at least 75 minutes are left)."""
    t0 = float(math.ceil(t + 10 * MINUTE))
    if plot.base.end - t0 >= 75 * MINUTE + SETTLE[1]:
        _waiter_scene(plot, t0, pool=pool, r=r, blocked=blocked, stay=True)


def _fillers(plot, node, busy: int, t0: float, until: Callable[[], float]) -> list[float]:
    """One-GPU pods on ``busy``'s GPUs from ``t0``'s first 5 minutes, each until ``until()``; their ends."""
    ends = []
    for p in range(node.size):
        if busy >> p & 1:
            ends.append(until())
            plot.pod(node, 1 << p, t0 + plot.uniform(0, 5 * MINUTE), ends[-1], stem="batch")
    return ends


def _quality(layout: topology.Layout, mask: int) -> tuple[int, int]:
    """A block's quality, lower better: its worst link's rank, then the NUMA nodes it spans."""
    return layout.worst_rank(mask), layout.numa_span(mask)


def _blocks(free: int, k: int) -> list[int]:
    members = [i for i in range(free.bit_length()) if free >> i & 1]
    return [sum(1 << i for i in combo) for combo in combinations(members, k)]
