"""A gpuwatch cycle SIGKILLed at any point leaves its store as it was before the cycle or after it.

`gpuwatch ingest` (a second, longer bundle: a re-sent window plus new hours) and `gpuwatch analyze`
(which persists its results) run as subprocesses on copies of a small store and are SIGKILLed at
delays spread over a timed unkilled run, and at the first sign on disk of each write
(tests/support/kill.py watches the file and its WAL: store.connect's first write, a commit, the
checkpoint). The store must then open for its readers (store.connect, read-only) with the
fingerprint of the state before the run or of an unkilled run's, and the next unkilled run must
succeed and give the after-state. The chart's analyzer (helm/gpuwatch/scripts/analyzer.py) works on
a copy and renames it over the published file: with its child killed in ingest and in analyze, the
published file, a reader holding it open, fresh readers and the findings exporter keep the old
state; the next run publishes the new one, and readers polling meanwhile see one state or the other.
The app's connection (app/ui.py) must then read the new file: it closes the old version's connection
first (DuckDB shares one instance per path within a process while a connection is open).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from gpuwatch import store
from gpuwatch.analyses import persist
from gpuwatch.analyses.params import params, window
from gpuwatch.fleet import build_fleet
from gpuwatch.fleet.command import write_bundle
from tests.support import kill
from tests.support.helm_chart import CHART

pytest.importorskip("duckdb")
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="watches children through /proc")

GPUWATCH = [sys.executable, "-m", "gpuwatch"]
# 48 devices (failures and topology planted, so analyze persists every kind of result). The cycle is
# six hours, then nine (the six re-sent plus three new): a run's time is mostly fixed (start-up, staging,
# the analyses' passes), so a day's data made each of the ~30 runs below barely longer and proved
# nothing more; what the kills need is a run with a start-up, a load or analysis in flight, a commit
# and a checkpoint, which any size has.
FLEET = {"gpus": 16, "seed": 0, "failures": True, "topology": True}
FIRST_DAYS, SECOND_DAYS = 0.25, 0.375
ANALYZE_ARGS = ["--format", "table"]


@dataclass(frozen=True)
class Point:
    """Where to kill: ``share`` of a span of the unkilled run, or at the first sight of ``event`` (+ delay)."""

    name: str
    share: float | None = None
    event: str | None = None
    delay_s: float = 0.0

    def aim(self, span_s: float) -> dict:
        if self.share is not None:
            return {"after_s": self.share * span_s}
        return {"when": lambda w: self.event in w.events and w.now - w.events[self.event] >= self.delay_s}


# ingest: spread over the whole run; plus store.connect's first write, the load's commit, the checkpoint
INGEST_POINTS = [*(Point(f"{s:.0%} of the run", share=s) for s in (0.25, 0.5, 0.75)),
                 Point("connect", event="wal"), Point("commit", event="commit"),
                 Point("checkpoint", event="checkpoint")]
# analyze: computing its results, store.connect's first write, the results' commit, and past it
ANALYZE_POINTS = [Point("40% of the writes", share=0.4), Point("connect", event="wal"),
                  Point("commit", event="commit"), Point("commit + 0.1s", event="commit", delay_s=0.1)]


@dataclass
class Cycle:
    """The before-state s0 and the unkilled runs from it (their timings aim the kills)."""

    root: Path
    second: Path
    s0: Path
    s1: Path
    s2: Path
    ingest: kill.Run
    analyze: kill.Run

    @functools.cached_property
    def fp0(self) -> dict:
        return kill.fingerprint(self.s0)

    @functools.cached_property
    def fp1(self) -> dict:
        return kill.fingerprint(self.s1)

    @functools.cached_property
    def fp2(self) -> dict:
        return kill.fingerprint(self.s2)

    @functools.cached_property
    def fp11(self) -> dict:
        """An ingest run on the after-state (what recovery gives where the killed run had committed)."""
        twice = copy(self.s1, self.root / "s11.duckdb")
        assert run(ingest_argv(self.second, twice), db=twice).returncode == 0
        return kill.fingerprint(twice)


def ingest_argv(bundle: Path, db: Path) -> list[str]:
    return [*GPUWATCH, "ingest", "--from", str(bundle), "--db", str(db)]


def analyze_argv(db: Path) -> list[str]:
    return [*GPUWATCH, "analyze", "--db", str(db), *ANALYZE_ARGS]


def run(argv: list[str], *, db: Path, **aim) -> kill.Run:
    done = kill.run(argv, db=db, **aim)
    if not done.killed:
        assert done.returncode == 0, done.output
    return done


def copy(src: Path, dst: Path) -> Path:
    for stale in (dst, dst.with_name(dst.name + ".wal")):
        stale.unlink(missing_ok=True)
    shutil.copyfile(src, dst)
    return dst


@pytest.fixture(scope="module")
def cycle(tmp_path_factory) -> Cycle:
    root = tmp_path_factory.mktemp("durability")
    first, second = root / "6h", root / "6h-and-3h"
    write_bundle(build_fleet(**FLEET, days=FIRST_DAYS), first)
    write_bundle(build_fleet(**FLEET, days=SECOND_DAYS), second)
    s0 = root / "s0.duckdb"  # a store after an earlier cycle: its data, and its results persisted
    con = store.connect(str(s0))
    store.load_bundle(con, first)
    persist(con, params(*window(store.data_range(con)[1])))
    con.close()
    s1 = copy(s0, root / "s1.duckdb")
    ingest = run(ingest_argv(second, s1), db=s1)
    s2 = copy(s1, root / "s2.duckdb")
    analyze = run(analyze_argv(s2), db=s2)
    return Cycle(root, second, s0, s1, s2, ingest, analyze)


def check_state(found: dict, expected: dict[str, dict], killed: kill.Run) -> str:
    """The name of the expected state the killed run left; fails naming the tables that differ."""
    name = kill.same_as(found, expected)
    assert name is not None, (
        f"killed {killed.seconds:.2f}s in ({killed.phase}): neither state; "
        + "; ".join(f"differs from {n} in {kill.differences(found, fp)}" for n, fp in expected.items()))
    return name


def older(src: Path, dst: Path) -> Path:
    """A copy of ``src`` as another gpuwatch left it (other reference tables): store.connect makes its
    tables, views, macros and reference tables again, in a transaction, before the run's own work."""
    copy(src, dst)
    con = duckdb.connect(str(dst))
    con.execute("DELETE FROM store_meta WHERE key = 'reference'")
    con.close()
    return dst


def start(point: Point, src: Path, db: Path, made_here: dict) -> tuple[Path, dict]:
    """The store a killed run starts from (another gpuwatch's for the connect point: only then does
    connect write) and the states it may leave before the run's own commit: as it was, or as
    store.connect made it (``made_here``: the same data as this gpuwatch makes it)."""
    db = (older if point.event == "wal" else copy)(src, db)
    return db, {"before": kill.fingerprint(db), "before, connected": made_here}


@pytest.mark.parametrize("point", INGEST_POINTS, ids=lambda p: p.name)
def test_a_killed_ingest_leaves_the_store_before_or_after(cycle, tmp_path, point):
    db, before = start(point, cycle.s0, tmp_path / "store.duckdb", cycle.fp0)
    killed = run(ingest_argv(cycle.second, db), db=db, connect_writes=point.event == "wal",
                 **point.aim(cycle.ingest.seconds))
    assert killed.killed or point.event is None, f"{point.event!r} never showed on disk: the kill was not aimed"
    left = check_state(kill.fingerprint(db), {**before, "after": cycle.fp1}, killed)
    print(f"ingest killed at {point.name}: {killed.seconds:.2f}s, {killed.phase} -> {left}")

    again = run(ingest_argv(cycle.second, db), db=db)
    assert again.returncode == 0
    assert kill.fingerprint(db) == (cycle.fp1 if left.startswith("before") else cycle.fp11)


@pytest.mark.parametrize("point", ANALYZE_POINTS, ids=lambda p: p.name)
def test_a_killed_analyze_leaves_the_store_before_or_after(cycle, tmp_path, point):
    db, before = start(point, cycle.s1, tmp_path / "store.duckdb", cycle.fp1)
    killed = run(analyze_argv(db), db=db, connect_writes=point.event == "wal",
                 **point.aim(cycle.analyze.watch.last_write))
    assert killed.killed or point.event is None, f"{point.event!r} never showed on disk: the kill was not aimed"
    left = check_state(kill.fingerprint(db), {**before, "after": cycle.fp2}, killed)
    print(f"analyze killed at {point.name}: {killed.seconds:.2f}s, {killed.phase} -> {left}")

    again = run(analyze_argv(db), db=db)
    assert again.returncode == 0
    assert kill.fingerprint(db) == cycle.fp2  # analyze is idempotent: the same results, current


def load_analyzer():
    spec = importlib.util.spec_from_file_location("chart_analyzer", CHART / "scripts" / "analyzer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exporter_values(db: Path) -> dict:
    """The findings exporter's series for the store at ``db`` (less the time it computed them)."""
    from gpuwatch.findings.exporter import DerivedCollector

    values = DerivedCollector(lambda: store.connect(str(db), read_only=True), window="7d", ttl=0).values()
    return {name: series for name, series in values.items() if name != "gpuwatch_derived_refresh_timestamp_seconds"}


class Analyzer:
    """The chart's analyzer, run_once in a thread (its children are this process' children)."""

    def __init__(self, cycle: Cycle, db: Path):
        self.script, self.cycle, self.db, self.code = load_analyzer(), cycle, db, None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.script.run_once(str(self.db), ["--from", str(self.cycle.second)], ANALYZE_ARGS,
                                         gpuwatch=GPUWATCH, overlap_s=0)

    def kill_child(self, step: str, event: str, *, reader: Path | None = None, timeout_s: float = 60) -> tuple[str, dict]:
        """SIGKILL the `gpuwatch <step>` child at the first sight of ``event`` on the work copy. Returns the
        phase it was in, and what a reader opening ``reader`` saw once the child had started."""
        work, start = self.db.with_name(self.db.name + ".next"), time.monotonic()
        watch, midway = None, {}
        while time.monotonic() - start < timeout_s and self.thread.is_alive():
            pids = [pid for pid, argv in kill.children().items() if f"gpuwatch {step} " in argv]
            if pids:
                watch = watch or kill.Watch(work)
                watch.look(time.monotonic() - start, tuple(pids))
                if event in watch.events:
                    os.kill(pids[0], signal.SIGKILL)
                    return watch.phase(), midway
                if reader is not None and not midway:
                    midway = kill.fingerprint(reader)
            time.sleep(kill.POLL_S)
        pytest.fail(f"no `gpuwatch {step}` child reached {event!r}")

    def wait(self, *, readers: Path | None = None) -> tuple[int, list[dict]]:
        """Its exit code, and what readers opening ``readers`` saw meanwhile."""
        seen = []
        while self.thread.is_alive():
            if readers is not None:
                seen.append(kill.fingerprint(readers))
            time.sleep(0.5)
        self.thread.join()
        return self.code, seen


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_analyzer_publishes_whole_states_only(cycle, tmp_path):
    db = copy(cycle.s0, tmp_path / "gpuwatch.duckdb")
    published, exported = sha256(db), exporter_values(db)
    analyzer = Analyzer(cycle, db)  # killed in ingest: a reader opening the published file meanwhile
    phase, midway = analyzer.kill_child("ingest", "opened", reader=db)
    print(f"analyzer: `gpuwatch ingest` child killed {phase}")
    assert analyzer.wait()[0] == -signal.SIGKILL
    assert midway == cycle.fp0

    holder = store.connect(str(db), read_only=True)  # as the app holds the published version open
    analyzer = Analyzer(cycle, db)  # killed in analyze, its results half written into the copy
    phase, _ = analyzer.kill_child("analyze", "commit")
    print(f"analyzer: `gpuwatch analyze` child killed {phase}")
    assert analyzer.wait()[0] == -signal.SIGKILL
    assert kill.state(holder) == cycle.fp0
    holder.close()  # DuckDB hands a process one instance per path while any connection to it is open
    assert db.with_name(db.name + ".next").exists()  # the killed run's copy, stale
    assert sha256(db) == published and kill.fingerprint(db) == cycle.fp0 and exporter_values(db) == exported

    code, seen = Analyzer(cycle, db).wait(readers=db)  # readers polling while the next run publishes
    assert code == 0
    assert seen and all(kill.same_as(fp, {"old": cycle.fp0, "new": cycle.fp2}) for fp in seen)
    published = kill.fingerprint(db)
    assert published == cycle.fp2, kill.differences(published, cycle.fp2)
    assert not db.with_name(db.name + ".next").exists()


def test_the_app_reads_a_newly_published_version(cycle, tmp_path):
    pytest.importorskip("streamlit")
    from app import ui

    db = copy(cycle.s0, tmp_path / "gpuwatch.duckdb")
    try:
        assert kill.state(ui._connection(str(db), os.path.getmtime(db))) == cycle.fp0
        time.sleep(0.01)  # a new mtime, as a publish a while later gives
        os.replace(copy(cycle.s2, tmp_path / "next.duckdb"), db)
        assert kill.state(ui._connection(str(db), os.path.getmtime(db))) == cycle.fp2
    finally:
        _, versions = ui._open_versions()
        for _, con in versions.values():
            con.close()
        versions.clear()

