"""One GPU UUID is one GPU (docs/architecture.md, "One GPU, one place"): a load that would hold a GPU
under two nodes at once is refused, whole, with one line naming the UUID and both nodes and clusters.

The store keys devices by (node, gpu_uuid): the same bundle loaded with and without ``--cluster``, or
one UUID listed under two nodes, would otherwise be two GPUs, each priced. A GPU that moved between
nodes (a node replaced or renamed: every sample under the old node before any under the new) is kept
under each node for its own time. Only the GPUs a load touches are looked at (gpu_places.sql).
"""

from __future__ import annotations

from typing import Any

from gpuwatch.store.staged import run
from gpuwatch.store.validate import BundleError

TRACKED = "load_gpus"  # temp table: the GPU UUIDs a load touched


def start(con: Any) -> None:
    """Begin tracking the GPUs a load touches."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {TRACKED} (gpu_uuid VARCHAR)")


def touched(con: Any, table: str) -> None:
    """The GPU UUIDs of ``table`` (a load's incoming rows, with a gpu_uuid column) are touched."""
    con.execute(f"INSERT INTO {TRACKED} SELECT DISTINCT gpu_uuid FROM {table}")


def check(con: Any, *, source: str) -> None:
    """A BundleError when a GPU the load touched is held under two nodes at once (module docstring)."""
    try:
        if con.execute(f"SELECT count(*) FROM {TRACKED}").fetchall()[0][0] == 0:
            return
        run(con, "gpu_places.sql")
        pair = con.execute("SELECT gpu_uuid, node_a, node_b, unevidenced FROM gpu_place_pairs LIMIT 1").fetchall()
    finally:
        con.execute(f"DROP TABLE IF EXISTS {TRACKED}; DROP TABLE IF EXISTS gpu_places; "
                    "DROP TABLE IF EXISTS gpu_place_readings; DROP TABLE IF EXISTS gpu_place_pairs")
    if pair:
        uuid, a, b, unevidenced = pair[0]
        how = ("one of them without a sample to say when it held it" if unevidenced
               else "with samples from both at the same times")
        raise BundleError(f"{source}: GPU {uuid} would be held under two nodes at once, {_where(a)} and {_where(b)}, "
                          f"{how}: one GPU UUID is one GPU, so nothing was loaded (load each cluster's data once, "
                          "under its own --cluster; a GPU that moved shows under each node for its own time)")


def _where(node: str) -> str:
    cluster, qualified, name = node.partition("/")
    return f"node {name} (cluster {cluster})" if qualified else f"node {node} (no cluster)"
