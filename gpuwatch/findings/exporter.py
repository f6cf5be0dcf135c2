"""``gpuwatch export-derived``: the analyzer's findings as Prometheus metrics, for alerting.

A per-scrape custom collector on a private registry: each scrape builds fresh families from the
latest analysis results (idle_hoarding, false_utilization, mig_fragmentation, chargeback, gang_stall
and mig_mismatch when present), so a pod that stops being a finding disappears instead of lingering.
``gpuwatch_finding_judged{finding}`` says which findings the store's evidence can judge at all
(findings/judgement.py): a finding at 0 has no series because it is unknown, never because it is 0. Results are cached
for ``--ttl`` seconds so scrapes don't rerun the analyses; the store is opened read-only per
refresh and closed again, so ``gpuwatch ingest`` can write between refreshes. A failing analysis
(or store) never fails the scrape: it reads ``gpuwatch_derived_up 0`` and
``gpuwatch_derived_analysis_up{analysis} 0``, with the other analyses' findings still served.
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from gpuwatch import analyses, idle_bridge, store, units
from gpuwatch.analyses.params import params
from gpuwatch.analyses.params import window as analysis_window
from gpuwatch.exporter import server as http_server
from gpuwatch.findings import findings as assemble

log = logging.getLogger(__name__)

# name -> (type, help, labels): every series this command serves.
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "gpuwatch_idle_gpu_hours": ("gauge", "GPU-hours a pod's GPUs sat idle in the analysis window.",
                                ("namespace", "pod", "team")),
    "gpuwatch_false_util_gpu_hours": ("gauge", "GPU-hours a pod looked busy (reported) while its SMs idled (effective).",
                                      ("namespace", "pod", "team")),
    "gpuwatch_waste_usd": ("gauge", "Cost of waste in the window by kind (idle|false_util|stranded|unallocated).",
                           ("namespace", "team", "kind")),
    "gpuwatch_mig_stranded_slices": ("gauge", "Free MIG memory slices no requested profile can use, per GPU.",
                                     ("hostname", "UUID")),
    "gpuwatch_reclaimable_gpus": ("gauge", "GPUs held by pods idle right now for at least the reclaim threshold "
                                  "(idle bridge step 4).", ()),
    "gpuwatch_idle_bridge_pods": ("gauge", "Pods at each step of the idle bridge (docs/architecture.md#the-idle-bridge): "
                                  "idle (idle in the window), hoarders, holding (still holding their GPUs at its end), "
                                  "reclaimable (idle right up to its end).", ("step",)),
    "gpuwatch_idle_bridge_usd": ("gauge", "Idle cost in the analysis window of the pods at each idle bridge step "
                                 "(idle, hoarders, holding).", ("step",)),
    "gpuwatch_reclaimable_usd_per_hour": ("gauge", "What the GPUs of the pods reclaimable now cost per hour "
                                          "(idle bridge step 4).", ()),
    "gpuwatch_reclaimable_run_rate_usd_per_month": ("gauge", "Each reclaimable pod's idle cost per hour it was "
                                                    "observed, x hours per month, summed (idle bridge step 5).", ()),
    "gpuwatch_gang_stall_idle_gpu_hours": ("gauge", "GPU-hours a job's pods held GPUs idle while siblings were Pending "
                                           "(kind partial_allocation) in the analysis window; gang = the job (not `job`: Prometheus' own label).",
                                           ("namespace", "gang")),
    "gpuwatch_mig_mismatch_failed_runs": ("gauge", "Runs of a pod (or job) that failed at its device's memory limit "
                                          "in the analysis window (cause gpu_memory: the profile is too small; "
                                          "host_memory: OOMKilled by its memory cgroup).",
                                          ("namespace", "pod", "gang", "team", "cause", "recommended_profile")),
    "gpuwatch_finding_judged": ("gauge", "1 if the store holds the evidence the finding needs (judged, maybe on less "
                                "evidence), 0 if it is not judged: its series are then absent because unknown, "
                                "not because nothing was found (gpuwatch doctor names the config that enables it).",
                                ("finding",)),
    "gpuwatch_derived_analysis_up": ("gauge", "1 if the analysis ran on the last refresh, 0 if it failed.", ("analysis",)),
    "gpuwatch_derived_up": ("gauge", "1 if every analysis ran on the last refresh, 0 otherwise.", ()),
    "gpuwatch_derived_window_seconds": ("gauge", "Length of the analysis window.", ()),
    "gpuwatch_derived_refresh_timestamp_seconds": ("gauge", "When the served findings were computed.", ()),
}
ANALYSES = ("idle_hoarding", "false_utilization", "mig_fragmentation", "chargeback", "gang_stall", "mig_mismatch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="DuckDB store written by gpuwatch ingest (opened read-only)")
    parser.add_argument("--listen", default=":9401", help="[HOST]:PORT to serve /metrics on (default: %(default)s)")
    parser.add_argument("--window", default="7d", help="analysis window ending at the latest data (default: %(default)s)")
    parser.add_argument("--ttl", type=float, default=60.0, help="seconds to reuse results between scrapes (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    window = timedelta(seconds=units.parse_duration(args.window, what="--window"))
    if not (math.isfinite(args.ttl) and args.ttl >= 0):  # every flag checked before the store is opened
        raise units.UsageError(f"--ttl: {args.ttl!r} is not a number of seconds >= 0")
    units.parse_listen(args.listen, what="--listen")
    collector = DerivedCollector(lambda: store.connect(args.db, read_only=True), window=window, ttl=args.ttl)
    server = serve(collector, args.listen)
    log.info("serving derived metrics from %s on :%s/metrics (window %s)", args.db, server.port, args.window)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def render(con: Any, *, window: timedelta | str = "7d") -> str:
    """The /metrics text for the store behind ``con`` (tests, and a one-shot ``curl``-less check)."""
    from prometheus_client import generate_latest

    collector = DerivedCollector(lambda: con, window=window, ttl=0.0, close=False)
    return generate_latest(_registry(collector)).decode()


class DerivedCollector:
    """prometheus_client custom collector; ``connect`` opens the store, ``clock`` is injectable."""

    def __init__(self, connect: Callable[[], Any], *, window: timedelta | str, ttl: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, close: bool = True):
        self.connect, self.ttl, self.clock, self.close = connect, ttl, clock, close
        self.window = timedelta(seconds=units.parse_duration(window, what="window")) if isinstance(window, str) else window
        self._lock = threading.Lock()
        self._cached: tuple[float, dict] | None = None

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        values = self.values()
        for name, (_type, help_text, labels) in METRICS.items():
            family = GaugeMetricFamily(name, help_text, labels=list(labels))
            for label_values, value in values.get(name, ()):
                family.add_metric(list(label_values), value)
            yield family

    def values(self) -> dict[str, list[tuple[tuple, float]]]:
        """Cached ``{metric: [(label values, value)]}``; recomputed once older than ``ttl``."""
        with self._lock:
            now = self.clock()
            if self._cached is None or now - self._cached[0] >= self.ttl:
                self._cached = (now, self._refresh())
            return self._cached[1]

    def _refresh(self) -> dict:
        try:
            con = self.connect()
        except Exception as exc:  # a missing/locked store is a finding about us, not a failed scrape
            log.warning("export-derived: cannot open the store: %s", exc)
            return _status({name: False for name in ANALYSES}, self.window)
        try:
            return compute(con, window=self.window)
        finally:
            if self.close:
                con.close()


def compute(con: Any, *, window: timedelta) -> dict:
    """Run the analyses over ``window`` ending at the latest data; findings + per-analysis status."""
    present = [name for name in ANALYSES if name in analyses.names()]
    try:
        first, last = store.data_range(con)
        start, end = analysis_window(last, length=window, first_ts=first)
    except Exception as exc:
        log.warning("export-derived: no analysis window: %s", exc)
        return _status(dict.fromkeys(present, False), window)
    ok: dict[str, bool] = {}

    def guarded(con: Any, name: str, **p: Any):  # one broken analysis must not hide the others' findings
        try:
            frame, ok[name] = analyses.run(con, name, **p), True
        except Exception as exc:
            log.warning("export-derived: analysis %s failed: %s", name, exc)
            frame, ok[name] = None, False
        return frame

    frames = assemble(con, params(start, end), only=[*present, "judgement"], run=guarded)
    frames = {name: frame for name, frame in frames.items() if frame is not None}
    return _status(ok, window) | findings(frames)


def findings(frames: dict) -> dict[str, list[tuple[tuple, float]]]:
    """Series per metric from analysis frames (docs/architecture.md#finding-semantics columns); only non-zero findings."""
    out: dict[str, list] = {}
    judged = frames.get("judgement")
    if judged is not None:
        out["gpuwatch_finding_judged"] = [((r.finding,), float(bool(r.judged))) for r in judged.itertuples(index=False)]
    idle, false = frames.get("idle_hoarding"), frames.get("false_utilization")
    if idle is not None:
        out["gpuwatch_idle_gpu_hours"] = _per_pod(idle, "idle_gpu_hours")
        out.update(_bridge(idle_bridge.bridge(idle, chargeback=frames.get("chargeback"))))
    if false is not None:
        out["gpuwatch_false_util_gpu_hours"] = _per_pod(false, "false_util_gpu_hours")
    out["gpuwatch_waste_usd"] = _waste(frames.get("chargeback"), idle, false)
    stall, mismatch = frames.get("gang_stall"), frames.get("mig_mismatch")
    if stall is not None:
        held = stall[(stall["kind"] == "partial_allocation") & (stall["idle_gpu_hours"].fillna(0) > 0)]
        sums = held.assign(job=held["job"].map(_text)).groupby(["namespace", "job"])["idle_gpu_hours"].sum()
        out["gpuwatch_gang_stall_idle_gpu_hours"] = [((ns, job), round(float(v), 6)) for (ns, job), v in sums.items()]
    if mismatch is not None:
        out["gpuwatch_mig_mismatch_failed_runs"] = [
            ((r.namespace, r.pod, _text(getattr(r, "job", None)), _text(r.team), r.cause, _text(r.recommended_profile)),
             float(r.failed_runs)) for r in mismatch.itertuples(index=False)]
    mig = frames.get("mig_fragmentation")
    if mig is not None:
        rows = mig[mig["gpu_uuid"].notna() & (mig["stranded_slices"].fillna(0) > 0)]
        out["gpuwatch_mig_stranded_slices"] = [((r.node, r.gpu_uuid), float(r.stranded_slices))
                                               for r in rows.itertuples(index=False)]
    return out


def _bridge(steps: idle_bridge.Bridge) -> dict[str, list[tuple[tuple, float]]]:
    """The idle bridge's steps (gpuwatch/idle_bridge.py: the figures the CLI, app and report print)."""
    return {"gpuwatch_reclaimable_gpus": [((), steps.reclaimable_gpus)],
            "gpuwatch_idle_bridge_pods": [(("idle",), float(steps.idle_pods)), (("hoarders",), float(steps.hoarder_pods)),
                                          (("holding",), float(steps.holding_pods)),
                                          (("reclaimable",), float(steps.reclaimable_pods))],
            # an unpriced amount (None) is left out: an absent series is unknown, 0 would be a wrong dollar
            "gpuwatch_idle_bridge_usd": [(step, usd) for step, usd in ((("idle",), steps.idle_usd),
                                         (("hoarders",), steps.hoarder_usd), (("holding",), steps.holding_usd))
                                         if usd is not None],
            "gpuwatch_reclaimable_usd_per_hour": [((), v) for v in (steps.reclaimable_usd_per_hour,) if v is not None],
            "gpuwatch_reclaimable_run_rate_usd_per_month": [((), v) for v in (steps.run_rate_usd_per_month,)
                                                            if v is not None]}


def _per_pod(frame, column: str) -> list[tuple[tuple, float]]:
    rows = frame[frame[column].fillna(0) > 0]
    return [((r.namespace, r.pod, _text(r.team)), float(getattr(r, column))) for r in rows.itertuples(index=False)]


def _waste(chargeback, idle, false) -> list[tuple[tuple, float]]:
    """Per (namespace, team): idle and false-util cost; fleet: unallocated and stranded cost.

    From chargeback (the same cents as the weekly report) when it ran, else from the idle and
    false-util findings (which have no fleet-level kinds).
    """
    if chargeback is None:
        parts = [(idle, "idle_cost_usd", "idle"), (false, "false_util_cost_usd", "false_util")]
        return [s for frame, column, kind in parts if frame is not None for s in _per_team(frame, column, kind)]
    teams = chargeback[chargeback["kind"] == "team"]
    out = _per_team(teams, "idle_usd", "idle") + _per_team(teams, "false_util_usd", "false_util")
    for kind in ("unallocated", "stranded"):
        total = float(chargeback.loc[chargeback["kind"] == kind, "cost_usd"].sum())
        if total > 0:
            out.append((("", "", kind), round(total, 2)))
    return out


def _per_team(frame, column: str, kind: str) -> list[tuple[tuple, float]]:
    if column not in frame:
        return []
    keys = frame.assign(namespace=frame["namespace"].map(_text), team=frame["team"].map(_text))
    sums = keys.groupby(["namespace", "team"])[column].sum()
    return [((ns, team, kind), round(float(v), 2)) for (ns, team), v in sums.items() if v > 0]


def _text(value) -> str:
    return "" if value is None or value != value else str(value)


def _status(ok: dict[str, bool], window: timedelta) -> dict:
    return {"gpuwatch_derived_analysis_up": [((name,), float(up)) for name, up in ok.items()],
            "gpuwatch_derived_up": [((), float(all(ok.values())))],
            "gpuwatch_derived_window_seconds": [((), window.total_seconds())],
            "gpuwatch_derived_refresh_timestamp_seconds": [((), time.time())]}


def _registry(collector: DerivedCollector):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve(collector: DerivedCollector, listen: str = ":9401") -> http_server.Server:
    """Serve /metrics in a background thread on the exporter's bounded server (``.port``, ``.stop()``)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    registry = _registry(collector)
    return http_server.serve_metrics(lambda: generate_latest(registry), listen, content_type=CONTENT_TYPE_LATEST,
                                     name="gpuwatch-derived")
