"""A real Prometheus (Debian's ``prometheus`` package) on 127.0.0.1 for tests, and promtool helpers.

Tests that need it use ``require_prometheus()`` so they skip with a clear reason where the
package is missing (``make test`` installs it when running as root).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest


def binary(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/bin/{name}",) if Path(p).exists()), None)


def require_prometheus() -> tuple[str, str]:
    prom, tool = binary("prometheus"), binary("promtool")
    if not (prom and tool):
        pytest.skip("Debian's prometheus package is not installed (make test installs it as root)")
    return prom, tool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen
    log: Path

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        params = {"query": promql} | ({"time": str(at)} if at is not None else {})
        return self._get("/api/v1/query", params)["result"]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        params = {"query": promql, "start": str(start), "end": str(end), "step": str(step)}
        return self._get("/api/v1/query_range", params)["result"]

    def _get(self, path: str, params: dict) -> dict:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def wait_for(self, promql: str, *, timeout: float = 30.0) -> list[dict]:
        """Poll until ``promql`` returns at least one series."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"no series for {promql!r} within {timeout}s; log: {self.log.read_text()[-2000:]}")


@contextlib.contextmanager
def running(tmp_path: Path, *, targets: list[str] = (), interval: str = "1s", tsdb: Path | None = None,
            honor_labels: bool = True):
    """Start Prometheus scraping ``targets`` (host:port) and/or serving a (backfilled) ``tsdb``."""
    prom, _ = require_prometheus()
    config = tmp_path / "prometheus.yml"
    jobs = [{"job_name": "gpuwatch", "scrape_interval": interval, "scrape_timeout": interval,
             "honor_labels": honor_labels, "static_configs": [{"targets": list(targets)}]}] if targets else []
    config.write_text(json.dumps({"global": {"scrape_interval": interval}, "scrape_configs": jobs}))
    port, log = free_port(), tmp_path / "prometheus.log"
    data = tsdb or tmp_path / "tsdb"
    cmd = [prom, f"--config.file={config}", f"--storage.tsdb.path={data}",
           f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y",
           "--web.enable-admin-api"]
    with log.open("w") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = Prometheus(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_ready(server: Prometheus, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"prometheus exited: {server.log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as reply:
            if reply.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"prometheus not ready in {timeout}s: {server.log.read_text()[-2000:]}")


def backfill(openmetrics: Path, tsdb: Path) -> Path:
    """``promtool tsdb create-blocks-from openmetrics FILE DIR`` (the file must end with ``# EOF``)."""
    _, tool = require_prometheus()
    tsdb.mkdir(parents=True, exist_ok=True)
    subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb)],
                   check=True, capture_output=True, text=True)
    return tsdb
