"""`gpuwatch ingest --since-last` and `--follow`: read from Prometheus only what the store lacks.

A since-last read starts at the store's **last complete step** (store/progress.py: per node, the
earliest last sample among its current devices; nodes silent for longer than ``catch_up`` behind the
bulk of the data are left out), less ``tail`` (whole steps, re-read so late scrapes and a Prometheus
restart's gap are repaired), less CONTEXT_STEPS steps of context. Read at the store's own step (the
same --step each time), it lies on the stored grid, so every re-read timestamp is one the store holds
and the load replaces it: samples per device at the timestamps the read carries (a step a partial
reply lacks keeps what is stored), the keyed tables
(devices, pods, pod_status, processes, scheduler_pending, health, topology, nodes) by key. Three
things make the pieces equal one whole read: GPU health events need the sample before them (an XID
already held when a read begins is not a new one), so events in the context steps are left to the
read that judged them with their predecessor; each pod's state rows gain a closing row at the read's
last step, so the load's pod_status replace (store/load.py) spans all the read saw of the pod (a pod
one read took for deleted, and the next finds running, loses the stale "gone" row) and the span's
first or last row, repeating the state before it, is not stored; and a pod kube-state-metrics never
reported (no uid) keeps the earliest start any read saw. With no samples of the cluster stored, the
read is a first ingest: the default window. ``follow`` repeats it every ``every`` seconds until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import functools
import math
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuwatch import store, units
from gpuwatch.ingest import prometheus, promhttp
from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store import progress as store_progress

TAIL = 600.0  # default --tail: the part of the stored data each read re-reads, seconds
EVERY = 300.0  # default --every
REQUEST_TIMEOUT = 120.0  # one Prometheus request, connect to last byte (a trickling reply is cut)
CYCLE_DEADLINE = 3600.0  # default --deadline of a --follow cycle's read: a stuck cycle cannot hold the loop
CONTEXT_STEPS = 3  # read before the tail only for the health events' predecessors; their events are dropped
FIRST_WINDOW = timedelta(days=7)  # an empty store: a normal first ingest's window
SIGNALS = (signal.SIGTERM, signal.SIGINT)
STATE = BUNDLE_COLUMNS["pod_status"][4:]  # pod_status' state columns (after ts, namespace, pod, container)


@dataclass(frozen=True)
class Plan:
    """The read a since-last ingest makes: [start, end) at ``step``; ``resume`` = where its new rows
    begin (last complete step - tail; None: a first ingest), ``progress`` = what it was judged on."""

    start: datetime
    end: datetime
    resume: datetime | None
    progress: store_progress.Progress
    fresh: bool = False  # Prometheus held no GPU series in the read: nothing was loaded


def plan(con: Any, *, end: datetime, step: float, tail: float = TAIL, catch_up: float | None = None,
         cluster: str | None = None) -> Plan:
    """The read that brings the store up to ``end`` (module docstring)."""
    horizon = timedelta(seconds=catch_up) if catch_up else store_progress.CATCH_UP
    found = store_progress.progress(con, cluster=cluster, catch_up=horizon)
    if found.complete is None:
        return Plan(end - FIRST_WINDOW, end, None, found)
    resume = found.complete - timedelta(seconds=math.ceil(tail / step) * step)  # on the stored grid
    return Plan(resume - timedelta(seconds=CONTEXT_STEPS * step), end, resume, found)


def ingest(con: Any, url: str, *, end: datetime, step: float, tail: float = TAIL, catch_up: float | None = None,
           team_label: str = "team", cluster: str | None = None, prices=(), teams=(),
           fetch: Callable[..., dict] = prometheus.fetch) -> tuple[dict[str, int], Plan]:
    """One since-last ingest from the Prometheus at ``url`` up to ``end``: (rows per table, the plan);
    no rows when the store already reaches ``end``."""
    read = plan(con, end=end, step=step, tail=tail, catch_up=catch_up, cluster=cluster)
    if read.start >= read.end:
        return dict.fromkeys(BUNDLE_COLUMNS, 0), read
    frames = fetch(url, start=read.start, end=read.end, step=step, team_label=team_label)
    if not has_gpu_data(frames):  # a fresh Prometheus (or one that lost its data): load nothing, say so
        return dict.fromkeys(BUNDLE_COLUMNS, 0), replace(read, fresh=True)
    if read.resume is not None:
        last = prometheus.time_chunks(units.epoch_seconds(read.start), units.epoch_seconds(read.end), step=step, chunk=86_400.0)[-1][1]
        frames = resumed(frames, resume=read.resume, last=datetime.fromtimestamp(last, UTC))
    counts = store.load(con, frames, source=url, window=(read.start, read.end), prices=prices, teams=teams,
                        cluster=cluster, refuse_readings=True)
    return counts, read


def has_gpu_data(frames: dict) -> bool:
    """Whether a Prometheus read found any GPU: a device or a sample."""
    return any(frames.get(name) is not None and len(frames[name]) for name in ("devices", "samples"))


def no_complete_step(url: str, start: datetime, end: datetime) -> str:
    """What a read that found no GPU series says (ingest, ingest --since-last, --follow)."""
    return (f"no complete step yet: no GPU series in [{_iso(start)}, {_iso(end)}) (dcgm-exporter or gpuwatch's "
            f"exporter not scraped yet, or not for one --step); nothing loaded. `gpuwatch doctor --from {url}` shows "
            "what Prometheus holds")


def resumed(frames: dict, *, resume: datetime, last: datetime) -> dict:
    """A resumed read's frames as a load should take them: health events from ``resume`` on (earlier
    ones were judged without the sample before them), and a closing row at ``last`` (the read's last
    step) for each pod (container) still reported there, so its state rows span what was read."""
    import pandas as pd

    out = dict(frames)
    health = frames.get("health")
    if health is not None:
        out["health"] = health[health["ts"] >= _utc(resume)].reset_index(drop=True)
    status = frames.get("pod_status")
    if status is not None and len(status):
        at = _utc(last)
        ends = status.sort_values("ts", kind="stable").groupby(["namespace", "pod", "container"], dropna=False,
                                                                sort=False).tail(1)
        still = ends[ends[list(STATE)].notna().any(axis=1) & (ends["ts"] < at)]
        out["pod_status"] = pd.concat([status, still.assign(ts=at)], ignore_index=True)
    return out


def describe(counts: dict[str, int], read: Plan, *, db: str, url: str = "Prometheus") -> str:
    """One line: what was read and loaded, and from where the read resumed."""
    window = f"[{_iso(read.start)}, {_iso(read.end)})"
    loaded = ", ".join(f"{k} {v:,}" for k, v in counts.items())
    if read.fresh:
        return f"{db}: {url}: {no_complete_step(url, read.start, read.end)}"
    if read.start >= read.end:
        return f"{db}: up to date (last complete step {_iso(read.progress.complete)}, nothing before {_iso(read.end)})"
    if read.resume is None:
        return f"loaded into {db} {window}, first ingest (no samples stored): {loaded}"
    left = "".join(f"; left out {node} (last sample {_iso(at)}, past the catch-up horizon)"
                   for node, at in read.progress.left_out)
    return (f"loaded into {db} {window}, resumed at {_iso(read.resume)} (last complete step "
            f"{_iso(read.progress.complete)} of {read.progress.nodes} node(s)){left}: {loaded}")


def run(db: str, url: str, *, every: float | None = None, end: datetime | None = None,
        clock: Callable[[], datetime] | None = None, sleep=None, deadline: float | None = None,
        timeout: float = REQUEST_TIMEOUT, **options) -> int:
    """``ingest --since-last`` into the store at ``db`` (opened for each cycle and closed after it, so
    readers may open it in between), once, or with ``every`` in a ``follow`` loop; ``clock`` gives
    each cycle's end when ``end`` is not given (default: now). Each Prometheus request gives up after
    ``timeout`` seconds, each read after ``deadline`` (default with ``every``: CYCLE_DEADLINE); a
    signal that ends the loop cancels the read in flight at once."""
    cancel = promhttp.Cancel()
    if every is not None and deadline is None:
        deadline = CYCLE_DEADLINE
    options.setdefault("fetch", functools.partial(prometheus.fetch, timeout=timeout, deadline=deadline, cancel=cancel))

    def cycle() -> None:
        con = store.connect(db)
        try:
            counts, read = ingest(con, url, end=end or (clock or _now)(), **options)
            print(describe(counts, read, db=db, url=url), flush=True)
        finally:
            con.close()

    if every is None:
        cycle()
        return 0
    return follow(cycle, every=every, sleep=sleep, on_stop=cancel.cancel)


def follow(cycle: Callable[[], object], *, every: float, sleep: Callable[[threading.Event, float], object] | None = None,
           err=None, on_stop: Callable[[], object] | None = None) -> int:
    """Run ``cycle`` every ``every`` seconds until SIGTERM/SIGINT; 0. A signal during a cycle calls
    ``on_stop`` (run: cancels the Prometheus read in flight, so a slow server cannot hold the exit)
    and lets a load already under way finish (one transaction either way); a cycle's error is one
    line on ``err`` and the loop goes on (Prometheus may be back next time). ``sleep(stop, seconds)``
    waits, returning early once ``stop`` is set (default: ``stop.wait``)."""
    stop, err = threading.Event(), err or sys.stderr

    def handle(*_) -> None:
        stop.set()
        if on_stop is not None:
            on_stop()

    previous = {s: signal.signal(s, handle) for s in SIGNALS}
    try:
        while not stop.is_set():
            try:
                cycle()
            except Exception as exc:  # a service loop outlives one failed cycle
                if stop.is_set():
                    print(f"gpuwatch ingest: stopped during a cycle, nothing of it loaded: {units.one_line(exc)}",
                          file=err, flush=True)
                    break
                print(f"gpuwatch ingest: cycle failed, next in {every:g}s: {units.one_line(exc)}", file=err, flush=True)
            if not stop.is_set():
                (sleep or (lambda event, seconds: event.wait(seconds)))(stop, every)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _utc(at: datetime):
    """``at`` (naive = UTC, as everywhere in gpuwatch) as a pandas UTC timestamp."""
    import pandas as pd

    stamp = pd.Timestamp(at)
    return stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC")


def _iso(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%dT%H:%M:%SZ")


