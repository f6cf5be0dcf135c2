"""`gpuwatch ingest --since-last` / `--follow` against a REAL Prometheus (tests/support/prometheus.py).

The TSDB is backfilled (promtool) with 6 h of 1-minute data of a small simulated fleet (8 GPUs on one
node, seed 5, 10 pods, three starting and two ending in the window): gpuwatch's exporter families as
tests/test_ingest_prometheus.py writes them, kube-state-metrics' pod and pod-state series for all
pods but one (that one is known from the exporter's attribution only: no uid, its start is presence),
and an XID gauge on one GPU (43 from 1 h in, 0 from 4 h, 79 from 4 h 10 min), which a read beginning
inside the 43 must not count again. Checked:
- a first ingest plus since-last cycles of uneven lengths (one shorter than the tail) give exactly
  the raw tables one read of the whole window gives (samples, devices, pods, pod_status, health,
  processes, topology, nodes), and sending the tail again changes nothing (row counts and sums);
- late data is repaired: a store read from a Prometheus that lacked one GPU's and one pod's last 15
  minutes (a late scrape) and then brought up to date from the full one equals the whole read (the
  node's last complete step is the lagging GPU's, the pod's stale "gone" row and end are replaced);
- the store's last complete step per node (store/progress.py): a node silent past the catch-up
  horizon is left out, a device gone from its node does not count, clusters are apart;
- the CLI path (gpuwatch.cli.main), its flag errors (one line, exit 2, store untouched), and
  --follow: cycles until a signal, a failed cycle reported in one line and the loop going on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.cli import main
from gpuwatch.fleet import build_fleet
from gpuwatch.ingest import command, openmetrics, since
from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store.progress import progress
from tests.support.prometheus import backfill, running
from tests.test_ingest_prometheus import _exporter_families

pytestmark = pytest.mark.slow
STEP = 60.0
HOUR = 3600.0
NO_KSM = "research-train-8"  # a pod kube-state-metrics does not report: presence only
LATE_POD = "platform-serve-4-4b227"  # on GPU 3  # its kube-state-metrics series arrive late in the "early" Prometheus
LINGER = 300.0  # kube-state-metrics reports a finished pod until its object is deleted, 5 min later here
TABLES = ("samples", "devices", "pods", "pod_status", "health", "processes", "topology", "nodes", "scheduler_pending")


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=8, seed=5, days=1)


@pytest.fixture(scope="module")
def window(fleet):
    start = fleet.start + 12 * HOUR
    return start, start + 6 * HOUR


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None)


def _iso(t: float) -> str:
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write(path, fleet, window, *, cut: float | None = None, late=None):
    """The fleet's series as OpenMetrics; ``cut``: only before it (what Prometheus had then), ``late``:
    a (gpu_uuid, pod, since) whose GPU samples and pod KSM series from ``since`` have not arrived."""
    from prometheus_client.metrics_core import Metric

    from gpuwatch.exporter.exposition import render

    grid = np.arange(window[0] - 600, window[1] + 600, STEP)
    grid = grid[grid < cut] if cut is not None else grid
    lost_gpu, lost_pod, since_t = late or (None, None, np.inf)
    exporter = []
    for family in _exporter_families(fleet, grid):
        kept = Metric(family.name, family.documentation, family.type)
        kept.samples = [s for s in family.samples if s.labels.get("UUID") != lost_gpu or s.timestamp < since_t]
        exporter.append(kept)
    pods = pd.DataFrame([p.bundle_row() for p in fleet.pods])
    status = pd.DataFrame(list(fleet.pod_status), columns=list(BUNDLE_COLUMNS["pod_status"]))
    ksm = _merge(openmetrics.ksm_families(pods[pods["pod"] != NO_KSM], grid, linger=LINGER),
                 openmetrics.ksm_status_families(status[status["pod"] != NO_KSM], grid))
    until = {p.pod: p.end_ts + LINGER for p in fleet.pods if p.end_ts is not None}  # KSM drops the deleted object
    if lost_pod:
        until[lost_pod] = min(until.get(lost_pod, np.inf), since_t)
    ksm = {name: [_until(labels, t, v, until.get(labels.get("pod"), np.inf)) for labels, t, v in series]
           for name, series in ksm.items()}
    ksm = _merge(ksm, _xid(fleet, grid, window))
    path.with_suffix(".exporter.om").write_bytes(render(exporter, openmetrics=True))
    openmetrics.write(path.with_suffix(".ksm.om"), ksm)
    return [path.with_suffix(".exporter.om"), path.with_suffix(".ksm.om")]


def _until(labels: dict, t: np.ndarray, v: np.ndarray, end: float) -> tuple:
    keep = t < end
    return labels, t[keep], v[keep]


def _merge(a: dict, b: dict) -> dict:
    return {name: a.get(name, []) + b.get(name, []) for name in a.keys() | b.keys()}


def _xid(fleet, grid, window) -> dict:
    """One GPU's XID gauge: 43 from 1 h into the window, 79 from 4 h 10 min (0 between: the exporter's own)."""
    gpu = fleet.devices[0]
    labels = {"UUID": gpu.gpu_uuid, "gpu": "0", "hostname": gpu.node, "modelName": gpu.gpu_model}
    out = {}
    for code, lo, hi in ((43, window[0] + HOUR, window[0] + 4 * HOUR), (79, window[0] + 4 * HOUR + 600, np.inf)):
        t = grid[(grid >= lo) & (grid < hi)]
        out.setdefault("DCGM_FI_DEV_XID_ERRORS", []).append((labels | {"err_code": str(code)}, t, np.full(len(t), code)))
    return out


@pytest.fixture(scope="module")
def prom(fleet, window, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("full")
    for path in _write(tmp / "fleet", fleet, window):
        backfill(path, tmp / "tsdb")
    with running(tmp, tsdb=tmp / "tsdb") as server:
        yield server


@pytest.fixture(scope="module")
def whole(prom, window, tmp_path_factory):
    """The whole window in one read: what every other way of reading it must equal."""
    con = store.connect(None)
    command.ingest(con, prom.url, start=_utc(window[0]), end=_utc(window[1]), step=STEP)
    tables = _tables(con)
    con.close()
    return tables


def _tables(con) -> dict[str, pd.DataFrame]:
    """Every raw table a Prometheus read writes, rows sorted, as plain objects (NULL = None)."""
    out = {}
    for name in TABLES:
        frame = con.execute(f"SELECT * FROM {name}").df().astype(object)
        frame = frame.where(frame.notna(), None)
        out[name] = frame.sort_values(list(frame.columns), key=lambda c: c.astype(str)).reset_index(drop=True)
    return out


def _assert_same(got: dict, want: dict) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(got[name], want[name], check_dtype=False, obj=name)


def _since(con, url, end: float, **options):
    return since.ingest(con, url, end=_utc(end), step=STEP, **options)


def test_first_ingest_and_since_last_cycles_equal_one_whole_read(prom, window, whole):
    start, end = window
    con = store.connect(None)
    command.ingest(con, prom.url, start=_utc(start), end=_utc(start + 2 * HOUR), step=STEP)
    reads = []
    for cycle_end in (start + 2 * HOUR + 37 * 60 + 30, start + 2 * HOUR + 42 * 60, start + 4 * HOUR + 50 * 60, end):
        counts, read = _since(con, prom.url, cycle_end)
        reads.append(read)
        assert counts["samples"] > 0
    got = _tables(con)
    _assert_same(got, whole)
    # each read began one tail (10 min) and 3 context steps before the store's last complete step
    assert all(r.start == r.progress.complete - timedelta(minutes=10, seconds=3 * STEP) for r in reads)
    assert got["health"]["code"].tolist() == [43, 79]  # each XID once, though reads began inside the 43
    assert got["pods"]["pod_uid"].isna().sum() == 1  # the pod known from attribution alone
    assert len(got["pod_status"]) and len(got["pods"]) >= 9

    counts, again = _since(con, prom.url, end)  # the same end again: only the tail is re-sent
    assert counts["samples"] == 8 * (3 + 10 + 1) and again.end == reads[-1].end  # context, tail, last step
    _assert_same(_tables(con), got)
    con.close()


def test_late_data_is_repaired_from_the_tail(fleet, window, prom, whole, tmp_path):
    start, end = window
    cut = start + 2 * HOUR
    late = (fleet.devices[3].gpu_uuid, LATE_POD, cut - 900)
    for path in _write(tmp_path / "early", fleet, window, cut=cut, late=late):
        backfill(path, tmp_path / "tsdb")
    con = store.connect(None)
    with running(tmp_path, tsdb=tmp_path / "tsdb") as early:
        command.ingest(con, early.url, start=_utc(start), end=_utc(cut), step=STEP)
    stale = con.execute("SELECT count(*) FROM pod_status WHERE pod = $p AND phase IS NULL", {"p": LATE_POD}).fetchall()
    assert stale[0][0] == 1  # read before its scrapes arrived, the pod looked deleted
    found = progress(con)
    assert found.complete == _utc(cut - 900 - STEP)  # the lagging GPU's last sample holds the node back
    _, read = _since(con, prom.url, end)
    assert read.resume == _utc(cut - 900 - STEP - 600)
    got = _tables(con)
    assert not len(got["pod_status"].query("pod == @LATE_POD and phase.isna()"))  # the stale "gone" row went
    _assert_same(got, whole)
    con.close()


def _device_samples(node: str, uuid: str, first: datetime, last: datetime, gi: int | None = None) -> pd.DataFrame:
    ts = pd.date_range(first, last, freq="60s")
    return pd.DataFrame({"ts": ts, "node": node, "gpu_uuid": uuid, "mig_gi_id": pd.array([gi] * len(ts), dtype="Int64"),
                         "gpu_util": 0.5})


def test_last_complete_step_per_node():
    """Node a: three GPUs to T, one to T - 20 min (still the node's: it pins the node there), a MIG
    instance deleted at T - 5 h (gone from the node: it does not); node b silent since T - 3 h (past the
    catch-up horizon: left out); cluster x's node apart."""
    t = datetime(2026, 11, 20, 12, 0)
    devices = [("a", f"GPU-a{i}", t) for i in range(3)] + [("a", "GPU-a3", t - timedelta(minutes=20)),
                                                           ("b", "GPU-b0", t - timedelta(hours=3)),
                                                           ("x/c", "GPU-c0", t - timedelta(hours=10))]
    parts = [_device_samples(n, u, t - timedelta(hours=12), last) for n, u, last in devices]
    parts.append(_device_samples("a", "GPU-a4", t - timedelta(hours=12), t - timedelta(hours=5), gi=1))
    con = store.connect(None)
    assert progress(con).complete is None and since.plan(con, end=t, step=STEP).resume is None  # empty: first ingest
    store.load(con, {"samples": pd.concat(parts, ignore_index=True)}, source="test")
    found = progress(con)
    assert (found.complete, found.bulk_end, found.nodes) == (t - timedelta(minutes=20), t, 1)
    assert found.left_out == (("b", t - timedelta(hours=3)),)
    assert progress(con, catch_up=timedelta(minutes=10)).complete == t  # GPU-a3 too is gone from the node now
    assert progress(con, catch_up=timedelta(hours=4)).complete == t - timedelta(hours=3)  # b is caught up
    assert progress(con, cluster="x").complete == t - timedelta(hours=10)
    read = since.plan(con, end=t + timedelta(minutes=5), step=STEP, tail=90)  # a tail of whole steps: 2
    assert (read.resume, read.start) == (t - timedelta(minutes=22), t - timedelta(minutes=25))
    con.close()


def test_the_cli_resumes_from_the_store(prom, window, whole, tmp_path, capsys):
    start, end = window
    db = str(tmp_path / "cli.duckdb")
    assert main(["ingest", "--from", prom.url, "--db", db, "--start", _iso(start), "--end", _iso(start + 2 * HOUR)]) == 0
    capsys.readouterr()
    assert main(["ingest", "--from", prom.url.replace("http://", "prometheus://"), "--db", db, "--since-last",
                 "--tail", "5m", "--end", _iso(end)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and f"resumed at {_iso(start + 2 * HOUR - 60 - 300)}" in out[0], out
    con = store.connect(db, read_only=True)
    _assert_same(_tables(con), whole)
    con.close()


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    db = tmp_path_factory.mktemp("kept") / "kept.duckdb"
    store.connect(str(db)).close()
    return db, db.read_bytes()


URL = "prometheus://127.0.0.1:9"  # never asked: every case fails before anything is read


@pytest.mark.parametrize(("argv", "message"), [
    (["--from", "{dir}", "--since-last"], "--since-last: only with a Prometheus source"),
    (["--since-last"], "--since-last: only with a Prometheus source"),
    (["--from", URL, "--since-last", "--start", "2026-11-09T00:00:00Z"], "--since-last: not with --start"),
    (["--from", URL, "--follow", "--end", "2026-11-09T00:00:00Z"], "--follow: not with --end"),
    (["--from", URL, "--since-last", "--link"], "--since-last: not with --link"),
    (["--from", URL, "--tail", "5m"], "--tail: only with --since-last or --follow"),
    (["--from", URL, "--since-last", "--every", "1m"], "--every: only with --follow"),
    (["--from", URL, "--since-last", "--tail", "soon"], "--tail: 'soon' is not a duration"),
    (["--from", URL, "--since-last", "--catch-up", "0s"], "--catch-up: '0s' is not a duration"),
    (["--from", URL, "--follow", "--every", "0"], "--every: '0' is not a duration"),
])
def test_flag_errors_are_one_line_and_leave_the_store_alone(argv, message, kept, tmp_path, capsys):
    db, before = kept
    argv = [a.replace("{dir}", str(tmp_path)) for a in argv]
    for path in (db, tmp_path / "new.duckdb"):
        assert main(["ingest", *argv, "--db", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"gpuwatch ingest: {message}") and err.count("\n") == 1, err
    assert db.read_bytes() == before and not (tmp_path / "new.duckdb").exists()


def test_follow_cycles_until_a_signal_and_survives_a_failed_cycle(prom, window, tmp_path, capsys):
    start, _ = window
    db = str(tmp_path / "follow.duckdb")
    con = store.connect(db)
    command.ingest(con, prom.url, start=_utc(start), end=_utc(start + HOUR), step=STEP)
    con.close()
    ends = iter([start + 2 * HOUR, None, start + 3 * HOUR])
    slept = []

    def clock():
        at = next(ends)
        if at is None:
            raise OSError("clock unreadable")  # any failure inside a cycle
        return _utc(at)

    def sleep(stop, seconds):
        slept.append(seconds)
        if len(slept) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # the real signal, handled by follow's handler
            assert stop.wait(5)

    handler = signal.getsignal(signal.SIGTERM)
    assert since.run(db, prom.url, every=120.0, clock=clock, sleep=sleep, step=STEP, tail=600.0) == 0
    assert slept == [120.0] * 3 and signal.getsignal(signal.SIGTERM) is handler
    out, err = capsys.readouterr()
    assert [line.split(" [")[0] for line in out.splitlines()] == [f"loaded into {db}"] * 2
    assert err == "gpuwatch ingest: cycle failed, next in 120s: clock unreadable\n"
    con = store.connect(db, read_only=True)
    assert progress(con).complete == _utc(start + 3 * HOUR - STEP)
    con.close()


def test_follow_exits_0_on_sigterm(prom, tmp_path):
    """The real loop in a real process: cycles every 0.2 s (an empty read: the data is weeks old) until
    SIGTERM, then exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "ingest", "--from", prom.url.replace("http", "prometheus", 1),
                             "--db", str(tmp_path / "f.duckdb"), "--follow", "--every", "200ms"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [proc.stdout.readline() for _ in range(2)]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    # the data is weeks old: each cycle finds no GPU series in its window and says so, loading nothing
    assert all(line.startswith(f"{tmp_path / 'f.duckdb'}: ") and "no complete step yet: no GPU series in [" in line
               for line in lines), lines
