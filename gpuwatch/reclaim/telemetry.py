"""The controller's own Prometheus metrics, in a registry built at start-up (no import-time state).

``gpuwatch_reclaim_actions_total{action,result}``: decisions carried out (or, in dry-run,
recorded); ``action`` is stop_notebook|scale_to_zero|suspend_job|evict_pod for acts, ``warn``,
``clear``, or ``none`` for skips. ``gpuwatch_reclaim_reclaimable_gpus``: GPUs held by pods that
the last run warned or acted on (would have, in dry-run).
"""

from __future__ import annotations

from typing import Any

_LABEL = {"warned": "warn", "would_warn": "warn", "cleared": "clear", "skipped": "none"}


class ReclaimMetrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        self.actions = Counter("gpuwatch_reclaim_actions", "Reclaim decisions by action and result.",
                               ["action", "result"], registry=self.registry)
        self.reclaimable = Gauge("gpuwatch_reclaim_reclaimable_gpus",
                                 "GPUs held by idle pods the last run warned or acted on.",
                                 registry=self.registry)

    def observe(self, rows: list[dict]) -> None:
        """Count one run's audit rows."""
        for row in rows:
            action = _LABEL.get(row["decision"], row["action"])
            self.actions.labels(action=action, result=row["result"]).inc()
        live = ("warned", "would_warn", "acted", "would_act")
        self.reclaimable.set(sum(r["gpu_count"] for r in rows if r["decision"] in live))

    def serve(self, listen: str) -> Any:
        """Serve /metrics on ``host:port`` (``:9402`` = all interfaces)."""
        from prometheus_client import start_http_server

        host, _, port = listen.rpartition(":")
        return start_http_server(int(port), addr=host or "0.0.0.0", registry=self.registry)
