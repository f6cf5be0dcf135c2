"""Where each row of the lake lives, and what each object is called: pure, no I/O (docs/lake.md#layout).

``<base>/<table>/cluster=<cluster>/date=<YYYY-MM-DD>/part-<digest>.parquet``. A put's window
[start, end) is cut at UTC midnights into day windows; each (table, cluster, day window) is one
object whose name is a digest of exactly that, so the same window written again is the same
object (an overwrite, never a second copy), and whole-day windows name the same objects however
many days one put covers. Time tables hold the rows whose ``ts`` falls in the day window; snapshot
tables hold the state that day (the pods that ran in it; devices, topology, nodes, prices, teams
as they were). Every row carries its object's window and put time (``WINDOW_COLUMNS``): where a
row is in several objects (``dedupe_key``), a reader keeps it from the object whose window ends
last, and of those from the newest put.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from gpuwatch import units
from gpuwatch.model import BUNDLE_COLUMNS

# bundle tables partitioned by the date of their ``ts``; the others are daily snapshots
TIME_TABLES: tuple[str, ...] = ("samples", "pod_status", "health", "processes", "scheduler_pending")
SNAPSHOT_TABLES: tuple[str, ...] = tuple(t for t in BUNDLE_COLUMNS if t not in TIME_TABLES)
# every row carries its object's window and when it was put (the newest put wins a tie of windows)
WINDOW_COLUMNS: tuple[str, ...] = ("lake_window_start", "lake_window_end", "lake_put_at")
PARTITION_COLUMNS: tuple[str, str] = ("cluster", "date")
# a sample's identity across objects: one device at one time (several rows when pods share it)
SAMPLE_KEY: tuple[str, ...] = ("ts", "node", "gpu_uuid", "mig_gi_id")
LAYOUT_VERSION = "1"  # part of every digest: a new layout never overwrites an old one's objects
DAY = timedelta(days=1)
_PART = re.compile(r"part-[0-9a-f]{16}\.parquet")


@dataclass(frozen=True)
class DayWindow:
    """The part of a window inside one UTC day: rows with ``start <= ts < end`` (``ts == start``
    when the window is a point, as a single scrape's is)."""

    day: date
    start: datetime
    end: datetime


def check_cluster(name: str, *, what: str = "--cluster") -> str:
    """A cluster name (units.parse_cluster)."""
    return units.parse_cluster(name, what=what)


def day_windows(start: datetime, end: datetime) -> list[DayWindow]:
    """[start, end) cut at UTC midnights; a point window (start == end) is its own day window."""
    if end < start:
        raise units.UsageError(f"--end: {end:%Y-%m-%dT%H:%M:%SZ} is before --start {start:%Y-%m-%dT%H:%M:%SZ}")
    if end == start:
        return [DayWindow(start.date(), start, end)]
    out, lo = [], start
    while lo < end:
        midnight = datetime.combine(lo.date(), time()) + DAY
        out.append(DayWindow(lo.date(), lo, min(end, midnight)))
        lo = midnight
    return out


def days(start: datetime, end: datetime) -> list[date]:
    """The UTC days a window [start, end) touches."""
    return [w.day for w in day_windows(start, end)]


def table_dir(base: str, table: str) -> str:
    return f"{base}/{table}"


def partition_dir(base: str, table: str, cluster: str, day: date) -> str:
    return f"{base}/{table}/cluster={cluster}/date={day.isoformat()}"


def part_name(table: str, cluster: str, window: DayWindow) -> str:
    """``part-<16 hex>.parquet``: a digest of (layout version, table, cluster, day window)."""
    text = "|".join((LAYOUT_VERSION, table, cluster, window.day.isoformat(), window.start.isoformat(),
                     window.end.isoformat()))
    return f"part-{hashlib.sha256(text.encode()).hexdigest()[:16]}.parquet"


def is_part(name: str) -> bool:
    """True for an object this layout wrote (temporary files and strangers are never read)."""
    return bool(_PART.fullmatch(name))


def cluster_of(dirname: str) -> str | None:
    """``cluster=prod-eu`` -> ``prod-eu``; None for anything else."""
    key, _, value = dirname.partition("=")
    return value if key == "cluster" and units.CLUSTER_NAME.fullmatch(value) else None


def dedupe_key(table: str) -> tuple[str, ...]:
    """The columns that identify a row across objects: the store's upsert key, or SAMPLE_KEY."""
    from gpuwatch.store.load import KEYS

    return SAMPLE_KEY if table == "samples" else KEYS[table]
