"""The records plan() reads and writes: a pod's cluster state, and one decision (an Action).

Pure: no I/O, no heavy imports. Findings arrive as pandas frames or plain dicts; ``as_records``
and ``as_utc`` normalise both so plan() never imports pandas.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

DECISIONS = ("warn", "act", "clear", "skip")


@dataclass(frozen=True)
class PodState:
    """What the cluster (or, with no cluster, the store's pods table) says about one GPU pod."""

    namespace: str
    pod: str
    owner_kind: str
    owner_name: str
    team: str = ""
    priority_class: str = ""
    uid: str = ""
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    owner_annotations: Mapping[str, str] = field(default_factory=dict)
    owner_stopped: bool = False  # replicas 0, Job suspended, Notebook stopped: nothing to reclaim
    gpu_count: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.pod)

    @property
    def owner_key(self) -> str:
        return f"{self.namespace}/{self.owner_kind}/{self.owner_name}"


@dataclass(frozen=True)
class Action:
    """One decision about one pod or one owner. ``decision`` is warn|act|clear|skip."""

    decision: str
    action: str  # stop_notebook|scale_to_zero|suspend_job|evict_pod|none
    namespace: str
    pod: str
    owner_kind: str
    owner_name: str
    team: str
    reason: str
    idle_since: datetime | None = None
    gpu_count: float = 0.0
    usd_per_hour: float = 0.0
    pods: tuple[str, ...] = ()  # every pod an owner-level action covers
    pod_uids: tuple[str, ...] = ()
    warning_value: str = ""  # the warning annotation as planned on; re-checked before acting
    recommendation_id: str = ""

    @property
    def owner_key(self) -> str:
        return f"{self.namespace}/{self.owner_kind}/{self.owner_name}"

    @property
    def writes(self) -> bool:
        """Whether applying this decision (outside dry-run) would write to the API."""
        return self.decision in ("warn", "act", "clear")


def as_records(rows: Any) -> list[dict]:
    """A DataFrame or an iterable of mappings, as a list of dicts (timestamps as datetimes).

    Column-wise conversion: ``to_dict('records')`` boxes every timestamp as a pandas Timestamp,
    which dominates plan()'s time on 50,000 findings.
    """
    if not hasattr(rows, "columns"):
        return [dict(r) for r in (rows or [])]
    columns = {name: _column(rows[name]) for name in rows.columns}
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _column(column: Any) -> list:
    kind = str(column.dtype)
    if kind.startswith("datetime64"):
        if getattr(column.dt, "tz", None) is not None:
            column = column.dt.tz_convert("UTC").dt.tz_localize(None)
        return column.to_numpy(dtype="datetime64[us]").astype(object).tolist()  # NaT -> None
    return column.tolist()


def as_utc(value: Any) -> datetime | None:
    """A timezone-aware UTC datetime from a datetime, pandas Timestamp, ISO string or epoch s."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value != value:  # pandas NaT
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value if value.tzinfo is UTC else value.astimezone(UTC)
    if isinstance(value, str):
        return as_utc(datetime.fromisoformat(value.replace("Z", "+00:00"))) if value.strip() else None
    if isinstance(value, int | float):
        return None if math.isnan(value) else datetime.fromtimestamp(value, tz=UTC)
    if str(value) == "NaT":
        return None
    raise ValueError(f"not a timestamp: {value!r}")


def rfc3339(moment: datetime) -> str:
    """The annotation format: ``2026-11-22T09:15:00Z`` (seconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def number(value: Any, default: float = 0.0) -> float:
    """A finite float, or ``default`` for None/NaN/unparseable."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(out) else out


def flag(value: Any) -> bool:
    """Truthiness that treats NaN/None/'false'/'0' as False (CSV round trips)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(number(value))


def by_key(states: Iterable[PodState]) -> dict[tuple[str, str], PodState]:
    return {s.key: s for s in states}
