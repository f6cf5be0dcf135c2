"""SIGKILL a writer of a gpuwatch store at a chosen moment, and digest the store's state.

``run`` starts a command that writes a DuckDB file, watches the file and its ``.wal`` every
millisecond, and kills the command after a delay or at the first sign of a chosen write (tests/
test_durability.py). ``fingerprint`` opens a store the way every reader does (store.connect,
read-only) and digests every table and the catalog: two stores with equal fingerprints hold the
same rows. Columns that record *when* a write happened (not what it wrote) are left out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuwatch import store
from gpuwatch.analyses import persisted

POLL_S = 0.001
CONNECTED_S = 0.1  # store.connect's writes come in a burst; a WAL this long unchanged has them all

# When a row was written, not what it holds: two runs over the same data differ only here.
WHEN_WRITTEN = {"ingest_log": ("loaded_at",), "analysis_results": ("saved_at",)}
# A persisted result's data version is "<loads>@<last loaded_at>": keep the count and whether readers
# take it as current (persisted.version, bound as $current).
RESULT_VERSION = ("split_part(data_version, '@', 1) || CASE WHEN data_version = $current "
                  "THEN ' current' ELSE ' stale' END")


@dataclass
class Watch:
    """What a run was seen doing to its store, in seconds from its start."""

    db: Path
    # store.connect writes (tables, views, macros) only to a store another gpuwatch made; on one made
    # by this gpuwatch the first WAL write is the run's commit, and "opened" is the writer holding the file
    connect_writes: bool = False
    events: dict[str, float] = field(default_factory=dict)
    last_write: float | None = None  # the last time the WAL changed
    now: float = 0.0
    _wal: int | None = None
    _db_was: tuple[int, int] | None = None

    @property
    def wal(self) -> Path:
        return self.db.with_name(self.db.name + ".wal")

    def look(self, t: float, pids: tuple[int, ...] = ()) -> None:
        """Note the first time each write event shows on disk (``pids``: the writer's processes)."""
        self.now, wal = t, _size(self.wal)
        stat = self.db.stat() if self.db.exists() else None
        now = (stat.st_size, stat.st_mtime_ns) if stat else (0, 0)
        self._db_was = self._db_was or now
        if wal is not None and wal != self._wal:
            if "opened" in self.events or not self.connect_writes:
                self.events.setdefault("commit", t)  # the run's own first commit (a load, the results)
            if self.connect_writes:
                self.events.setdefault("wal", t)  # store.connect writing its tables, views and macros
            self.last_write = t
        elif self.connect_writes and wal is not None and t - self.last_write >= CONNECTED_S:
            self.events.setdefault("opened", t)  # connect's burst of writes is over
        elif not self.connect_writes and "opened" not in self.events and _holds(pids, self.db):
            self.events.setdefault("opened", t)  # connected, nothing written yet
        if now != self._db_was and "opened" in self.events:
            self.events.setdefault("commit", t)  # a large commit writes its blocks straight to the file
            self.events.setdefault("checkpoint", t)  # committed data reaching the database file
        if wal is None and "wal" in self.events:
            self.events.setdefault("checkpointed", t)  # the WAL folded into the file and removed
        self._wal = wal

    def phase(self) -> str:
        """The last event seen, as the phase the run was in."""
        names = {"checkpointed": "checkpointed", "checkpoint": "checkpointing", "commit": "committing",
                 "opened": "in flight (connected, uncommitted)", "wal": "connecting"}
        return next((names[e] for e in names if e in self.events), "startup")


@dataclass
class Run:
    """One run: its exit code (-9 when killed), when it ended or was killed, and what it was doing."""

    returncode: int
    seconds: float
    watch: Watch
    killed: bool
    output: str

    @property
    def phase(self) -> str:
        return "exited" if not self.killed else self.watch.phase()


def run(argv: list[str], *, db: Path, after_s: float | None = None,
        when: Callable[[Watch], bool] | None = None, timeout_s: float = 120, connect_writes: bool = False) -> Run:
    """Run ``argv`` to the end, or SIGKILL it ``after_s`` seconds in or as soon as ``when(watch)`` holds.
    Its output goes to ``<db>.out``; past ``timeout_s`` it is killed and the test fails."""
    log = db.with_name(db.name + ".out")
    with log.open("w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        watch, start, killed = Watch(db, connect_writes=connect_writes), time.monotonic(), False
        while process.poll() is None:
            t = time.monotonic() - start
            watch.look(t, (process.pid,))
            if (after_s is not None and t >= after_s) or (when is not None and when(watch)) or t > timeout_s:
                process.send_signal(signal.SIGKILL)
                killed = True
                break
            time.sleep(POLL_S)
        code = process.wait()
    assert time.monotonic() - start <= timeout_s, f"{' '.join(argv)}: still running after {timeout_s}s"
    return Run(code, time.monotonic() - start, watch, killed and code == -signal.SIGKILL, log.read_text())


def fingerprint(path: Path) -> dict[str, str]:
    """``{table: "<rows> rows <digest>"}`` for every table, plus the catalog, read through a read-only
    store.connect; ``{"unreadable": why}`` when the store no longer opens for its readers."""
    try:
        con = store.connect(str(path), read_only=True)
    except Exception as exc:  # a reader's view of a broken store: part of the answer, not a test error
        return {"unreadable": f"{type(exc).__name__}: {exc}"}
    try:
        return state(con)
    finally:
        con.close()


def state(con) -> dict[str, str]:
    """The fingerprint of what an open connection sees."""
    tables = [name for (name,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
    current = {"current": persisted.version(con)} if "ingest_log" in tables else {}
    digest = {name: _digest(con, _rows(name), current if name == "analysis_results" else {}) for name in tables}
    digest["catalog"] = _digest(con, _CATALOG)
    return digest


_CATALOG = ("SELECT 'column' AS kind, table_name AS name, column_name || ' ' || data_type AS body FROM duckdb_columns() "
            # a relation's view is named at random (unnamed_relation_<hex>) each time it is made
            "UNION ALL SELECT 'view', view_name, regexp_replace(sql, 'unnamed_relation_[0-9a-f]+', 'unnamed_relation') "
            "FROM duckdb_views() WHERE NOT internal "
            "UNION ALL SELECT 'macro', function_name, coalesce(macro_definition, '') FROM duckdb_functions() "
            "WHERE function_type IN ('macro', 'table_macro') AND NOT internal")


def _rows(table: str) -> str:
    """The table's rows without the columns that say when they were written (names come from the catalog)."""
    drop = WHEN_WRITTEN.get(table, ())
    exclude = f" EXCLUDE ({', '.join(drop)})" if drop else ""
    replace = f" REPLACE ({RESULT_VERSION} AS data_version)" if table == "analysis_results" else ""
    return f'SELECT *{exclude}{replace} FROM "{table}"'


def _digest(con, select: str, params: dict | None = None) -> str:
    """Row count and an order-free sum of row hashes (a multiset digest: duplicates count)."""
    query = f"SELECT count(*), coalesce(sum(hash(r)), 0)::VARCHAR FROM ({select}) r"
    rows, total = con.execute(query, params or {}).fetchone()
    return f"{rows} rows {total}"


def same_as(found: dict[str, str], expected: dict[str, dict[str, str]]) -> str | None:
    """The name of the expected state ``found`` equals, else None."""
    return next((name for name, value in expected.items() if value == found), None)


def differences(found: dict[str, str], other: dict[str, str]) -> list[str]:
    """Tables whose digest differs (for a readable failure)."""
    return sorted(k for k in found.keys() | other.keys() if found.get(k) != other.get(k))


def children() -> dict[int, str]:
    """This process' child processes and their command lines (Linux /proc)."""
    found: dict[int, str] = {}
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            with contextlib.suppress(FileNotFoundError):  # it ended meanwhile
                found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def _holds(pids: tuple[int, ...], path: Path) -> bool:
    """True when one of ``pids`` has ``path`` open (Linux /proc)."""
    target = str(path.resolve())
    for pid in pids:
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{pid}/fd")):
                return True
    return False


def _size(path: Path) -> int | None:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return None
