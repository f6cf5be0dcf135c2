"""Stop and restore one owner, per kind. Each stop is ONE conditional write, so it is atomic.

The patch carries the ``resourceVersion`` that was read, and the owner's previous state goes
in the same patch as the change (previous replicas in an annotation beside ``spec.replicas: 0``):
a crash can leave the owner untouched or fully stopped, never half-stopped. A 409 re-reads
and retries (``CONFLICT_ATTEMPTS``).
"""

from __future__ import annotations

from typing import Any

from gpuwatch.reclaim import (
    KUBEFLOW_STOP_ANNOTATION,
    PREVIOUS_REPLICAS_ANNOTATION,
    RECLAIMED_ANNOTATION,
)
from gpuwatch.reclaim.kube import Conflict, KubeError
from gpuwatch.reclaim.state import stopped

CONFLICT_ATTEMPTS = 3


def stop_patch(kind: str, owner: dict, *, stamp: str, custom: dict) -> dict:
    """The merge patch that stops ``owner`` (pure)."""
    meta = {"resourceVersion": owner["metadata"]["resourceVersion"],
            "annotations": {RECLAIMED_ANNOTATION: stamp}}
    if kind == "Notebook":
        meta["annotations"][KUBEFLOW_STOP_ANNOTATION] = stamp
        return {"metadata": meta}
    if kind in ("Deployment", "StatefulSet"):
        replicas = (owner.get("spec") or {}).get("replicas", 1)
        meta["annotations"][PREVIOUS_REPLICAS_ANNOTATION] = str(replicas)
        return {"metadata": meta, "spec": {"replicas": 0}}
    if kind == "Job":
        return {"metadata": meta, "spec": {"suspend": True}}
    return {**custom[kind].patch, "metadata": meta}


def restore_patch(kind: str, owner: dict, *, custom: dict) -> dict:
    """The merge patch that undoes ``stop_patch`` (pure)."""
    notes = (owner.get("metadata") or {}).get("annotations") or {}
    meta = {"resourceVersion": owner["metadata"]["resourceVersion"],
            "annotations": {RECLAIMED_ANNOTATION: None}}
    if kind == "Notebook":
        meta["annotations"][KUBEFLOW_STOP_ANNOTATION] = None
        return {"metadata": meta}
    if kind in ("Deployment", "StatefulSet"):
        meta["annotations"][PREVIOUS_REPLICAS_ANNOTATION] = None
        replicas = int(notes.get(PREVIOUS_REPLICAS_ANNOTATION) or 1)
        return {"metadata": meta, "spec": {"replicas": replicas}}
    if kind == "Job":
        return {"metadata": meta, "spec": {"suspend": False}}
    if kind in custom:
        return {**custom[kind].restore_patch, "metadata": meta}
    raise KubeError(f"cannot restore kind {kind!r}: not a built-in kind and not in policy custom_kinds")


def stop(cluster: Any, kind: str, namespace: str, name: str, *, stamp: str, custom: dict) -> str:
    """Stop the owner unless it is already stopped; returns what happened (for the audit)."""
    for _ in range(CONFLICT_ATTEMPTS):
        owner = cluster.read(kind, namespace, name)
        if owner is None:
            raise KubeError(f"{kind} {namespace}/{name} not found", 404)
        if stopped(kind, owner):
            return "already stopped"
        try:
            cluster.patch(kind, namespace, name, stop_patch(kind, owner, stamp=stamp, custom=custom))
            return "stopped"
        except Conflict:
            continue  # changed under us: re-read, re-check, retry
    raise Conflict(f"{kind} {namespace}/{name} kept changing ({CONFLICT_ATTEMPTS} conflicts)", 409)


def restore(cluster: Any, kind: str, namespace: str, name: str, *, custom: dict,
            force: bool = False) -> str:
    """Undo a stop: replicas back, Job resumed, stop annotation removed."""
    if kind == "Pod":
        raise KubeError("an evicted bare Pod cannot be restored: recreate it from its manifest")
    for _ in range(CONFLICT_ATTEMPTS):
        owner = cluster.read(kind, namespace, name)
        if owner is None:
            raise KubeError(f"{kind} {namespace}/{name} not found", 404)
        notes = owner["metadata"].get("annotations") or {}
        if RECLAIMED_ANNOTATION not in notes and not force:
            raise KubeError(f"{kind} {namespace}/{name} was not reclaimed by gpuwatch "
                            f"(no {RECLAIMED_ANNOTATION} annotation); use --force to restore anyway")
        try:
            patch = restore_patch(kind, owner, custom=custom)
            cluster.patch(kind, namespace, name, patch)
            return f"restored ({_describe(kind, patch)})"
        except Conflict:
            continue
    raise Conflict(f"{kind} {namespace}/{name} kept changing ({CONFLICT_ATTEMPTS} conflicts)", 409)


def _describe(kind: str, patch: dict) -> str:
    spec = patch.get("spec") or {}
    if "replicas" in spec:
        return f"replicas {spec['replicas']}"
    if "suspend" in spec:
        return "Job resumed"
    return "stop annotation removed" if kind == "Notebook" else "restore patch applied"
