"""How old the data behind the findings is, and whether it may be acted on.

One rule, used twice: by plan() when it decides and by apply()'s re-check right before a write
(with the clock read again), so a pass that started on fresh data cannot act on it once it is
stale. Findings from a CSV carry their as-of time in the ``data_as_of`` column written by
``gpuwatch analyze``; a CSV without it (or with an empty or unparseable one) has *unknown*
freshness, and unknown is never guessed: no action.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuwatch.reclaim.records import as_utc

AS_OF_COLUMN = "data_as_of"
SKEW_SECONDS = 300.0  # clock skew tolerated between the analyzer and the controller


def csv_as_of(frame: Any, *, source: str) -> tuple[datetime | None, str]:
    """(as-of time, '') from a findings frame's ``data_as_of`` column, or (None, why not).

    Every row carries the same value; when rows disagree the oldest one counts (the
    conservative choice: the findings are only as fresh as their stalest row).
    """
    if AS_OF_COLUMN not in getattr(frame, "columns", ()):
        return None, f"{source}: no {AS_OF_COLUMN} column (re-run `gpuwatch analyze` to write it)"
    values = [v for v in frame[AS_OF_COLUMN].tolist() if isinstance(v, str) and v.strip()]
    if len(frame) and len(values) < len(frame):
        return None, f"{source}: column {AS_OF_COLUMN} is empty on {len(frame) - len(values)} row(s)"
    moments = []
    for row, value in enumerate(values, start=2):  # row 1 is the header
        try:
            moments.append(as_utc(value))
        except ValueError:
            return None, f"{source}: column {AS_OF_COLUMN}, row {row}: not an ISO-8601 time: {value!r}"
    if not moments:
        return None, f"{source}: no rows, so no {AS_OF_COLUMN} time"
    return min(moments), ""


def stale_reason(as_of: datetime | None, now: datetime, *, max_age_seconds: float) -> str:
    """'' when data as of ``as_of`` may be acted on at ``now``, else why not (one line)."""
    if as_of is None:
        return "data as-of time unknown: no action on data of unknown age"
    age = (as_utc(now) - as_utc(as_of)).total_seconds()
    stamp = as_utc(as_of).strftime("%Y-%m-%d %H:%M UTC")
    if age > max_age_seconds:
        return (f"data is stale: latest sample {stamp} is {age / 60:.0f} min old, "
                f"older than max_data_age_seconds ({max_age_seconds / 60:.0f} min)")
    if age < -SKEW_SECONDS:
        return f"data as-of {stamp} is in the future (clock skew?): no action"
    return ""
