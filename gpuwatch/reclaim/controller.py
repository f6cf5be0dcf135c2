"""One reconcile pass (``run_once``) and the thin loop around it (idle-culler's shape).

A pass: read the findings (idle_hoarding over the store, or a CSV from ``gpuwatch analyze``),
read the cluster (or, when it cannot be consulted and this is a dry run, the store's pods
table), plan, apply, write the audit rows, update metrics. Every pass starts from what the
cluster's annotations and the audit table say, so a restart continues where the last one
stopped and never acts twice.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuwatch import analyses, store
from gpuwatch.analyses import params as analysis_params
from gpuwatch.reclaim import audit
from gpuwatch.reclaim.apply import apply
from gpuwatch.reclaim.freshness import AS_OF_COLUMN, csv_as_of, stale_reason
from gpuwatch.reclaim.kube import KubeError, Unreachable
from gpuwatch.reclaim.lease import Elector
from gpuwatch.reclaim.plan import plan
from gpuwatch.reclaim.policy import Policy
from gpuwatch.reclaim.records import Action, PodState, as_records, as_utc, flag
from gpuwatch.reclaim.state import snapshot

log = logging.getLogger(__name__)


@dataclass
class Settings:
    """Everything a pass needs besides the store connection and the cluster."""

    policy: Policy = field(default_factory=Policy)
    findings_csv: str | None = None  # idle_hoarding.csv instead of running the analysis
    apply: bool = False
    window: timedelta = timedelta(hours=24)
    assume_opted_in: bool = False  # dry-run counterfactuals only
    now: datetime | None = None  # pinned clock; default: wall clock (data end when offline)
    until: datetime | None = None  # replay: analyse only data before this instant
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    leader_elect: bool = True
    lease_namespace: str = "gpuwatch"
    lease_name: str = "gpuwatch-reclaim"
    lease_seconds: int = 60  # must outlast a pass; the command sets 2 x interval + 60
    identity: str = field(default_factory=lambda: f"gpuwatch-reclaim-{uuid.uuid4().hex[:8]}")
    notify: Callable[[str, str], None] | None = None


@dataclass
class Result:
    run_id: str
    now: datetime
    actions: list[Action]
    rows: list[dict]
    cluster_consulted: bool
    note: str = ""
    findings: Any = None  # the idle_hoarding rows the pass planned from (the idle bridge's step 4)


def run_once(settings: Settings, con: Any, cluster: Any = None, *, metrics: Any = None) -> Result:
    """One reconcile pass. ``cluster`` None (or unreachable) plans from the store alone."""
    run_id = ("replay-" if settings.until else "") + uuid.uuid4().hex[:12]
    wall = settings.now or settings.clock()
    findings, as_of, problem = load_findings(con, settings)
    if problem:
        log.error("findings of unknown age, no actions this pass: %s", problem)
    states, note = None, ""
    if cluster is not None:
        try:
            if settings.apply and settings.leader_elect and not _elector(settings, cluster).elect(wall):
                return Result(run_id, wall, [], [], True, "not the leader: another replica acts")
            namespaces = {r["namespace"] for r in as_records(findings)}
            states = snapshot(cluster, namespaces, team_label=settings.policy.team_label)
        except (Unreachable, KubeError) as exc:
            log.error("Kubernetes API unreachable; no actions this run: %s", exc)
            note = f"cluster unreachable: {exc}"
    if states is None:
        if settings.apply:
            return Result(run_id, wall, [], [], False, note or "no cluster configured: --apply needs one")
        states = store_pods(con, as_of or wall)
        note = note or "no cluster configured"
    consulted = cluster is not None and not note
    now = settings.now or (wall if consulted else (as_of or wall))
    actions = plan(findings, states, settings.policy, now, data_as_of=as_of, as_of_problem=problem,
                   recent=audit.recent(con, now=now, dry_run=not settings.apply),
                   simulate_warnings=not settings.apply, assume_opted_in=settings.assume_opted_in)
    rows = apply(actions, cluster, dry_run=not settings.apply, now=now, run_id=run_id,
                 policy=settings.policy, still_idle=_still_idle(con, settings), notify=settings.notify)
    if problem and not rows:  # nothing to skip one by one: the pass itself is recorded
        rows = [audit.run_row(now=now, run_id=run_id, dry_run=not settings.apply, reason=problem)]
    audit.write(con, rows)
    if metrics is not None:
        metrics.observe(rows)
    return Result(run_id, now, actions, rows, consulted, note, findings)


def loop(settings: Settings, con: Any, connect: Callable[[], Any], *, interval_seconds: float,
         metrics: Any = None, sleep: Callable[[float], None] = time.sleep,
         passes: int | None = None) -> None:
    """Run passes forever (or ``passes`` times); a failing pass is logged, never fatal."""
    done = 0
    while passes is None or done < passes:
        try:
            cluster = _connect(connect)
            result = run_once(settings, con, cluster, metrics=metrics)
            log.info("pass %s: %d decisions (%s)", result.run_id, len(result.rows),
                     "cluster consulted" if result.cluster_consulted else result.note)
        except Exception:
            log.exception("reclaim pass failed; retrying in %.0fs", interval_seconds)
        done += 1
        if passes is None or done < passes:
            sleep(interval_seconds)


def replay(settings: Settings, con: Any, *, step: timedelta, start: datetime | None = None,
           end: datetime | None = None) -> list[Result]:
    """Dry-run passes every ``step`` over the stored data, as if the controller had run then.

    Each pass sees only the data before its instant; its decisions go to reclaim_audit (run ids
    ``replay-…``), so ``audit.counterfactual`` turns a stored week into "would have reclaimed".
    """
    from dataclasses import replace as with_


    if settings.apply:
        raise ValueError("replay is a dry-run counterfactual; it is refused with --apply")
    first, last = store.data_range(con)
    if first is None:
        return []
    moment = as_utc(start) or as_utc(first) + timedelta(seconds=settings.policy.min_idle_seconds)
    stop = as_utc(end) or as_utc(last) + timedelta(seconds=1)
    results = []
    while moment <= stop:
        results.append(run_once(with_(settings, now=moment, until=moment), con, None))
        moment += step
    return results


def load_findings(con: Any, settings: Settings) -> tuple[Any, datetime | None, str]:
    """idle_hoarding findings, the time of the latest sample they rest on, and why that time is
    unknown ('' when known). A CSV's time is its ``data_as_of`` column (``gpuwatch analyze``)."""
    import pandas as pd

    if settings.findings_csv:
        frame = _read_csv(settings.findings_csv)
        if frame is None:
            return pd.DataFrame(columns=["namespace", "pod"]), None, \
                f"{settings.findings_csv}: cannot read the findings file"
        as_of, problem = csv_as_of(frame, source=settings.findings_csv)
        return frame, as_of, problem
    _, last = store.data_range(con)
    if last is None:
        return pd.DataFrame(columns=list(analyses.header("idle_hoarding").columns)), None, ""
    if settings.until is not None:
        last = min(last, settings.until.replace(tzinfo=None) - timedelta(microseconds=1))
    start, end = analysis_params.window(last, length=settings.window,
                                        end=settings.until.replace(tzinfo=None) if settings.until else None)
    bound = analysis_params.params(start, end, idle_below=settings.policy.idle_below,
                                   min_idle_run_seconds=settings.policy.min_idle_seconds)
    return analyses.run(con, "idle_hoarding", **bound), as_utc(last), ""


def _read_csv(path: str) -> Any:
    """The findings CSV as a frame, or None (logged) when it is missing or unreadable."""
    import pandas as pd

    try:
        return pd.read_csv(path, dtype={AS_OF_COLUMN: str})
    except (OSError, ValueError) as exc:  # missing, empty or malformed: nothing is known
        log.error("cannot read findings %s (%s): no actions this pass", path, exc)
        return None


def store_pods(con: Any, as_of: datetime) -> list[PodState]:
    """PodStates from the store's pods table (no annotations: the cluster was not consulted)."""
    rows = con.execute(audit.sql("store_pods"), {"as_of": as_of.replace(tzinfo=None)}).df()
    return [PodState(namespace=r["namespace"], pod=r["pod"], uid=str(r["pod_uid"] or ""),
                     owner_kind=str(r["owner_kind"] or "Pod"), owner_name=str(r["owner_name"] or r["pod"]),
                     team=str(r["team"] or ""), priority_class=str(r["priority_class"] or ""),
                     gpu_count=float(r["gpu_count"]) if r["gpu_count"] == r["gpu_count"] else None)
            for r in as_records(rows)]


def _still_idle(con: Any, settings: Settings) -> Callable[[Action], str]:
    """Re-read the latest data (once per pass, lazily): '' when the same idle run continues on
    data fresh *now*, else why not. The as-of time is checked against the clock read at write
    time, so re-reading a stale file is never taken as proof of freshness."""
    fresh: dict = {}

    def check(action: Action) -> str:
        if "rows" not in fresh:
            findings, fresh["as_of"], fresh["problem"] = load_findings(con, settings)
            fresh["rows"] = {(r["namespace"], r["pod"]): r for r in as_records(findings)}
        now = settings.now or settings.clock()
        unfit = fresh["problem"] or stale_reason(fresh["as_of"], now,
                                                 max_age_seconds=settings.policy.max_data_age_seconds)
        if unfit:
            log.error("re-check before %s %s: %s", action.decision, action.owner_key, unfit)
            return unfit
        for pod in action.pods:
            row = fresh["rows"].get((action.namespace, pod))
            since = as_utc(row.get("idle_since")) if row else None
            if row is None or not flag(row.get("reclaimable_now", True)) or since is None \
                    or (action.idle_since and since > action.idle_since):
                return f"pod {pod} is no longer idle in the latest data"
        return ""

    return check


def _elector(settings: Settings, cluster: Any) -> Elector:
    return Elector(cluster, settings.lease_namespace, settings.lease_name, settings.identity,
                   lease_seconds=settings.lease_seconds)


def _connect(connect: Callable[[], Any]) -> Any:
    try:
        return connect()
    except Unreachable as exc:
        log.error("cannot reach Kubernetes (%s): planning from the store only, no actions", exc)
        return None
