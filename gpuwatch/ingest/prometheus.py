"""Ingest GPU samples and pod metadata from a Prometheus server's HTTP API into bundle frames.

Reads dcgm-exporter's series (any label generation, see ``promframes``), gpuwatch's own
(``gpuwatch_gpu_memory_total_bytes``, ``gpuwatch_mig_instance_info``,
``gpuwatch_gpu_allocation_info``; the static topology info series ``gpuwatch_gpu_link_info``,
``_numa_info``, ``_fabric_info`` by their last value in the window) and kube-state-metrics' pod
series (states and pending demand, see ``promframes_status``). Each field is queried as
``avg_over_time(NAME{shard}[step - 1ms])`` over ``query_range``: the mean of the raw samples in each
step (exactly the sample when scraped once per step), and no 5-minute lookback ghosts after a
series ends (backfilled data has no staleness markers). Queries are chunked by time so no series
exceeds Prometheus's 11,000 points per query, and sharded by node (``hostname``/``Hostname``
regex, ``nodes_per_query`` at a time) so no reply grows with the fleet. 5xx, 429 and network
errors are retried with exponential backoff; everything else is a ``PrometheusError`` naming the
query and Prometheus's own message. A field with no series at all is a documented skip (a note:
e.g. no SM_ACTIVE -> effective utilisation unknown), never a zero.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from gpuwatch import units
from gpuwatch.ingest import (
    promframes,
    promframes_health,
    promframes_processes,
    promframes_queues,
    promframes_status,
    promframes_topology,
    promhttp,
)
from gpuwatch.ingest.promreply import PrometheusError, parse_matrix, parse_reply

__all__ = ["MAX_POINTS", "Client", "PrometheusError", "fetch", "parse_matrix", "parse_reply", "read", "time_chunks"]

MAX_POINTS = 11_000  # Prometheus rejects a query_range that would return more per series
CONCURRENCY = 4  # range queries in flight at once (Prometheus' own --query.max-concurrency defaults to 20)
# Nodes per query. Per-query overhead dominates small shards: 1,024 GPUs x 1 day at 60 s read in 73 s with
# 16 nodes per query, 46 s with 64 (bench/prometheus_ingest.py); 64 nodes x 8 GPUs x a day's 1,440 steps is
# well under Prometheus' default 50M-sample query limit.
NODES_PER_QUERY = 64
GPU_NAMES = "DCGM_FI_.*|dcgm_.*|gpuwatch_.*"
NODE_LABELS = ("hostname", "Hostname")
KSM_METRICS = ("kube_pod_info", "kube_pod_owner", "kube_pod_labels", "kube_pod_start_time", "kube_pod_created",
               "kube_pod_completion_time")
GPU_REQUESTS = 'kube_pod_container_resource_requests{resource=~"nvidia.*"}'
# pod_status (promframes_status) and health events / driver versions (promframes_health, promframes):
# the last value in each step
STATUS_METRICS = tuple(n for n in promframes_status.KSM_FAMILIES
                       if n not in KSM_METRICS and n != "kube_pod_container_resource_requests")
EVENT_NAMES = frozenset(promframes_health.KINDS) | {"gpuwatch_driver_info", promframes_processes.NAME}
# Node labels (prices per node label; GFD's time-slicing replicas), else the device plugin's shared
# capacity / GPUs (promframes_pods): the last value in the window.
SHARED_REPLICAS = ("kube_node_labels", 'kube_node_status_capacity{resource="nvidia_com_gpu_shared"}')


@dataclass
class Client:
    """Minimal Prometheus HTTP API client with retries; ``session`` and ``sleep`` are injectable.

    ``timeout``: the most one request may take, connect to last byte (promhttp: a trickling reply
    is cut); ``deadline``: the most the client's whole read may take, retries included (None: no
    bound); ``cancel``: cancels every request in flight at once (``ingest --follow`` on SIGTERM)."""

    url: str
    session: object = None
    timeout: float = 120.0
    retries: int = 4
    backoff: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    deadline: float | None = None
    cancel: promhttp.Cancel = field(default_factory=promhttp.Cancel)
    queries: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _until: float = field(default=math.inf, init=False, repr=False)

    def __post_init__(self):
        self.url = self.url.rstrip("/").replace("prometheus://", "http://", 1)
        self.session = self.session or promhttp.session()
        self._until = time.monotonic() + self.deadline if self.deadline is not None else math.inf

    def get(self, path: str, params: dict):
        """``data`` of a successful reply to GET ``path``; retries transient failures (5xx, 429,
        network errors, a request past its ``timeout``) within the read's ``deadline``."""
        import requests

        what = f"{self.url}{path} {params.get('query', '')}".rstrip()
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            seconds = min(self.timeout, self._until - time.monotonic())
            if seconds <= 0:
                raise PrometheusError(f"{what}: the read's deadline of {self.deadline:g}s passed "
                                      f"(after {self.queries} queries; raise --deadline, or lower --chunk)")
            try:
                status, headers, body = promhttp.get(self.session, f"{self.url}{path}", params, seconds=seconds,
                                                     cancel=self.cancel)
            except promhttp.Cancelled:
                raise PrometheusError(f"{what}: cancelled (stopping)") from None
            except (requests.ConnectionError, requests.Timeout, TimeoutError) as exc:
                if last:  # the reason, not the URL-encoded query requests repeats
                    raise PrometheusError(f"cannot reach Prometheus at {self.url}: {unreachable(exc, seconds)} "
                                          f"(gave up after {self.retries + 1} attempts; is the server up and "
                                          "the address right?)") from exc
            except requests.RequestException as exc:  # an invalid URL, a broken chunked reply ...
                raise PrometheusError(f"{what}: {type(exc).__name__}: {exc}") from exc
            else:
                if 300 <= status < 400:
                    raise PrometheusError(f"{what}: HTTP {status}, a redirect to {headers.get('Location', '?')!r}: "
                                          "not followed (give --from the address Prometheus answers on)")
                if (status < 500 and status != 429) or last:
                    with self._lock:
                        self.queries += 1
                    return parse_reply(status, body, what=what)
            self.sleep(min(self.backoff * 2 ** attempt, max(0.0, self._until - time.monotonic())))
        raise AssertionError("unreachable")

    def query_range(self, query: str, start: float, end: float, step: float) -> list:
        data = self.get("/api/v1/query_range", {"query": query, "start": _num(start), "end": _num(end),
                                                "step": _num(step)})
        return parse_matrix(data, query=query, bounds=(start, end))

    def query(self, query: str, at: float) -> list:
        data = self.get("/api/v1/query", {"query": query, "time": _num(at)})
        if isinstance(data, dict) and data.get("resultType") == "vector" and isinstance(data.get("result"), list):
            data = {"resultType": "matrix", "result": [{"metric": r.get("metric", {}), "values": [r.get("value")]}
                                                       if isinstance(r, dict) else r for r in data["result"]]}
        return parse_matrix(data, query=query, bounds=(at, at))

    def values(self, label: str, *, match: str, start: float, end: float) -> list[str]:
        data = self.get(f"/api/v1/label/{label}/values", {"match[]": match, "start": _num(start), "end": _num(end)})
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            raise PrometheusError(f"{self.url} label {label} values: expected a list of names, got {str(data)[:200]}")
        return data

    def series(self, match: str, *, start: float, end: float) -> list[dict]:
        data = self.get("/api/v1/series", {"match[]": match, "start": _num(start), "end": _num(end)})
        if not isinstance(data, list) or not all(isinstance(s, dict) and all(isinstance(v, str) for v in s.values())
                                                 for s in data):
            raise PrometheusError(f"{self.url} series {match}: expected a list of label sets, got {str(data)[:200]}")
        return data


def unreachable(exc: BaseException, timeout: float) -> str:
    """Why a request got no reply, in a few words: the OS's reason (Connection refused, Name or service
    not known ...) or the timeout."""
    import requests

    if isinstance(exc, TimeoutError) and str(exc):  # promhttp: the request's whole reply took too long
        return str(exc)
    if isinstance(exc, (requests.Timeout, TimeoutError)):
        return f"no reply within {timeout:g} s"
    found = re.findall(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    return found[-1].strip() if found else type(exc).__name__


def fetch(url: str, *, start: float | datetime, end: float | datetime, step: float = 60.0,
          chunk: float = 86_400.0, session=None, nodes_per_query: int = NODES_PER_QUERY, team_label: str = "team",
          shared_replicas: float | None = None, progress: Callable[[int, int], None] | None = None,
          client: Client | None = None, concurrency: int = CONCURRENCY, timeout: float = 120.0,
          deadline: float | None = None, cancel: promhttp.Cancel | None = None) -> dict:
    """Bundle frames (devices, samples, pods) for ``[start, end)`` at ``step`` seconds; each request
    within ``timeout`` seconds, the whole read within ``deadline`` (Client)."""
    client = client or Client(url, session=session, timeout=timeout, deadline=deadline,
                              cancel=cancel or promhttp.Cancel())
    start, end = units.epoch_seconds(start), units.epoch_seconds(end)
    grid = time_chunks(start, end, step=step, chunk=chunk)
    if not grid:
        raise ValueError(f"empty window: start {start} >= end {end}")
    series, ctx = read(client, grid, step=step, nodes_per_query=nodes_per_query, progress=progress,
                       concurrency=concurrency)
    ctx.team_label, ctx.shared_replicas = team_label, shared_replicas
    return promframes.build(series, ctx)


def read(client: Client, grid: list[tuple[float, float]], *, step: float, nodes_per_query: int,
         progress: Callable[[int, int], None] | None = None,
         concurrency: int = CONCURRENCY) -> tuple[list, promframes.Context]:
    """Every series the frames need, as ``promframes.Series``, plus the context they need."""
    lo, hi = grid[0][0], grid[-1][1]
    queues = "|".join(promframes_queues.GAUGES)
    names = set(client.values("__name__", match=f'{{__name__=~"{GPU_NAMES}|kube_pod_.*|kube_node_labels|kube_node_status_capacity|{queues}"}}',
                              start=lo, end=hi))
    fields = [n for n in names if n in promframes.SAMPLE_FIELDS]
    fields += sorted({"gpuwatch_gpu_allocation_info"} & names)
    device = sorted(n for n in names if n in promframes.DEVICE_FIELDS or n in promframes_topology.INFO_NAMES)
    shards = node_shards(client, lo, hi, per_query=nodes_per_query)
    plan = [(_avg(f"{n}{s}", step) if n.lower().startswith("dcgm") else _last(f"{n}{s}", step), n, g)
            for n in sorted(fields) for s in shards for g in grid]
    plan += [(_last(f"{n}{s}", step), n, g) for n in sorted(EVENT_NAMES & names) for s in shards for g in grid]
    plan += [(_ksm(n, step), n, g) for n in KSM_METRICS + STATUS_METRICS if n in names for g in grid]
    # Kueue's / Volcano's own pending gauges: the last value in each step
    plan += [(_last(n, step), n, g) for n in sorted(set(promframes_queues.GAUGES) & names) for g in grid]
    plan += [(_last(GPU_REQUESTS, step), "kube_pod_container_resource_requests", g) for g in grid
             if "kube_pod_container_resource_requests" in names]
    # capacity, MIG layout, topology, time-slicing capacity: the last value in the window, one instant query each
    last = [(_last(f"{n}{s}", hi - lo + step), n) for n in device for s in shards]
    last += [(_last(q, hi - lo + step), q.split("{")[0]) for q in SHARED_REPLICAS if q.split("{")[0] in names]
    def ranged(item: tuple) -> list:
        expr, name, (a, b) = item
        return [promframes.Series(name, labels, ts, v) for labels, ts, v in client.query_range(expr, a, b, step)]

    out = []
    # a few queries in flight: Prometheus evaluates one while the reply of another is parsed here
    # (results are taken in plan order; the first error ends the read)
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    try:
        for done, series in enumerate(pool.map(ranged, plan), 1):
            out += series
            if progress:
                progress(done, len(plan))
    finally:  # after an error, the queries not yet started are not made
        pool.shutdown(wait=True, cancel_futures=True)
    for expr, name in last:
        out += [promframes.Series(name, labels, ts, v) for labels, ts, v in client.query(expr, hi)]
    targets = {(s.get("namespace"), s["pod"]) for s in client.series("up", start=lo, end=hi) if s.get("pod")}
    return out, promframes.Context(target_pods=frozenset(targets), window_end=hi, step=step)


def node_shards(client: Client, start: float, end: float, *, per_query: int) -> list[str]:
    """Label selectors covering every GPU series: node-name regexes, plus series with no node label."""
    shards = ['{hostname="",Hostname=""}']
    for label in NODE_LABELS:
        nodes = sorted(client.values(label, match=f'{{__name__=~"{GPU_NAMES}"}}', start=start, end=end))
        for i in range(0, len(nodes), per_query):
            shards.append(f'{{{label}=~"{"|".join(_literal(n) for n in nodes[i:i + per_query])}"}}')
    return shards


def time_chunks(start: float, end: float, *, step: float, chunk: float) -> list[tuple[float, float]]:
    """[first, last] evaluation times per query covering the grid start + k*step < end, once each."""
    count = math.ceil((end - start) / step)  # grid points in [start, end)
    per = max(1, min(int(chunk // step), MAX_POINTS - 1))
    return [(start + k * step, start + min(k + per, count) * step - step) for k in range(0, count, per)]


def _literal(name: str) -> str:
    """``name`` as an RE2 literal inside a PromQL double-quoted string."""
    return re.sub(r"([.+*?()|\[\]{}^$\\])", r"\\\\\1", name).replace('"', '\\"')


def _ksm(name: str, step: float) -> str:
    """Only pods that request GPUs: KSM has a series per pod in the cluster."""
    return f"{_last(name, step)} and on(namespace, pod) group by (namespace, pod) ({_last(GPU_REQUESTS, step)})"


def _avg(selector: str, step: float) -> str:
    return f"avg_over_time({selector}[{_ms(step)}])"


def _last(selector: str, step: float) -> str:
    return f"last_over_time({selector}[{_ms(step)}])"


def _ms(seconds: float) -> str:
    """A range just under one step, so each sample lands in exactly one step's window."""
    return f"{max(1, round(seconds * 1000) - 1)}ms"


def _num(value: float) -> str:
    return f"{value:.3f}"


