"""`gpuwatch demo`: the whole product on a simulated fleet, one command, saying what each stage does.

Two legs, each made of the real CLI commands users run:

* live: the exporter serves a simulated fleet (simulated kubelet for pod attribution) on :9400; a
  real Prometheus (Debian's ``prometheus``, when installed) scrapes it every 2 s for ``--live-seconds``
  (else the demo saves the exporter's own /metrics pages), and ``gpuwatch ingest`` reads that into
  ``live.duckdb``, which ``gpuwatch analyze`` then analyses. A minute of live data is too short for
  the week-long findings, so
* history: a simulated week (the shipped sample_data, or ``--gpus N`` simulated now) is ingested into
  ``gpuwatch.duckdb``, analysed, dry-run reclaimed and reported, and the app serves it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
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
    parser.add_argument("--live-seconds", default="20s",
                        help="how long Prometheus scrapes the live exporter before the live ingest (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """Run every stage in turn; flags are checked before anything starts (UsageError names the flag)."""
    args.port = units.parse_port(args.port, what="--port")
    live_seconds = units.parse_duration(args.live_seconds, what="--live-seconds")
    url = _exporter_url(args.exporter_listen)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    db = work / "gpuwatch.duckdb"
    for stale in (db, work / "gpuwatch.duckdb.wal"):
        stale.unlink(missing_ok=True)
    bundle = _bundle(args, work)
    exporter = _start_exporter(args.exporter_listen, url, work)
    try:
        live = _live(url, work, seconds=live_seconds, prices=_prices(bundle))
        print(f"== history: a simulated week ({bundle}) -> {db}: the week-long findings, the report and the app",
              flush=True)
        _step("ingest", "ingest", "--from", str(bundle), "--db", str(db))
        _step("analyze", "analyze", "--db", str(db), "--out", str(work / "findings"), "--format", "table")
        _step("reclaim (dry-run)", "reclaim", "--once", "--db", str(db), "--assume-opted-in", "--no-cluster")
        _step("weekly report", "report", "weekly", "--db", str(db), "--out", str(work / "reports"))
        _banner(args, work, live)
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


def _prices(bundle: Path) -> Path:
    return next(bundle.glob("prices.*"))


def _live(url: str, work: Path, *, seconds: float, prices: Path) -> Path:
    """exporter -> Prometheus (or the exporter's own pages) -> ingest -> analyze, into live.duckdb."""
    db = work / "live.duckdb"
    for stale in (db, work / "live.duckdb.wal"):
        stale.unlink(missing_ok=True)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    prometheus = shutil.which("prometheus")
    if prometheus:
        port = _free_port()
        print(f"== live: Prometheus ({prometheus}) on 127.0.0.1:{port} scrapes {url} every 2 s for {seconds:g} s",
              flush=True)
        server = _start_prometheus(prometheus, url, port, work)
        try:
            _wait_for_scrapes(port, work, scrapes=2)
            started = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(seconds=10)
            time.sleep(seconds)
            end = dt.datetime.now(dt.UTC).replace(microsecond=0)
            _step("live ingest", "ingest", "--from", f"prometheus://127.0.0.1:{port}", "--start", _iso(started),
                  "--end", _iso(end), "--step", "2s", "--prices", str(prices), "--db", str(db))
        finally:
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=10)
    else:
        pages = _save_pages(url, work / "scrapes", seconds=seconds)
        print(f"== live: no `prometheus` installed: saved {len(pages)} of the exporter's own /metrics pages "
              f"({work / 'scrapes'}) and ingests those", flush=True)
        for i, page in enumerate(pages):
            argv = ["ingest", "--from", str(page), "--db", str(db)]
            _step(f"live ingest {i + 1}/{len(pages)}", *argv, *(["--prices", str(prices)] if i == 0 else []))
    _step("live analyze", "analyze", "--db", str(db), "--window", "1h", "--out", str(work / "live-findings"))
    _live_summary(db)
    return db


def _live_summary(db: Path) -> None:
    """One line on what the live leg stored (read-only)."""
    from gpuwatch import store

    con = store.connect(str(db), read_only=True)
    try:
        samples, devices, pods, first, last = con.execute(
            "SELECT count(*), count(DISTINCT node || gpu_uuid), count(DISTINCT namespace || '/' || pod), min(ts), max(ts) "
            "FROM samples").fetchone()
    finally:
        con.close()
    print(f"== live: {samples:,} samples of {devices} GPUs and {pods} pods, {first:%H:%M:%S} .. {last:%H:%M:%S} UTC, "
          f"went exporter -> {'Prometheus' if shutil.which('prometheus') else '/metrics pages'} -> ingest -> analyze",
          flush=True)


def _start_prometheus(binary: str, url: str, port: int, work: Path) -> subprocess.Popen:
    target = url.split("//", 1)[1].split("/", 1)[0]
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 2s\nscrape_configs:\n  - job_name: gpuwatch-demo\n"
                      f"    static_configs:\n      - targets: [\"{target}\"]\n")
    data = work / "prometheus-data"
    shutil.rmtree(data, ignore_errors=True)
    log = (work / "prometheus.log").open("w")
    process = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
                                f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(60):
        with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
            return process
        if process.poll() is not None:
            raise SystemExit(f"prometheus exited; see {work / 'prometheus.log'}")
        time.sleep(0.5)
    raise SystemExit(f"prometheus did not get ready; see {work / 'prometheus.log'}")


def _wait_for_scrapes(port: int, work: Path, *, scrapes: int, timeout: float = 120.0) -> None:
    """Until Prometheus has scraped the exporter ``scrapes`` times (a loaded machine starts slowly)."""
    import json

    query = urllib.parse.quote('count_over_time(up{job="gpuwatch-demo"}[5m])')
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={query}", timeout=5) as reply:
                result = json.loads(reply.read())["data"]["result"]
            if result and float(result[0]["value"][1]) >= scrapes:
                return
        time.sleep(1)
    raise SystemExit(f"prometheus did not scrape the exporter within {timeout:g} s; see {work / 'prometheus.log'}")


def _save_pages(url: str, out: Path, *, seconds: float) -> list[Path]:
    """The exporter's /metrics page every 5 s for ``seconds`` (its samples carry their own timestamps)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pages, deadline = [], time.monotonic() + seconds
    while True:
        with urllib.request.urlopen(url, timeout=5) as reply:
            page = out / f"scrape-{len(pages):03d}.prom"
            page.write_bytes(reply.read())
            pages.append(page)
        if time.monotonic() + 5 > deadline:
            return pages
        time.sleep(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iso(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _exporter_url(listen: str) -> str:
    """The URL the demo (and its banner) reaches the exporter at; all interfaces -> loopback."""
    host, port = units.parse_listen(listen, what="--exporter-listen")
    if port == 0:
        raise units.UsageError(f"--exporter-listen: {listen!r}: the demo needs a fixed port")
    host = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/metrics"


def _start_exporter(listen: str, url: str, work: Path) -> subprocess.Popen:
    log = (work / "exporter.log").open("w")
    cmd = [*_gpuwatch(), "export", "--source", "simulate", "--simulate-kubelet", "--compat", "gpuwatch", "--listen", listen]
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


def _banner(args: argparse.Namespace, work: Path, live: Path) -> None:
    print(
        "\n== gpuwatch demo is up\n"
        f"   exporter : curl {_exporter_url(args.exporter_listen)}  (and /healthz): the live simulated fleet\n"
        f"   live     : {live} (what the exporter served, through Prometheus and ingest; findings in "
        f"{work / 'live-findings'}; `gpuwatch app --db {live}` shows it)\n"
        f"   history  : {work / 'gpuwatch.duckdb'} (a simulated week): findings {work / 'findings'}/*.csv, "
        f"report {work / 'reports'}/\n"
        f"   app      : http://{args.address}:{args.port} serves the history store  (Ctrl-C stops everything)\n",
        flush=True,
    )
