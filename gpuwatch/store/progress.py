"""How far the store's samples reach: where an incremental ingest (``ingest --since-last``) picks up.

The rule, per node (one cluster's nodes: ``cluster=NAME`` or the unqualified ones):
- a node's *current* devices are those whose last sample is within ``catch_up`` of the node's own
  latest sample (a GPU gone from the node or a MIG instance since deleted does not count);
- the node's **last complete step** is the earliest last sample among its current devices: every
  device still reporting on the node has its data up to there;
- a node counts while its latest sample is within ``catch_up`` of the bulk end of the data
  (store.bulk_end over the cluster's devices, as data_range finds it); a node that stopped longer ago
  (drained, retired, its exporter gone) is left out, so it never pins the store's progress;
- the store's last complete step is the earliest among the nodes that count.
Only samples within ``catch_up`` + one day of the cluster's latest one are read (progress.sql).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuwatch.store import BULK_WINDOW, bulk_end
from gpuwatch.store.staged import script

CATCH_UP = timedelta(hours=1)  # default: how far behind the bulk a node may lag and still be caught up


@dataclass(frozen=True)
class Progress:
    """The store's last complete step (None: no samples of the cluster) and what it was judged on."""

    complete: datetime | None
    bulk_end: datetime | None = None
    nodes: int = 0
    left_out: tuple[tuple[str, datetime], ...] = ()  # (node, its latest sample): past the catch-up horizon


def progress(con: Any, *, cluster: str | None = None, catch_up: timedelta = CATCH_UP) -> Progress:
    """The last complete step of ``cluster``'s nodes in the store (module docstring); UTC, naive."""
    rows = con.execute(script("progress.sql"), {"cluster": cluster,
                                                "lookback_seconds": (catch_up + BULK_WINDOW).total_seconds()}).fetchall()
    if not rows:
        return Progress(None)
    bulk = bulk_end([(first, last) for _, _, _, first, last, _ in rows])
    complete: dict[str, datetime] = {}
    latest: dict[str, datetime] = {}
    for node, _, _, _, last, node_last in rows:
        latest[node] = node_last
        if last >= node_last - catch_up:  # a current device of the node
            complete[node] = min(last, complete.get(node, last))
    counted = [n for n in complete if latest[n] >= bulk - catch_up]
    left_out = tuple((n, latest[n]) for n in sorted(latest) if n not in counted)
    return Progress(min(complete[n] for n in counted), bulk_end=bulk, nodes=len(counted), left_out=left_out)
