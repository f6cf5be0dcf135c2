"""No tracebacks from hostile inputs (issue 31, item 13): each is one line on stderr, exit 1 or 2,
and the store as it was — a bundle ``pod_status`` with ``gpu_request`` inf, a ``processes`` pid beyond
any integer column, ``lake put --days 1000000000``, a stray ``date=2026-13-45`` lake directory (not
this layout's: its objects are never read, the rest loads), ``export -f /dev/zero``, and the logging
error ``export-derived`` printed at every start."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.cli import main

ROOT = Path(__file__).resolve().parents[1]
D0 = datetime(2026, 11, 2)


def _store(path: Path) -> str:
    """A small store: one GPU, an hour of samples, one pod."""
    con = store.connect(str(path))
    ts = [D0 + timedelta(minutes=m) for m in range(60)]
    store.load(con, {"devices": pd.DataFrame({"node": ["n1"], "gpu_uuid": ["GPU-a"], "gpu_model": ["NVIDIA H100"]}),
                     "samples": pd.DataFrame({"ts": ts, "node": "n1", "gpu_uuid": "GPU-a", "gpu_util": 0.5}),
                     "pods": pd.DataFrame({"namespace": ["ns"], "pod": ["p"], "gpu_count": [1.0], "node": ["n1"],
                                           "start_ts": [D0], "device_ids": ["GPU-a"]})}, source="test")
    con.close()
    return str(path)


def _snapshot(db: str) -> dict:
    con = store.connect(db, read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*), hash(list(t ORDER BY ALL)) FROM {t} t").fetchall()[0]
                for t in ("devices", "samples", "pods", "pod_status", "processes", "ingest_log")}
    finally:
        con.close()


def _one_line(err: str, command: str) -> str:
    assert "Traceback" not in err, err
    [line] = err.splitlines()
    assert line.startswith(f"gpuwatch {command}: "), line
    return line


@pytest.mark.parametrize("table,csv,says", [
    ("pod_status", "ts,namespace,pod,gpu_request\n2026-11-02T00:10:00Z,ns,p,inf\n",
     "pod_status.csv: column 'gpu_request', row 1: 'inf' is not a plausible value (finite, at most 4096)"),
    ("processes", "ts,node,gpu_uuid,pid,fb_used_bytes\n2026-11-02T00:10:00Z,n1,GPU-a,99999999999999,5\n",
     "processes.csv: column 'pid', row 1: 99999999999999.0 is out of range for this column"),
])
def test_a_bundle_value_beyond_its_column_is_one_line_and_the_store_is_untouched(table, csv, says, tmp_path, capsys):
    db = _store(tmp_path / "s.duckdb")
    before = _snapshot(db)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / f"{table}.csv").write_text(csv)
    assert main(["ingest", "--from", str(tmp_path / "b"), "--db", db]) == 1
    assert says in _one_line(capsys.readouterr().err, "ingest")
    assert _snapshot(db) == before


def test_lake_put_days_beyond_the_calendar_is_a_usage_error(tmp_path, capsys):
    db = _store(tmp_path / "s.duckdb")
    assert main(["lake", "put", "--to", str(tmp_path / "lake"), "--cluster", "c1", "--db", db,
                 "--days", "1000000000"]) == 2
    assert "--days: 1000000000 is not a number of days from 1 to" in _one_line(capsys.readouterr().err, "lake")
    assert not (tmp_path / "lake").exists()


def test_a_stray_date_directory_in_the_lake_is_not_read(tmp_path, capsys):
    db = _store(tmp_path / "s.duckdb")
    lake = tmp_path / "lake"
    assert main(["lake", "put", "--to", str(lake), "--cluster", "c1", "--db", db]) == 0
    stray = lake / "samples" / "cluster=c1" / "date=2026-13-45"
    stray.mkdir(parents=True)
    (stray / "part-0123456789abcdef.parquet").write_bytes(b"not parquet")
    capsys.readouterr()
    out = str(tmp_path / "back.duckdb")
    assert main(["lake", "get", "--from", str(lake), "--db", out]) == 0
    con = store.connect(out, read_only=True)
    assert con.execute("SELECT count(*), sum(gpu_util) FROM samples").fetchall() == [(60, pytest.approx(30.0))]
    con.close()


def test_export_with_dev_zero_as_counters_file_is_one_line_and_exit_2():
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--dcgm-bindings", str(ROOT / "tests" / "fakes" / "dcgm"),
           "-f", "/dev/zero", "--listen", "127.0.0.1:0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "/dev/zero: not a counters file (NUL bytes" in _one_line(done.stderr, "export")


def test_export_derived_starts_without_a_logging_error(tmp_path):
    db = _store(tmp_path / "s.duckdb")
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "export-derived", "--db", db,
                             "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not any("serving derived metrics" in x or "Logging error" in x for x in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "Logging error" not in "".join(lines)
    assert re.search(rf"serving derived metrics from {re.escape(db)} on :\d+/metrics \(window 7d\)$", lines[-1].rstrip())


# --- item 15: names with control characters reach the terminal escaped --------------------------------

EVIL = "evil\x1b[2J\x1b]0;pwned\x07\u202eteam\r"


def test_names_with_terminal_controls_are_printed_escaped(tmp_path, capsys):
    from gpuwatch.store import bundle
    from tests import app_support as support

    frames = {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
              for name, file in bundle.find_files(support.sample_bundle()).items() if name != "truth"}
    pods = frames["pods"]
    pods["team"] = pods["team"].astype(object).where(pods["team"] != sorted(pods["team"].dropna())[0], EVIL)
    frames["devices"]["gpu_model"] = frames["devices"]["gpu_model"].astype(object).str.replace("NVIDIA", EVIL)
    db = str(tmp_path / "evil.duckdb")
    con = store.connect(db)
    store.load(con, frames, source="evil")
    con.close()
    assert main(["ingest", "--db", db, "--from", str(tmp_path / f"no{EVIL}such")]) == 1
    assert main(["ingest", "--db", db, "--prices", "list"]) == 0  # prints each model's price coverage
    assert main(["analyze", "--db", db, "--format", "table"]) == 0  # prints the teams' table
    out, err = capsys.readouterr()
    for text in (out, err):
        assert not any(c in text for c in "\x1b\x07\r\u202e"), repr(text[:300])
    assert out.count("evil\\x1b[2J\\x1b]0;pwned\\x07\\u202eteam\\x0d") >= 5  # 4 models, >= 1 team row
    assert "noevil\\x1b[2J\\x1b]0;pwned\\x07\\u202eteam such: no such file" in err


def test_a_process_pid_beyond_pid_max_on_a_page_is_no_process(tmp_path, capsys):
    page = tmp_path / "page.prom"
    page.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",modelName="NVIDIA H100"} 50 1793577600000\n'
                    'gpuwatch_process_memory_bytes{UUID="GPU-a",Hostname="n1",pid="99999999999999",owner="host"} 1000 '
                    '1793577600000\n'
                    'gpuwatch_process_memory_bytes{UUID="GPU-a",Hostname="n1",pid="4242",owner="host"} 2000 1793577600000\n')
    db = str(tmp_path / "p.duckdb")
    assert main(["ingest", "--from", str(page), "--db", db]) == 0
    assert "Traceback" not in capsys.readouterr().err
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT pid, fb_used_bytes FROM processes").fetchall() == [(4242, 2000.0)]
    con.close()


def test_a_page_with_a_gpu_instance_id_that_is_no_number_loads_the_rest(tmp_path, capsys, caplog):
    page = tmp_path / "page.prom"
    page.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",modelName="NVIDIA H100"} 50 1793577600000\n'
                    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n1",GPU_I_ID="x",GPU_I_PROFILE="1g.10gb",'
                    'modelName="NVIDIA H100"} 70 1793577600000\n')
    db = str(tmp_path / "g.duckdb")
    assert main(["ingest", "--from", str(page), "--db", db]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert any("1 GPU series with a GPU_I_ID that is no MIG instance id (e.g. 'x') were not loaded" in r.getMessage()
               for r in caplog.records)
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT gpu_uuid, gpu_util FROM samples").fetchall() == [("GPU-a", 0.5)]
    assert con.execute("SELECT gpu_uuid FROM devices").fetchall() == [("GPU-a",)]
    con.close()


@pytest.mark.parametrize("stamp", ["100000000000000000000", "1e20", "NaN"])
def test_a_page_timestamp_beyond_any_date_is_one_line(stamp, tmp_path, capsys):
    page = tmp_path / "page.prom"
    page.write_text(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a",Hostname="n1"}} 50 {stamp}\n')
    db = _store(tmp_path / "s.duckdb")
    before = _snapshot(db)
    assert main(["ingest", "--from", str(page), "--db", db]) == 1
    line = _one_line(capsys.readouterr().err, "ingest")
    assert f"{page}:1: timestamp " in line and "is outside 2000-01-01 .. 2100-01-01" in line
    assert _snapshot(db) == before
