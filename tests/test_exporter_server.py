"""The exporter's HTTP server under real sockets on 127.0.0.1: gzip when asked, HEAD, 405 for other
methods, and clients that connect and send nothing (or trickle) cannot starve a normal scrape."""

from __future__ import annotations

import gzip
import socket
import time
import urllib.request

import pytest

from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.server import serve
from gpuwatch.fleet import DEFAULT_START
from gpuwatch.sources import SourceOptions, simulate


@pytest.fixture(scope="module")
def server():
    source = simulate.open_source(SourceOptions(node="all", simulate_gpus=16, simulate_start=DEFAULT_START))
    collector = ExporterCollector(source, interval_s=1.0)
    running = serve(collector, "127.0.0.1:0")
    yield f"http://127.0.0.1:{running.port}"
    running.stop()
    collector.close() if hasattr(collector, "close") else None


def _get(url: str, *, method: str = "GET", headers: dict | None = None):
    request = urllib.request.Request(url, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.status, dict(reply.headers), reply.read()


def test_gzip_when_asked_and_identical_content(server):
    _, plain_headers, plain = _get(f"{server}/metrics")
    status, headers, body = _get(f"{server}/metrics", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip" and "Content-Encoding" not in plain_headers
    assert b"DCGM_FI_DEV_GPU_UTIL" in plain and len(body) < len(plain) / 3
    assert gzip.decompress(body).split(b"\n")[0] == plain.split(b"\n")[0]


def test_head_has_headers_and_no_body(server):
    status, headers, body = _get(f"{server}/metrics", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_other_methods_are_refused(server):
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(f"{server}/metrics", method="POST")
    assert info.value.code == 405


def test_silent_clients_do_not_starve_a_scrape(server):
    host, port = server.removeprefix("http://").split(":")
    silent = [socket.create_connection((host, int(port)), timeout=5) for _ in range(100)]
    try:
        for s in silent[:50]:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # half a request, never finished
        started = time.monotonic()
        status, _, body = _get(f"{server}/metrics")
        assert status == 200 and body and time.monotonic() - started < 2.0
    finally:
        for s in silent:
            s.close()
