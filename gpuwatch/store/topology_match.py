"""A topology row links two GPUs of its own node: a GPU or peer the store holds on another node is an
error naming the file, the row and both nodes (a link across nodes is no NVLink or PCIe path, and
placing a job by it would pick GPUs that cannot talk that way). A GPU the store does not hold yet
(links loaded before their devices, ``ingest --new-node``) has no node to contradict: accepted. The
rows' own shape (no self-link, NVLink counts only on NV links) is checked
with every column (columns.py)."""

from __future__ import annotations

from typing import Any

from gpuwatch.store.columns import ROW
from gpuwatch.store.validate import BundleError


def check(con: Any, *, file: str) -> None:
    """Every row of ``incoming`` (a typed topology part) names GPUs of its own node only."""
    found = con.execute(
        f"SELECT i.{ROW}, CASE WHEN trim(d.gpu_uuid) = trim(i.gpu_uuid) THEN 'gpu_uuid' ELSE 'peer_gpu_uuid' END, "
        "trim(d.gpu_uuid), trim(i.node), trim(d.node) "
        "FROM incoming i JOIN devices d ON trim(d.gpu_uuid) IN (trim(i.gpu_uuid), trim(i.peer_gpu_uuid)) "
        # within one cluster: a UUID seen in two clusters is the clusters' conflict, not this link's
        f"WHERE trim(d.node) <> trim(i.node) AND cluster_of(trim(d.node)) IS NOT DISTINCT FROM cluster_of(trim(i.node)) "
        f"ORDER BY i.{ROW}, 2 LIMIT 1").fetchone()
    if found is not None:
        row, column, uuid, node, other = found
        raise BundleError(f"{file}: column '{column}', row {row}: {uuid!r} is a GPU of node {other!r}, not of "
                          f"{node!r}: a link joins two GPUs of one node")
