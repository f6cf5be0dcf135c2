"""Pods' state changes as kube-state-metrics shows them: the bundle's ``pod_status``, one row per
change of a pod's (container's) state, a state holding until that pod's next row.

A pod the trace opens on (started at or before its first instant) is already Running; a later one is
Pending for a few seconds of scheduling first. A pod that ends terminates: a Job's pod completes, a
deleted pod exits on SIGTERM (also ``Completed``, exit 0); failures end in ``Failed``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwatch.model import BUNDLE_COLUMNS, Pod

# The kubelet's CrashLoopBackOff: 10 s after the first crash, doubling, at most 5 minutes.
BACKOFF_SECONDS = (10.0, 20.0, 40.0, 80.0, 160.0, 300.0)


def backoff(crashes: int) -> float:
    """Seconds the kubelet waits before restarting a container that has crashed ``crashes`` times."""
    return BACKOFF_SECONDS[min(crashes, len(BACKOFF_SECONDS)) - 1]


def job_of(pod: Pod) -> str | None:
    """A background pod's gang/job key: its owner, for Jobs and RayClusters (the rest run alone)."""
    return pod.owner_name if pod.owner_kind in ("Job", "RayCluster") else None


def latency(pod_uid: str) -> float:
    """Seconds between a pod's creation and its start (scheduling, image pull): 5-59, from its uid."""
    return 5.0 + int(pod_uid[:4], 16) % 55


class Rows:
    """Row maker for one pod (container): ``rows.add(ts, phase, ...)``, then ``rows.out``.

    Every row carries the pod's creation time (kube_pod_created), its scheduling time from the row that
    binds it on (kube_pod_status_scheduled_time), whether the scheduler had marked it unschedulable
    (0 unless a Pending row says so), its GPU resource and node selector (JSON text or None)."""

    def __init__(self, namespace: str, pod: str, *, container: str = "main", job: str | None, gpu_request: float,
                 gpu_resource: str | None = "nvidia.com/gpu", node_selector: str | None = None,
                 created: float | None = None):
        self.key = {"namespace": namespace, "pod": pod, "container": container}
        self.job, self.gpu_request, self.out = job, gpu_request, []
        self.static = {"gpu_resource": gpu_resource, "node_selector": node_selector}
        self.created_ts, self.scheduled_ts = created, None

    @classmethod
    def of(cls, pod: Pod, *, job: str | None) -> Rows:
        return cls(pod.namespace, pod.pod, container=pod.container, job=job, gpu_request=pod.gpu_count,
                   gpu_resource=pod.gpu_resource, created=pod.start_ts - latency(pod.pod_uid))

    def add(self, ts: float, phase: str, *, restarts: int = 0, reason: str | None = None,
            exit_code: int | None = None, waiting: str | None = None, bound: bool = False,
            unschedulable: int | None = 0) -> Rows:
        """A state change at ``ts``; a Running row (or ``bound``: placed, not yet running) schedules the pod."""
        if self.scheduled_ts is None and (phase == "Running" or bound):
            self.scheduled_ts = float(ts)
        row = {"ts": float(ts), **self.key, "phase": phase, "restarts": restarts, "last_terminated_reason": reason,
               "last_exit_code": exit_code, "waiting_reason": waiting, "job": self.job,
               "gpu_request": self.gpu_request, "created_ts": self.created_ts, "scheduled_ts": self.scheduled_ts,
               "unschedulable": unschedulable, **self.static}
        self.out.append({name: row[name] for name in BUNDLE_COLUMNS["pod_status"]})
        return self

    def created(self, pod: Pod, *, observed_from: float, at: float | None = None) -> Rows:
        """Pending from its creation (``at``, else a latency before it starts), unless the trace opens
        on it already started."""
        if at is not None:
            self.created_ts = float(at)
        if pod.start_ts > observed_from:
            self.add(self.created_ts, "Pending")
        return self


def completed(pod: Pod, *, observed_from: float, job: str | None, created: float | None = None) -> list[dict]:
    """A pod that starts, runs, and (if it ends) completes: Pending -> Running -> Succeeded."""
    rows = Rows.of(pod, job=job).created(pod, observed_from=observed_from, at=created).add(pod.start_ts, "Running")
    if pod.end_ts is not None:
        rows.add(pod.end_ts, "Succeeded", reason="Completed", exit_code=0)
    return rows.out


def failed(pod: Pod, *, observed_from: float, job: str | None, reason: str = "Error", exit_code: int = 1,
           created: float | None = None) -> list[dict]:
    """A pod that runs until its container fails at ``pod.end_ts`` and is not restarted."""
    rows = Rows.of(pod, job=job).created(pod, observed_from=observed_from, at=created).add(pod.start_ts, "Running")
    return rows.add(pod.end_ts, "Failed", reason=reason, exit_code=exit_code).out


def crash_loop(pod: Pod, runs: Sequence[tuple[float, float]], *, observed_from: float, job: str | None,
               reason: str, exit_code: int) -> list[dict]:
    """A container that crashes at the end of every run in ``runs`` and is restarted after a
    CrashLoopBackOff wait, until its Job gives up after the last one (Failed)."""
    rows = Rows.of(pod, job=job).created(pod, observed_from=observed_from).add(runs[0][0], "Running")
    for crash, (_, end) in enumerate(runs, start=1):
        if crash == len(runs):
            rows.add(end, "Failed", restarts=crash - 1, reason=reason, exit_code=exit_code)
            break
        rows.add(end, "Running", restarts=crash - 1, reason=reason, exit_code=exit_code, waiting="CrashLoopBackOff")
        rows.add(runs[crash][0], "Running", restarts=crash, reason=reason, exit_code=exit_code)
    return rows.out


def create_error(pod: Pod, *, observed_from: float, job: str | None) -> list[dict]:
    """A pod bound to its node (GPUs allocated) whose container cannot be created; deleted at its end."""
    rows = Rows.of(pod, job=job).created(pod, observed_from=observed_from)
    return rows.add(pod.start_ts, "Pending", waiting="CreateContainerError", bound=True).add(pod.end_ts, "Failed").out


def never_scheduled(namespace: str, pod: str, *, since: float, until: float, job: str, gpu_request: float) -> list[dict]:
    """A pod Pending from ``since`` (no node has room) until its job is deleted at ``until``; whether
    the scheduler marked it unschedulable is not said (empty)."""
    rows = Rows(namespace, pod, job=job, gpu_request=gpu_request, created=since)
    return rows.add(since, "Pending", unschedulable=None).add(until, "Failed", unschedulable=None).out


def unschedulable(namespace: str, pod: str, *, created: float, job: str, gpu_request: float, node_selector: str,
                  scheduled: Pod | None) -> list[dict]:
    """A pod the scheduler marks unschedulable from its creation (Pending, ``unschedulable`` 1) until
    ``scheduled`` (the pod it became, placed at its start_ts) runs, completing at its end; with no
    ``scheduled`` it stays Pending to the trace's end."""
    rows = Rows(namespace, pod, job=job, gpu_request=gpu_request, node_selector=node_selector, created=created)
    rows.add(created, "Pending", unschedulable=1)
    if scheduled is not None:
        rows.add(scheduled.start_ts, "Running")
        if scheduled.end_ts is not None:
            rows.add(scheduled.end_ts, "Succeeded", reason="Completed", exit_code=0)
    return rows.out
