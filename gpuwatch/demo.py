"""`gpuwatch demo`: the whole product on an embedded simulated fleet, one command.

simulate (or the shipped sample_data) -> exporter on :9400 with a simulated kubelet ->
ingest into DuckDB -> analyze -> reclaim dry-run -> weekly report -> Streamlit app.
Each stage runs as the real CLI command, so the demo exercises exactly what users run.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gpuwatch import units

SAMPLE_DATA = Path(__file__).resolve().parent.parent / "sample_data"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", default=".demo", help="where the demo writes its DB and outputs (default: %(default)s)")
    parser.add_argument("--gpus", type=int, default=0,
                        help="simulate a fresh fleet of this many GPUs instead of using sample_data (default: sample_data)")
    parser.add_argument("--exporter-listen", default="127.0.0.1:9400", help="exporter address (default: %(default)s)")
    parser.add_argument("--port", default="8501", help="Streamlit port (default: %(default)s)")
    parser.add_argument("--address", default="127.0.0.1", help="Streamlit address (default: %(default)s)")
    parser.add_argument("--no-app", action="store_true", help="run every stage, then stop instead of serving the app")


def run(args: argparse.Namespace) -> int:
    """Run every stage in turn; flags are checked before anything starts (UsageError names the flag)."""
    args.port = units.parse_port(args.port, what="--port")
    url = _exporter_url(args.exporter_listen)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    db = work / "gpuwatch.duckdb"
    for stale in (db, work / "gpuwatch.duckdb.wal"):
        stale.unlink(missing_ok=True)
    bundle = _bundle(args, work)
    exporter = _start_exporter(args.exporter_listen, url, work)
    try:
        _step("ingest", "ingest", "--from", str(bundle), "--db", str(db))
        _step("analyze", "analyze", "--db", str(db), "--out", str(work / "findings"), "--format", "table")
        _step("reclaim (dry-run)", "reclaim", "--once", "--db", str(db), "--assume-opted-in", "--no-cluster")
        _step("weekly report", "report", "weekly", "--db", str(db), "--out", str(work / "reports"))
        _banner(args, work)
        if args.no_app:
            return 0
        return _step("app", "app", "--db", str(db), "--port", str(args.port), "--address", args.address)
    finally:
        exporter.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            exporter.wait(timeout=10)


def _bundle(args: argparse.Namespace, work: Path) -> Path:
    if not args.gpus and any((SAMPLE_DATA / f"devices.{ext}").exists() for ext in ("csv", "parquet")):
        return SAMPLE_DATA  # the shipped bundle; a fresh simulation when --gpus is given or it's absent
    out = work / "bundle"
    shutil.rmtree(out, ignore_errors=True)
    _step("simulate", "simulate", "--gpus", str(args.gpus or 64), "--days", "7", "--seed", "0", "--out", str(out))
    return out


def _exporter_url(listen: str) -> str:
    """The URL the demo (and its banner) reaches the exporter at; all interfaces -> loopback."""
    host, port = units.parse_listen(listen, what="--exporter-listen")
    if port == 0:
        raise units.UsageError(f"--exporter-listen: {listen!r}: the demo needs a fixed port")
    host = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/metrics"


def _start_exporter(listen: str, url: str, work: Path) -> subprocess.Popen:
    log = (work / "exporter.log").open("w")
    cmd = [*_gpuwatch(), "export", "--source", "simulate", "--simulate-kubelet", "--listen", listen]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(60):
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
            series = sum(1 for line in reply.read().decode().splitlines() if line.startswith("DCGM_FI_"))
            print(f"== exporter: serving {series} DCGM series on {url} (log: {work / 'exporter.log'})", flush=True)
            return process
        if process.poll() is not None:
            raise SystemExit(f"exporter exited; see {work / 'exporter.log'}")
        time.sleep(0.5)
    raise SystemExit(f"exporter did not answer on {url}; see {work / 'exporter.log'}")


def _step(title: str, *argv: str) -> int:
    print(f"== {title}: gpuwatch {' '.join(argv)}", flush=True)
    code = subprocess.call([*_gpuwatch(), *argv])
    if code:
        raise SystemExit(f"demo stage {title!r} failed with exit code {code}")
    return code


def _gpuwatch() -> list[str]:
    return [sys.executable, "-m", "gpuwatch"]


def _banner(args: argparse.Namespace, work: Path) -> None:
    print(
        "\n== gpuwatch demo is up\n"
        f"   exporter : curl {_exporter_url(args.exporter_listen)}  (and /healthz)\n"
        f"   findings : {work / 'findings'}/*.csv\n"
        f"   report   : {work / 'reports'}/\n"
        f"   app      : http://{args.address}:{args.port}  (Ctrl-C stops everything)\n",
        flush=True,
    )
