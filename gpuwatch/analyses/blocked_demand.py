"""Blocked demand finisher: each pending pod judged per capacity bucket against its pool's free GPUs.

The free whole GPUs per node and bucket come from schedulable_capacity.sql over the window, on its
bucket grid: the very records the schedulable_capacity finding reads (one allocation history for both
findings; ``gpuwatch analyze`` stores them once, analyses.PERSISTED). Per pod:

- pool: the nodes whose labels match its node selector (a key matches as written or as
  kube-state-metrics sanitizes it, ``nvidia.com/gpu.product`` -> ``nvidia_com_gpu_product``); every
  GPU node without a selector;
- per bucket it waited in: a gang of n pods of k GPUs (its job's pods with the same request waiting
  then; n = 1 without a job) can be placed when sum over nodes of floor(free / k) >= n; the bucket is
  blocked when the pool had >= n x k free GPUs but no placement (fragmentation), and counts the part
  of the bucket the pod waited;
- verdict: ``unknown`` (no nodes or GPU data for its pool), ``blocked`` (blocked time >=
  ``blocked_min_seconds``), ``insufficient capacity`` (the pool never had enough free GPUs while it
  waited), else ``unknown`` with the reason (blocked too briefly, or a node had room: the wait had
  another cause, e.g. taints, CPU or memory);
- the cheapest defragmentation move at the first blocked bucket: the node needing the fewest running
  pods moved (then fewest GPUs moved) to free k GPUs, where the moved pods fit, first-fit largest
  first, in the other pool nodes' free GPUs (for a gang: one more k-GPU slot);
- opportunity_usd = k x the pool's cheapest GPU price x blocked hours: an opportunity cost, not spend.
"""

from __future__ import annotations

import json
import math
import re
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.analyses import node_layouts
from gpuwatch.analyses.node_layouts import value

COLUMNS = ("namespace", "pod", "job", "team", "gpu_model", "gpus_requested", "pending_from", "pending_until",
           "wait_hours", "blocked_hours", "max_free_gpus", "max_free_block", "verdict", "why", "opportunity_usd",
           "defrag_node", "defrag_pods", "defrag_gpus_moved")
LISTED = 6  # nodes named in ``why``


def finish(con: Any, frame: pd.DataFrame, params: dict) -> pd.DataFrame:
    """One row per pending pod (columns ``COLUMNS``)."""
    pending = node_layouts.records(frame, "pending")
    if not len(pending):
        return _typed(pd.DataFrame(columns=list(COLUMNS)))
    grid = Grid(con, frame, params)
    waits = [_wait(r) for r in pending.to_dict("records")]
    rows = [grid.judge(w, waits, params) for w in waits]
    return _typed(pd.DataFrame(rows, columns=list(COLUMNS)))


def _typed(out: pd.DataFrame) -> pd.DataFrame:
    for name in ("max_free_gpus", "max_free_block", "defrag_gpus_moved"):
        out[name] = out[name].astype("Int64")
    for name in ("gpus_requested", "wait_hours", "blocked_hours", "opportunity_usd"):
        out[name] = out[name].astype("float64")
    for name in ("pending_from", "pending_until"):
        out[name] = pd.to_datetime(out[name])
    return out.sort_values(["namespace", "pod"], kind="stable").reset_index(drop=True)


def _wait(r: dict) -> dict:
    return {**r, "pending_from": pd.Timestamp(r["pending_from"]), "pending_until": pd.Timestamp(r["pending_until"]),
            "job": value(r["job"]), "k": math.ceil(float(r["gpus_requested"]))}


def _naive(t: Any) -> pd.Timestamp:
    stamp = pd.Timestamp(t)
    return stamp.tz_convert("UTC").tz_localize(None) if stamp.tzinfo else stamp


class Grid:
    """Free GPUs per bucket x node over the window, and the pool of each pod."""

    def __init__(self, con: Any, frame: pd.DataFrame, params: dict):
        from gpuwatch import analyses

        self.con, self.seconds = con, float(params["capacity_bucket_seconds"])
        step = pd.Timedelta(seconds=self.seconds)
        # the window's grid, as the schedulable_capacity finding has it (the same records, stored once)
        self.start = _naive(params["start"])
        end = _naive(params["end"])
        self.records = analyses.sql_frame(con, "schedulable_capacity", **params)
        self.layouts = node_layouts.nodes(self.records)
        free = node_layouts.records(self.records, "free")
        nodes = node_layouts.records(frame, "node")
        self.names = sorted(nodes["node"])
        self.labels = {n: _labels(t) for n, t in zip(nodes["node"], nodes["labels"], strict=True)}
        self.model = dict(zip(nodes["node"], nodes["gpu_model"], strict=True))
        self.price = {n: value(p) for n, p in zip(nodes["node"], nodes["usd_per_gpu_hour"], strict=True)}
        self.total = dict(zip(nodes["node"], nodes["gpus"], strict=True))
        buckets = math.ceil((end - self.start) / step)
        column = {n: i for i, n in enumerate(self.names)}
        # -1: the node was not observed in that bucket (unknown, never 0 free)
        self.free = np.full((buckets, len(self.names)), -1, dtype=np.int64)
        self.mask = np.full((buckets, len(self.names)), -1, dtype=np.int64)
        masks = free["free_mask"].where(free["free_mask"].notna() & (free["unplaced"] == 0), -1)
        # each record is a run of buckets [bucket_from, bucket_to) in which a node's free set stays the same:
        # one (bucket, node) cell per bucket of each run, filled at once
        known = free["node"].isin(column).to_numpy()
        lo = free["bucket_from"].to_numpy()[known].astype(np.int64)
        hi = np.minimum(free["bucket_to"].to_numpy()[known].astype(np.int64), buckets)
        lo = np.clip(lo, 0, hi)
        cols = free["node"][known].map(column).to_numpy().astype(np.int64)
        runs = hi - lo
        rows = np.repeat(lo - np.cumsum(runs) + runs, runs) + np.arange(runs.sum())
        self.free[rows, np.repeat(cols, runs)] = np.repeat(free["free_gpus"].to_numpy()[known].astype(np.int64), runs)
        self.mask[rows, np.repeat(cols, runs)] = np.repeat(masks.to_numpy()[known].astype(np.int64), runs)

    def pool(self, selector: Any) -> list[int] | None:
        """Column numbers of the nodes a selector admits (None: unreadable selector)."""
        wanted = {}
        if value(selector) is not None:
            try:
                wanted = json.loads(selector)
            except ValueError:
                return None
            if not isinstance(wanted, dict):
                return None
        return [i for i, n in enumerate(self.names) if _matches(wanted, self.labels[n])]

    def buckets(self, w: dict) -> tuple[int, int]:
        """The buckets judged: those starting inside the wait, else (a short wait) the one holding its start."""
        step = pd.Timedelta(seconds=self.seconds)
        lo = math.ceil((w["pending_from"] - self.start) / step)
        hi = math.ceil((w["pending_until"] - self.start) / step)
        if hi <= lo:
            lo = math.floor((w["pending_from"] - self.start) / step)
        return max(lo, 0), min(hi, self.free.shape[0])

    def overlap(self, w: dict, lo: int, hi: int) -> np.ndarray:
        """Seconds of the wait each judged bucket stands for: its part of the wait, the first one also
        the wait before it (judged by the first bucket inside the wait)."""
        starts = np.array([(self._at(b) - w["pending_from"]).total_seconds() for b in range(lo, hi)])
        wait = (w["pending_until"] - w["pending_from"]).total_seconds()
        seconds = np.clip(np.minimum(starts + self.seconds, wait) - np.maximum(starts, 0.0), 0.0, None)
        if len(seconds) and starts[0] > 0:
            seconds[0] += min(starts[0], wait)
        return seconds

    def judge(self, w: dict, waits: list[dict], params: dict) -> dict:
        k = w["k"]
        pool = self.pool(w.get("node_selector"))
        wait_s = (w["pending_until"] - w["pending_from"]).total_seconds()
        row = {"namespace": w["namespace"], "pod": w["pod"], "job": w["job"], "team": w["team"],
               "gpus_requested": float(w["gpus_requested"]), "pending_from": w["pending_from"],
               "pending_until": w["pending_until"], "wait_hours": wait_s / 3600}
        if value(w.get("node_selector")) is not None and pool:
            row["gpu_model"] = ",".join(sorted({str(self.model[self.names[i]]) for i in pool}))
        if not pool:
            why = "its node selector is unreadable" if pool is None else "no node with GPU data matches its node selector"
            return {**row, "verdict": "unknown", "why": why}
        lo, hi = self.buckets(w)
        if hi <= lo:
            return {**row, "verdict": "unknown", "why": "no capacity buckets cover its wait"}
        cells = self.free[lo:hi][:, pool]
        seen = cells >= 0
        # the pool while it waited: its nodes observed then; a bucket is judged only when all of them were
        # observed in it (a node missing from a bucket could have had room: unknown, never 0 free)
        present = seen.any(axis=0)
        judged = seen[:, present].all(axis=1) & present.any()
        if not judged.any():
            return {**row, "verdict": "unknown", "opportunity_usd": None,
                    "why": "its pool was not observed in full at any time while it waited"}
        big = np.array([self.total.get(self.names[i], 0) >= k for i in pool]) & present
        if not big.any():
            observed = np.where(seen, cells, 0)[judged]
            return {**row, "verdict": "insufficient capacity", "opportunity_usd": 0.0, "blocked_hours": 0.0,
                    "max_free_gpus": int(observed.sum(axis=1).max()), "max_free_block": int(observed.max()),
                    "why": f"no node of its pool has {k} GPUs: no move could make room"}
        # only nodes that can ever hold k GPUs count as room for it (GPUs free on smaller nodes are not
        # fragmentation a move could fix)
        free = np.where(seen, cells, 0) * big
        gang = _gang(w, waits, self.start, self.seconds, lo, hi)
        slots = (free // k).sum(axis=1)
        enough = judged & (free.sum(axis=1) >= gang * k)
        placed = judged & (slots >= gang)
        blocked = enough & ~placed
        seconds = self.overlap(w, lo, hi)
        blocked_s = float(seconds[blocked].sum())
        row.update(blocked_hours=blocked_s / 3600, max_free_gpus=int(free[judged].sum(axis=1).max()),
                   max_free_block=int(free[judged].max()))
        if blocked_s >= float(params["blocked_min_seconds"]):
            first = lo + int(np.argmax(blocked))
            prices = [self.price[self.names[i]] for i in pool if self.price[self.names[i]] is not None]
            return {**row, "verdict": "blocked", "why": self._why(first, pool, k, int(gang[first - lo])),
                    "opportunity_usd": k * min(prices) * blocked_s / 3600 if prices else None,
                    **self._defrag(first, pool, k)}
        if not enough.any() and judged.all():
            return {**row, "verdict": "insufficient capacity", "opportunity_usd": 0.0,
                    "why": f"its pool never had {int(gang.max()) * k} GPUs free on nodes of {k} or more GPUs "
                           f"while it waited (at most {row['max_free_gpus']} free)"}
        if not enough.any():
            return {**row, "verdict": "unknown", "opportunity_usd": None,
                    "why": f"its pool had at most {row['max_free_gpus']} GPUs free on nodes of {k} or more GPUs "
                           "while observed in full; part of the wait it was not"}
        if blocked_s > 0:
            return {**row, "verdict": "unknown", "opportunity_usd": None,
                    "why": f"blocked by fragmentation for {blocked_s / 60:.0f} min only (under "
                           f"{float(params['blocked_min_seconds']) / 60:g} min); the rest of the wait had another cause "
                           "or too few free GPUs"}
        first = lo + int(np.argmax(placed))
        return {**row, "verdict": "unknown", "opportunity_usd": None,
                "why": f"at {self._at(first):%Y-%m-%d %H:%M} a node of its pool had {k} GPUs free: "
                       "the wait had another cause (taints, CPU, memory, quota)"}

    def _at(self, bucket: int) -> pd.Timestamp:
        return self.start + pd.Timedelta(seconds=self.seconds * bucket)

    def _why(self, bucket: int, pool: list[int], k: int, gang: int) -> str:
        free = [(int(self.free[bucket, i]), self.names[i], i) for i in pool
                if self.free[bucket, i] > 0 and self.total.get(self.names[i], 0) >= k]
        free.sort(key=lambda x: (-x[0], x[1]))
        parts = [f"{name} {count} free{self._block(bucket, i)}" for count, name, i in free[:LISTED]]
        more = f" and {len(free) - LISTED} more nodes" if len(free) > LISTED else ""
        total = sum(c for c, _, _ in free)
        need = f"{gang} pods of {k} GPUs" if gang > 1 else f"{k} GPUs"
        return (f"at {self._at(bucket):%Y-%m-%d %H:%M} its pool had {total} GPUs free but no node could take {need}: "
                + ", ".join(parts) + more)

    def _block(self, bucket: int, column: int) -> str:
        node = self.layouts.get(self.names[column])
        mask = int(self.mask[bucket, column])
        if node is None or not node.known or mask < 0:
            return " (links unknown)"
        return f" (largest NVLink block {node.layout.largest_block(mask).bit_count()})"

    def _defrag(self, bucket: int, pool: list[int], k: int) -> dict:
        free = {self.names[i]: int(self.free[bucket, i]) for i in pool if self.free[bucket, i] >= 0}
        holders = node_layouts.holders(self.records, self._at(bucket))
        best = None
        for name in sorted(free):
            if self.total.get(name, 0) < k or free[name] >= k:
                continue
            others = {n: f for n, f in free.items() if n != name}
            move = cheapest_move(holders.get(name, {}), k - free[name], others)
            if move is not None and (best is None or (len(move[0]), move[1], name) < (len(best[1][0]), best[1][1], best[0])):
                best = (name, move)
        if best is None:
            return {"defrag_node": None, "defrag_pods": None, "defrag_gpus_moved": None}
        name, (pods, gpus) = best
        return {"defrag_node": name, "defrag_pods": ",".join(pods), "defrag_gpus_moved": gpus}


def cheapest_move(holders: dict[str, int], deficit: int, others: dict[str, int]) -> tuple[list[str], int] | None:
    """The fewest pods (then fewest GPUs) to move off a node so that ``deficit`` more GPUs are free
    there, the moved pods fitting first-fit (largest first) into ``others``' free GPUs; None if none."""
    pods = sorted(holders)
    for size in range(1, len(pods) + 1):
        best = None
        for combo in combinations(pods, size):
            moved = 0
            for p in combo:
                moved |= holders[p]
            kept = 0
            for p in pods:
                if p not in combo:
                    kept |= holders[p]
            if (moved & ~kept).bit_count() < deficit:
                continue
            gpus = sum(holders[p].bit_count() for p in combo)
            if _fits([holders[p].bit_count() for p in combo], others) and (best is None or gpus < best[1]):
                best = (list(combo), gpus)
        if best is not None:
            return best
    return None


def _fits(sizes: list[int], free: dict[str, int]) -> bool:
    room = dict(sorted(free.items()))
    for size in sorted(sizes, reverse=True):
        target = next((n for n, f in room.items() if f >= size), None)
        if target is None:
            return False
        room[target] -= size
    return True


def _gang(w: dict, waits: list[dict], start: pd.Timestamp, seconds: float, lo: int, hi: int) -> np.ndarray:
    """Pods of its gang (same namespace, job and request) waiting in each bucket (>= 1)."""
    if w["job"] is None:
        return np.ones(hi - lo, dtype=np.int64)
    count = np.zeros(hi - lo, dtype=np.int64)
    for other in waits:
        if (other["namespace"], other["job"], other["k"]) != (w["namespace"], w["job"], w["k"]):
            continue
        for b in range(lo, hi):
            t0 = start + pd.Timedelta(seconds=seconds * b)
            if other["pending_from"] < t0 + pd.Timedelta(seconds=seconds) and other["pending_until"] > t0:
                count[b - lo] += 1
    return np.maximum(count, 1)


def _labels(text: Any) -> dict:
    if value(text) is None:
        return {}
    try:
        labels = json.loads(text)
    except ValueError:
        return {}
    return labels if isinstance(labels, dict) else {}


def _matches(selector: dict, labels: dict) -> bool:
    for key, wanted in selector.items():
        got = labels.get(key, labels.get(re.sub(r"[^a-zA-Z0-9_]", "_", str(key))))
        if got is None or str(got) != str(wanted):
            return False
    return True
