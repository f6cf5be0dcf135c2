"""apply(actions, cluster, dry_run=True): the only code in gpuwatch that writes to Kubernetes.

Dry-run (the default) makes no API call at all and records ``would_warn``/``would_act``.
Live, every write is preceded by a re-check of the latest state (pod still there with the same
uid, still not exempt, namespace still opted in, owner unchanged, warning unchanged, still idle
in the latest data); what changed is skipped with the reason. An unreachable API stops the run's
writes (recorded, logged) without raising, so the loop carries on next time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwatch.reclaim import EXEMPT_ANNOTATION, OPT_IN_LABEL, WARNING_ANNOTATION, audit
from gpuwatch.reclaim import owners as owner_ops
from gpuwatch.reclaim.audit import row
from gpuwatch.reclaim.kube import Conflict, KubeError, Refused, Unreachable
from gpuwatch.reclaim.policy import Policy
from gpuwatch.reclaim.records import Action, rfc3339
from gpuwatch.reclaim.state import resolve_owner

log = logging.getLogger(__name__)
OWNER_API_VERSION = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "Job": "batch/v1",
                     "Notebook": "kubeflow.org/v1", "RayCluster": "ray.io/v1", "Pod": "v1"}


class Changed(Exception):
    """The re-check before a write found the world different from the plan."""


@dataclass
class _Run:
    cluster: object
    policy: Policy
    now: datetime
    still_idle: Callable[[Action], str] | None
    notify: Callable[[str, str], None] | None

    @property
    def stamp(self) -> str:
        return rfc3339(self.now)


def apply(actions: Sequence[Action], cluster, dry_run: bool = True, *, now: datetime, run_id: str,
          policy: Policy, still_idle: Callable[[Action], str] | None = None,
          notify: Callable[[str, str], None] | None = None) -> list[dict]:
    """Carry out ``actions`` (or, in dry-run, only record them); returns reclaim_audit rows.

    ``still_idle(action)`` is asked right before each write: '' when the latest data (fresh at
    that moment) still shows the same idle run, else the reason not to write."""
    run = _Run(cluster, policy, now, still_idle, notify)
    rows, down = [], ""
    for action in actions:
        audit = {"now": now, "run_id": run_id, "dry_run": dry_run}
        if action.decision == "skip":
            rows.append(row(action, result="skipped", **audit))
        elif dry_run:
            rows.append(row(action, result="dry_run", **audit))
        elif down:
            rows.append(row(action, decision="skipped", result="error",
                            detail=f"not attempted: {down}", **audit))
        else:
            outcome, down = _attempt(run, action)
            rows.append(row(action, **outcome, **audit))
    return rows


def _attempt(run: _Run, action: Action) -> tuple[dict, str]:
    """One live write; returns (audit fields, reason the API is down or '')."""
    try:
        detail, skipped = _WRITERS[action.decision](run, action)
        if skipped:
            return {"decision": "skipped", "result": "skipped", "detail": detail}, ""
        return {"result": "ok", "detail": detail}, ""
    except Unreachable as exc:
        log.error("Kubernetes API unreachable, no actions this run: %s", exc)
        return {"decision": "skipped", "result": "error", "detail": f"API unreachable: {exc}"}, str(exc)
    except Refused as exc:
        return {"decision": "skipped", "result": "error",
                "detail": f"eviction refused by a PodDisruptionBudget (HTTP 429): {exc}; "
                          "not retried before the next run"}, ""
    except Changed as exc:
        return {"decision": "skipped", "result": "skipped", "detail": f"re-check: {exc}"}, ""
    except KubeError as exc:
        log.warning("%s %s failed: %s", action.decision, action.owner_key, exc)
        return {"decision": "skipped", "result": "error", "detail": str(exc)}, ""


def _warn(run: _Run, action: Action) -> tuple[str, bool]:
    pods = _recheck(run, action, need_warning=False)
    for pod in pods:
        _annotate(run, pod, run.stamp)
    _events(run, action, pods, "GPUIdleWarning",
            f"GPU idle since {action.idle_since:%Y-%m-%d %H:%M} UTC; gpuwatch will reclaim "
            f"{action.owner_kind} {action.owner_name} after {run.policy.warning_seconds / 60:.0f} "
            f"min unless it is used (or annotated {EXEMPT_ANNOTATION}=never)")
    if run.notify:
        run.notify(action.team, f":warning: gpuwatch: {action.owner_kind} {action.owner_key} has "
                                f"idle GPUs ({action.reason}); it will be reclaimed unless used.")
    return f"warning annotation {WARNING_ANNOTATION}={run.stamp}", False


def _act(run: _Run, action: Action) -> tuple[str, bool]:
    pods = _recheck(run, action, need_warning=True)
    if action.action == "evict_pod":
        run.cluster.evict(action.namespace, action.pod)
        done = "evicted"
    else:
        done = owner_ops.stop(run.cluster, action.owner_kind, action.namespace, action.owner_name,
                              stamp=run.stamp, custom=run.policy.custom_kinds)
        if done == "already stopped":
            return f"{action.owner_kind} already stopped (an earlier run acted)", True
    _events(run, action, pods, "GPUReclaimed", f"gpuwatch {done} {action.owner_kind} "
            f"{action.owner_name}: {action.reason}. Undo: gpuwatch reclaim restore {action.owner_key}")
    if run.notify:
        run.notify(action.team, f":recycle: gpuwatch {done} {action.owner_key} ({action.reason}).")
    return done, False


def _clear(run: _Run, action: Action) -> tuple[str, bool]:
    pod = run.cluster.read("Pod", action.namespace, action.pod)
    if pod is None or WARNING_ANNOTATION not in (pod["metadata"].get("annotations") or {}):
        return "pod or warning already gone", True
    _annotate(run, pod, None)
    _events(run, action, [pod], "GPUIdleWarningCleared", f"gpuwatch warning cleared: {action.reason}")
    return f"warning annotation removed ({action.reason})", False


_WRITERS = {"warn": _warn, "act": _act, "clear": _clear}


def _recheck(run: _Run, action: Action, *, need_warning: bool) -> list[dict]:
    """Re-read what the plan relied on; raise Changed when any of it no longer holds."""
    namespace = run.cluster.read("Namespace", "", action.namespace) or {}
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    if labels.get(OPT_IN_LABEL) != "enabled" and action.namespace not in run.policy.namespaces:
        raise Changed(f"namespace {action.namespace} is no longer opted in")
    pods, cache = [], {}
    for name, uid in zip(action.pods, action.pod_uids, strict=True):
        pod = run.cluster.read("Pod", action.namespace, name)
        if pod is None or pod["metadata"].get("uid") != uid:
            raise Changed(f"pod {name} is gone or was replaced")
        notes = pod["metadata"].get("annotations") or {}
        if notes.get(EXEMPT_ANNOTATION) == "never":
            raise Changed(f"pod {name} is now exempt")
        if need_warning and notes.get(WARNING_ANNOTATION, "") != action.warning_value:
            raise Changed(f"pod {name}'s warning changed since the plan")
        kind, owner_name, owner = resolve_owner(run.cluster, pod, cache)
        if (kind, owner_name) != (action.owner_kind, action.owner_name):
            raise Changed(f"pod {name}'s owner is now {kind} {owner_name}")
        if ((owner or {}).get("metadata", {}).get("annotations") or {}).get(EXEMPT_ANNOTATION) == "never":
            raise Changed(f"{kind} {owner_name} is now exempt")
        pods.append(pod)
    why = run.still_idle(action) if run.still_idle is not None else ""
    if why:
        raise Changed(why)
    return pods


def _annotate(run: _Run, pod: dict, value: str | None) -> None:
    """Set (or, with None, remove) the warning annotation; a 409 re-reads once."""
    meta = pod["metadata"]
    for _ in range(owner_ops.CONFLICT_ATTEMPTS):
        body = {"metadata": {"resourceVersion": meta["resourceVersion"],
                             "annotations": {WARNING_ANNOTATION: value}}}
        try:
            run.cluster.patch("Pod", meta["namespace"], meta["name"], body)
            return
        except Conflict:
            fresh = run.cluster.read("Pod", meta["namespace"], meta["name"])
            if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
                raise Changed(f"pod {meta['name']} is gone or was replaced") from None
            meta = fresh["metadata"]
    raise Conflict(f"pod {meta['name']} kept changing", 409)


def _events(run: _Run, action: Action, pods: list[dict], reason: str, message: str) -> None:
    """Events on each pod and once on the owner; a failed Event is logged, never fatal."""
    targets = [{"kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"].get("uid", ""),
                "apiVersion": "v1"} for p in pods]
    if action.owner_kind != "Pod":
        targets.append({"kind": action.owner_kind, "name": action.owner_name,
                        "apiVersion": OWNER_API_VERSION.get(action.owner_kind, "")})
    for involved in targets:
        try:
            run.cluster.event(action.namespace, involved, reason=reason, message=message,
                              kind="Warning" if reason == "GPUIdleWarning" else "Normal", now=run.stamp)
        except KubeError as exc:
            log.warning("could not record Event %s on %s %s: %s", reason, involved["kind"],
                        involved["name"], exc)


def record_restore(cluster, con, *, namespace: str, kind: str, name: str, detail: str,
                   now: datetime | None = None) -> dict:
    """After a restore: an Event on the owner and a ``restored`` audit row (when ``con``)."""
    from datetime import UTC


    now = now or datetime.now(UTC)
    involved = {"kind": kind, "name": name, "apiVersion": OWNER_API_VERSION.get(kind, "")}
    try:
        cluster.event(namespace, involved, reason="GPUReclaimRestored",
                      message=f"gpuwatch restored {kind} {name}: {detail}", now=rfc3339(now))
    except KubeError as exc:
        log.warning("could not record the restore Event: %s", exc)
    action = Action(decision="act", action="none", namespace=namespace, pod="", owner_kind=kind,
                    owner_name=name, team="", reason="restore requested")
    record = row(action, now=now, run_id="restore", dry_run=False, result="ok",
                 decision="restored", detail=detail)
    if con is not None:
        audit.write(con, [record])
    return record
