"""The command line at its edges: what a failed or mistyped command leaves behind and says.

No empty store after a failed first ingest or a mistyped ``analyze --db``; a store another process
holds is reported with who holds it (a real second process holding DuckDB's lock, with the app's
command line); an unreachable Prometheus is one short line; a subcommand's bad flag prints that
subcommand's usage; a bad ``--window`` is named before the missing ``--out``; Ctrl-C on the real demo
and a reader that goes away (``| head -1``) are not tracebacks or failures; ``export --source auto``
with no GPU serves ``/healthz`` 503 with the reason, as ``--source nvml`` does, instead of exiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from gpuwatch import app_command, store
from gpuwatch.cli import main
from tests.conftest import ROOT
from tests.support.bundles import SAMPLE_DATA
from tests.support.prometheus import free_port


def _fails(capsys, argv: list[str], *, code: int, says: str) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0] and says in err[0], err[0]
    return err[0]


def test_a_failed_first_ingest_leaves_no_store(tmp_path, capsys):
    db = tmp_path / "new.duckdb"
    _fails(capsys, ["ingest", "--db", str(db), "--from", "prometheus://127.0.0.1:1", "--start", "2026-11-09T00:00:00Z",
                    "--end", "2026-11-09T00:05:00Z"], code=1, says="cannot reach Prometheus")
    assert not db.exists() and not (tmp_path / "new.duckdb.wal").exists()


def test_a_failed_ingest_into_a_store_with_data_keeps_it(tmp_path, capsys):
    db = tmp_path / "kept.duckdb"
    assert main(["ingest", "--db", str(db), "--from", str(SAMPLE_DATA)]) == 0
    capsys.readouterr()
    _fails(capsys, ["ingest", "--db", str(db), "--from", "prometheus://127.0.0.1:1", "--start", "2026-11-09T00:00:00Z",
                    "--end", "2026-11-09T00:05:00Z"], code=1, says="cannot reach Prometheus")
    con = store.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM ingest_log").fetchone()[0] == 1
    con.close()


def test_analyze_on_a_mistyped_db_names_it_and_creates_nothing(tmp_path, capsys):
    _fails(capsys, ["analyze", "--db", str(tmp_path / "typo.duckdb"), "--format", "table"], code=2,
           says="--db: " + str(tmp_path / "typo.duckdb") + ": no such store")
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_prometheus_is_one_short_line(tmp_path, capsys):
    line = _fails(capsys, ["ingest", "--db", str(tmp_path / "s.db"), "--from", "prometheus://127.0.0.1:1",
                           "--start", "2026-11-09T00:00:00Z", "--end", "2026-11-09T00:05:00Z"], code=1,
                  says="cannot reach Prometheus at http://127.0.0.1:1: Connection refused")
    assert len(line) < 200 and "%" not in line and "match[]" not in line, line


def test_a_store_held_by_the_app_names_who_holds_it(tmp_path, capsys):
    db = tmp_path / "held.duckdb"
    assert main(["ingest", "--db", str(db), "--from", str(SAMPLE_DATA)]) == 0
    capsys.readouterr()
    # a stand-in for the app at its boundary: a process with the app's very command line (app_command)
    # holding the store open read-only, as the app's cached connection does
    import argparse

    argv = app_command.command(argparse.Namespace(db=str(db), port=8501, address="127.0.0.1", team=[],
                                                  team_header=None, base_url_path=""))
    hold = "import duckdb, sys, time; c = duckdb.connect(sys.argv[-1], read_only=True); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold, *argv[1:]], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        line = _fails(capsys, ["ingest", "--db", str(db), "--from", str(SAMPLE_DATA)], code=1,
                      says="in use by another process")
    finally:
        holder.kill()
        holder.wait()
    assert f"PID {holder.pid}: gpuwatch app --db {db}" in line and "not a gpuwatch store" not in line, line
    assert db.exists()  # never removed: it was there before


def test_a_bad_subcommand_flag_prints_the_subcommands_usage(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", "--db", str(tmp_path / "x.duckdb"), "--format", "table", "--bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gpuwatch analyze ") and "gpuwatch analyze: error: unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        main(["--log-level", "DEBUG", "report", "weekly", "--db", "x", "--out", "y", "--bogus"])
    assert capsys.readouterr().err.startswith("usage: gpuwatch report weekly ")


def test_a_bad_window_is_named_before_the_missing_out(tmp_path, capsys):
    _fails(capsys, ["analyze", "--db", str(tmp_path / "x.duckdb"), "--window", "7days"], code=2,
           says="--window: '7days' is not a duration")


def test_a_reader_that_goes_away_is_not_a_failure(tmp_path):
    """``gpuwatch ingest ... | head -1``: the reader closes the pipe before the command prints."""
    db = tmp_path / "piped.duckdb"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a line
    try:
        done = subprocess.run([sys.executable, "-m", "gpuwatch", "ingest", "--from", str(SAMPLE_DATA), "--db", str(db)],
                              stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    con = store.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM ingest_log").fetchone()[0] == 1  # committed, and said so by exit 0
    con.close()


def test_ctrl_c_on_the_demo_is_one_line_and_stops_everything(tmp_path):
    """The real demo, interrupted as a terminal does (SIGINT to its whole process group) while Prometheus
    scrapes the live exporter: no traceback from it or its children, exit 130, no process left behind."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "demo", "--no-app", "--workdir", str(tmp_path / "demo"),
                             "--exporter-listen", f"127.0.0.1:{free_port()}", "--live-seconds", "60s"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("== live:"):
                break
        time.sleep(3)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(seen) + out
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "gpuwatch demo: interrupted" in text
    time.sleep(1)
    with pytest.raises(ProcessLookupError):  # the exporter and Prometheus went with it
        os.killpg(proc.pid, 0)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_export_source_auto_without_a_gpu_serves_healthz_503_with_the_reason(tmp_path):
    """No DCGM bindings and no NVML library here (the exact boundary of a node without a driver)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "export", "--source", "auto", "--listen",
                             f"127.0.0.1:{port}", "--interval", "0.2", "--dcgm-bindings", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        deadline, status = time.monotonic() + 30, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/healthz")
                if status == 503 and "no GPU source usable" in body:
                    break
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, proc.stdout.read()  # still serving: a DaemonSet does not crash-loop
        assert status == 503 and "dcgm: " in body and "nvml: " in body, body
        metrics = _get(f"http://127.0.0.1:{port}/metrics")[1]
        assert 'gpuwatch_source_up{source="auto"} 0' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
