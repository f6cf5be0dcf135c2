"""FGD finisher: the fragmentation measure of Weng et al. (ATC'23), GPU-only (docs/architecture.md#finding-semantics).

For each task type m = (k GPUs, d milli-GPU each, GPU model or any) with popularity p_m, a node's
GPUs with free shares R_g fragment F_n(m) = Σ R_g when fewer than k GPUs (of m's model) have
R_g ≥ d, else Σ R_g·[R_g < d]; F_n = Σ_m p_m·F_n(m); the fleet ratio is Σ F_n / Σ R_g. The last
row (node ``(fleet)``) carries the fleet totals and ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

COLUMNS = ("node", "gpu_model", "gpus", "free_gpu_share", "fragmented_gpu_share", "fragmentation_ratio")
FLEET = "(fleet)"
MILLI = 1000


@dataclass(frozen=True)
class TaskType:
    """k GPUs of d milli-GPU each, on GPUs of ``model`` (None = any), seen ``weight`` times."""

    k: int
    d: int
    model: str | None = None
    weight: float = 1.0


def task_fragment(free: Sequence[tuple[int, str | None]], task: TaskType) -> int:
    """F_n(m) in milli-GPU for one node's GPUs given as (free milli-GPU, model)."""
    d = max(1, min(MILLI, task.d))
    usable = [task.model is None or model == task.model for _, model in free]
    fitting = sum(ok and r >= d for (r, _), ok in zip(free, usable, strict=True))
    if fitting < task.k:
        return sum(r for r, _ in free)
    return sum(r for (r, _), ok in zip(free, usable, strict=True) if r < d or not ok)


def node_fragment(free: Sequence[tuple[int, str | None]], tasks: Sequence[TaskType]) -> float | None:
    """F_n in milli-GPU: the popularity-weighted task fragments; None without any task type."""
    total = sum(t.weight for t in tasks)
    if total <= 0:
        return None
    return sum(t.weight / total * task_fragment(free, t) for t in tasks)


def finish(con: Any, frame: pd.DataFrame, params: dict) -> pd.DataFrame:
    """Per node, then one ``(fleet)`` row; shares in GPUs, ratios 0-1."""
    gpus = frame[frame["kind"] == "gpu"]
    task_rows = frame[frame["kind"] == "task"]
    tasks = [TaskType(int(k), int(d), None, float(n))
             for k, d, n in zip(task_rows["k"], task_rows["d"], task_rows["pods"], strict=True)]
    rows, models = [], set(gpus["gpu_model"].dropna())
    for node, group in gpus.groupby("node", sort=True):
        free = [(int(r), m) for r, m in zip(group["free_milli"], group["gpu_model"], strict=True)]
        rows.append(_row(node, set(group["gpu_model"].dropna()), len(free), sum(r for r, _ in free),
                         node_fragment(free, tasks)))
    if not rows:
        return pd.DataFrame(columns=list(COLUMNS))
    fragments = [r["_fragment"] for r in rows]
    fleet = _row(FLEET, models, sum(r["gpus"] for r in rows), sum(r["_free"] for r in rows),
                 None if not tasks else sum(fragments))
    return pd.DataFrame([*rows, fleet], columns=list(COLUMNS))


def _row(node: str, models: set, gpus: int, free_milli: int, fragment: float | None) -> dict:
    if fragment is not None:  # a weighted mean of parts of free_milli: clamp float rounding
        fragment = min(max(fragment, 0.0), float(free_milli))
    return {"node": node, "gpu_model": ",".join(sorted(models)), "gpus": gpus,
            "free_gpu_share": free_milli / MILLI,
            "fragmented_gpu_share": None if fragment is None else fragment / MILLI,
            "fragmentation_ratio": None if fragment is None or free_milli == 0 else fragment / free_milli,
            "_free": free_milli, "_fragment": fragment}
