"""GPU interconnect topology, declared once: link classes, their assumed bandwidths, and the exact
block searches the exporter and the analyses share (docs/architecture.md#topology).

A link is the path between two GPUs of one node, as NVML's common-ancestor level and P2P NVLink
status (or ``nvidia-smi topo -m``) name it, best to worst:

- ``NV``: ``nvlinks`` bonded NVLinks (direct, or through NVSwitch); printed ``NV<n>`` for any n;
- ``PIX``: at most one PCIe switch between them; ``PXB``: several PCIe switches, no host bridge;
- ``PHB``: through a PCIe host bridge (the CPU's root complex); ``NODE``: across host bridges
  within one NUMA node; ``SYS``: across NUMA nodes (the socket interconnect, QPI/UPI/Infinity Fabric).

A *block* is a set of GPUs on one node; its quality is its worst pairwise link and the number of
NUMA nodes it spans. Nodes hold few GPUs (8 on HGX/DGX boards, 4 per GB200 tray), so the searches
are exact: Bron-Kerbosch for the largest block under a link bound, enumeration of k-subsets for the
best k-block. Masks are ints: bit i set = the node's i-th GPU (by position in the layout).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

LINKS: tuple[str, ...] = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")  # best to worst
PCIE_LINKS: tuple[str, ...] = LINKS[1:]
NV_RANK, SYS_RANK = 0, len(LINKS) - 1
_LABEL = re.compile(r"^(?:NV([1-9]\d*)|(PIX|PXB|PHB|NODE|SYS))$")  # NV0 would be an NVLink of no links

# Assumed peer-to-peer bandwidth per direction, bytes/s: estimates, not measurements of any machine.
# NVLink 3 (A100) and 4 (H100/H200) carry 25 GB/s per link per direction (NVIDIA's datasheets:
# 12 links = 300 GB/s on A100, 18 links = 450 GB/s on H100). A PCIe Gen4 x16 lane set carries ~32 GB/s
# per direction; peer traffic through one or several switches keeps it; through the host bridge it
# loses some (root-complex P2P); across host bridges and across sockets it is staged through host
# memory and the socket link. The PCIe figures are round, conservative assumptions; the penalty model
# (placement_penalty) uses only their ratios, and every figure derived from them is labelled an estimate.
NVLINK_BYTES_PER_SECOND_PER_LINK = 25e9
PCIE_BYTES_PER_SECOND = {"PIX": 32e9, "PXB": 32e9, "PHB": 24e9, "NODE": 20e9, "SYS": 12e9}
BLOCK_SIZES: tuple[int, ...] = (1, 2, 4, 8)


def rank(link: str) -> int:
    """0 (NV) .. 5 (SYS); an unknown class is an error (a guessed link would be a made-up topology)."""
    return LINKS.index(link)


def label(link: str, nvlinks: int | None = None) -> str:
    """``NV18`` for NVLink (``NV`` when the count is unknown), else the PCIe class."""
    return f"NV{nvlinks}" if link == "NV" and nvlinks else link


def parse_label(text: str) -> tuple[str, int | None]:
    """``"NV12"`` -> ``("NV", 12)``; ``"PXB"`` -> ``("PXB", None)``; anything else (``NV0`` too): ValueError."""
    match = _LABEL.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a GPU link (NV<n>, {', '.join(PCIE_LINKS)})")
    return ("NV", int(match[1])) if match[1] else (match[2], None)


def bandwidth(link: str, nvlinks: int | None = None) -> float | None:
    """Assumed bytes/s per direction over this link (None: an NVLink of unknown width)."""
    if link == "NV":
        return nvlinks * NVLINK_BYTES_PER_SECOND_PER_LINK if nvlinks else None
    return PCIE_BYTES_PER_SECOND[link]


def penalty_share(actual_bytes_per_second: float, better_bytes_per_second: float, comm_share: float) -> float:
    """Share of a job's GPU time lost to a slower link than a better one it could have had (an estimate).

    Model: with the better link a step spends ``comm_share`` of its time in collectives, the rest in
    compute that the link does not change; the collectives take longer in proportion to the bandwidth
    ratio. Lost share = 1 - T_better / T_actual. 0 when the link is not slower.
    """
    if actual_bytes_per_second >= better_bytes_per_second:
        return 0.0
    slowdown = (1.0 - comm_share) + comm_share * better_bytes_per_second / actual_bytes_per_second
    return 1.0 - 1.0 / slowdown


@dataclass(frozen=True)
class Layout:
    """One node's GPUs in a fixed order: pairwise link ranks (``ranks[i][j]``, the diagonal 0),
    NVLink counts (``nvlinks[i][j]``, None off NVLink), NUMA node per GPU (None unknown).

    A pair with no known link has rank None: a block containing it has unknown quality."""

    gpus: tuple[str, ...]
    ranks: tuple[tuple[int | None, ...], ...]
    nvlinks: tuple[tuple[int | None, ...], ...]
    numa: tuple[int | None, ...]

    @classmethod
    def build(cls, gpus: Sequence[str], links: Iterable[tuple[str, str, str, int | None]],
              numa: dict[str, int | None] | None = None) -> Layout:
        """From (gpu, peer, link, nvlinks) rows in either or both directions; when the two directions
        disagree the better link is kept (a penalty is never overestimated)."""
        at = {g: i for i, g in enumerate(gpus)}
        n = len(gpus)
        ranks: list[list[int | None]] = [[0 if i == j else None for j in range(n)] for i in range(n)]
        counts: list[list[int | None]] = [[None] * n for _ in range(n)]
        for gpu, peer, link, count in links:
            if gpu not in at or peer not in at or gpu == peer:
                continue
            i, j, r = at[gpu], at[peer], rank(link)
            if ranks[i][j] is None or r < ranks[i][j] or (r == ranks[i][j] and (count or 0) > (counts[i][j] or 0)):
                for a, b in ((i, j), (j, i)):
                    ranks[a][b], counts[a][b] = r, count
        numa = numa or {}
        return cls(tuple(gpus), tuple(map(tuple, ranks)), tuple(map(tuple, counts)),
                   tuple(numa.get(g) for g in gpus))

    @property
    def size(self) -> int:
        return len(self.gpus)

    def mask(self, gpus: Iterable[str]) -> int:
        at = {g: i for i, g in enumerate(self.gpus)}
        return sum(1 << at[g] for g in set(gpus) if g in at)

    def members(self, mask: int) -> list[int]:
        return [i for i in range(self.size) if mask >> i & 1]

    def worst_rank(self, mask: int) -> int | None:
        """The worst link among the block's GPUs (0 for a single GPU); None if a pair is unknown."""
        worst = 0
        for i, j in combinations(self.members(mask), 2):
            r = self.ranks[i][j]
            if r is None:
                return None
            worst = max(worst, r)
        return worst

    def worst_bandwidth(self, mask: int) -> float | None:
        """Assumed bytes/s of the block's slowest pair (None: one GPU, or a pair unknown)."""
        members = self.members(mask)
        if len(members) < 2:
            return None
        rates = []
        for i, j in combinations(members, 2):
            r = self.ranks[i][j]
            if r is None:
                return None
            rate = bandwidth(LINKS[r], self.nvlinks[i][j])
            if rate is None:
                return None
            rates.append(rate)
        return min(rates)

    def numa_span(self, mask: int) -> int | None:
        """NUMA nodes the block spans (None when a member's NUMA node is unknown)."""
        nodes = [self.numa[i] for i in self.members(mask)]
        return None if any(n is None for n in nodes) else len(set(nodes))

    def largest_block(self, free: int, *, max_rank: int = NV_RANK, same_numa: bool = False) -> int:
        """The largest set of free GPUs whose every pair has a known link at most ``max_rank``
        (and one NUMA node, with ``same_numa``): a maximum clique, exact (Bron-Kerbosch with pivot).
        Returns its mask (0 when nothing is free); ties go to the lowest GPU positions."""
        n = self.size

        def edge(i: int, j: int) -> bool:
            r = self.ranks[i][j]
            if r is None or r > max_rank:
                return False
            return not same_numa or (self.numa[i] is not None and self.numa[i] == self.numa[j])
        neighbours = [sum(1 << j for j in range(n) if j != i and free >> j & 1 and edge(i, j)) for i in range(n)]
        best = [0]

        def expand(chosen: int, candidates: int, excluded: int) -> None:
            if not candidates and not excluded:
                if _better(chosen, best[0]):
                    best[0] = chosen
                return
            if chosen.bit_count() + candidates.bit_count() < best[0].bit_count():
                return
            pivot = max(_bits(candidates | excluded), key=lambda u: (neighbours[u] & candidates).bit_count())
            for v in _bits(candidates & ~neighbours[pivot]):
                expand(chosen | 1 << v, candidates & neighbours[v], excluded & neighbours[v])
                candidates &= ~(1 << v)
                excluded |= 1 << v
        if same_numa:  # a lone GPU of unknown NUMA node is no same-NUMA block
            free &= sum(1 << i for i in range(n) if self.numa[i] is not None)
        expand(0, free & ((1 << n) - 1), 0)
        return best[0]

    def best_block(self, free: int, k: int) -> int | None:
        """The best k GPUs among ``free``: lowest worst link, then fewest NUMA nodes, then lowest
        positions; None when fewer than k are free or every k-subset has an unknown pair."""
        members = self.members(free)
        if k < 1 or len(members) < k:
            return None
        best, best_key = None, None
        for combo in combinations(members, k):
            mask = sum(1 << i for i in combo)
            worst = self.worst_rank(mask)
            if worst is None:
                continue
            span = self.numa_span(mask)
            key = (worst, span if span is not None else k + 1, combo)
            if best_key is None or key < best_key:
                best, best_key = mask, key
        return best


def _bits(mask: int) -> list[int]:
    out, i = [], 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def _better(a: int, b: int) -> bool:
    """More GPUs, then the lower positions (a deterministic tie-break)."""
    if a.bit_count() != b.bit_count():
        return a.bit_count() > b.bit_count()
    return _bits(a) < _bits(b)


def worst_link(layout: Layout, mask: int) -> str | None:
    """The label (``NV18``, ``SYS``) of the block's slowest pair: highest rank, then fewest NVLinks;
    None for a single GPU or when a pair is unknown."""
    worst: tuple[int, int] | None = None
    label_of = None
    for i, j in combinations(layout.members(mask), 2):
        r = layout.ranks[i][j]
        if r is None:
            return None
        key = (r, -(layout.nvlinks[i][j] or 0))
        if worst is None or key > worst:
            worst, label_of = key, label(LINKS[r], layout.nvlinks[i][j])
    return label_of


def better(layout: Layout, candidate: int | None, actual: int) -> bool:
    """Whether block ``candidate`` is strictly better connected than ``actual``: a lower worst link,
    or the same worst link on fewer NUMA nodes (both spans known). Unknown quality is never better."""
    if candidate is None:
        return False
    new, old = layout.worst_rank(candidate), layout.worst_rank(actual)
    if new is None or old is None:
        return False
    if new != old:
        return new < old
    spans = layout.numa_span(candidate), layout.numa_span(actual)
    return None not in spans and spans[0] < spans[1]


def disjoint_blocks(layout: Layout, free: int, k: int, *, max_rank: int = NV_RANK) -> int:
    """How many disjoint k-blocks of free GPUs, every pair a known link at most ``max_rank``, fit at
    once (k = 1: the free GPUs). Exact: the lowest free GPU is either left out or in one block with
    k - 1 of the others; nodes hold at most 8 GPUs."""
    if k < 1:
        return 0
    if k == 1:
        return (free & ((1 << layout.size) - 1)).bit_count()

    def edge(i: int, j: int) -> bool:
        r = layout.ranks[i][j]
        return r is not None and r <= max_rank
    n = layout.size
    neighbours = [sum(1 << j for j in range(n) if j != i and edge(i, j)) for i in range(n)]

    def count(left: int) -> int:
        if left.bit_count() < k:
            return 0
        low = (left & -left).bit_length() - 1
        rest = left & ~(1 << low)
        best = count(rest)
        mates = _bits(rest & neighbours[low])
        for combo in combinations(mates, k - 1):
            mask = sum(1 << i for i in combo)
            if all(neighbours[i] & mask == mask & ~(1 << i) for i in combo):
                best = max(best, 1 + count(rest & ~mask))
        return best
    return count(free & ((1 << n) - 1))
