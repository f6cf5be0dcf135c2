"""The exporter's HTTP server under real sockets on 127.0.0.1: gzip when asked (not when refused),
HEAD, 405 for other methods, clients that connect and send nothing (or half a request) cannot starve a
normal scrape and are dropped after the idle timeout, the worker threads stay bounded under load, and
``serve_metrics`` serves any body (the findings exporter) the same way."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.server import Limits, serve, serve_metrics
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


def test_gzip_refused_with_q0_or_not_asked(server):
    for accept in ("gzip;q=0", "identity", "br, deflate"):
        _, headers, body = _get(f"{server}/metrics", headers={"Accept-Encoding": accept})
        assert "Content-Encoding" not in headers and body.startswith(b"# HELP"), accept
    _, headers, _ = _get(f"{server}/metrics", headers={"Accept-Encoding": "br, GZIP;q=0.5"})
    assert headers["Content-Encoding"] == "gzip"


def test_healthz_and_unknown_paths(server):
    status, headers, body = _get(f"{server}/healthz")
    assert status == 200 and headers["Content-Type"].startswith("text/plain") and body
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(f"{server}/nope")
    assert info.value.code == 404


def _closed_by_server(sock: socket.socket, *, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_silent_clients_are_dropped_after_the_idle_timeout():
    running = serve_metrics(lambda: b"# HELP x y\n", "127.0.0.1:0",
                            limits=Limits(idle_timeout_s=1, cleanup_interval_s=1))
    try:
        silent = socket.create_connection(("127.0.0.1", running.port), timeout=5)
        half = socket.create_connection(("127.0.0.1", running.port), timeout=5)
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert _closed_by_server(silent, within_s=5) and _closed_by_server(half, within_s=5)
        assert time.monotonic() - started < 4.5
    finally:
        silent.close(), half.close(), running.stop()


def test_worker_threads_stay_bounded_under_concurrent_load():
    entered, release = threading.Semaphore(0), threading.Event()

    def slow_body() -> bytes:  # every request holds its worker until released
        entered.release()
        release.wait(10)
        return b"# HELP x y\n"

    before = {t for t in threading.enumerate() if t.name.startswith("waitress-")}
    running = serve_metrics(slow_body, "127.0.0.1:0", name="bounded-test", limits=Limits(threads=3))
    url = f"http://127.0.0.1:{running.port}/metrics"
    try:
        with ThreadPoolExecutor(12) as pool:
            replies = [pool.submit(_get, url) for _ in range(12)]
            assert all(entered.acquire(timeout=5) for _ in range(3))
            assert not entered.acquire(timeout=0.5)  # a 4th request waits: only 3 workers
            workers = {t for t in threading.enumerate() if t.name.startswith("waitress-")} - before
            release.set()
            assert all(r.result(timeout=10)[0] == 200 for r in replies)
        assert len(workers) == 3
    finally:
        release.set()
        running.stop()


def test_serve_metrics_serves_any_body_with_its_content_type():
    body = b"# HELP gpuwatch_derived_up x\n# TYPE gpuwatch_derived_up gauge\ngpuwatch_derived_up 1.0\n" * 50
    running = serve_metrics(lambda: body, "127.0.0.1:0", health=lambda: (False, "no store\n"),
                            content_type="text/plain; version=0.0.4; charset=utf-8")
    base = f"http://127.0.0.1:{running.port}"
    try:
        status, headers, got = _get(f"{base}/metrics", headers={"Accept-Encoding": "gzip"})
        assert status == 200 and gzip.decompress(got) == body and "version=0.0.4" in headers["Content-Type"]
        with pytest.raises(urllib.error.HTTPError) as info:
            _get(f"{base}/healthz")
        assert info.value.code == 503 and info.value.read() == b"no store\n"
    finally:
        running.stop()


def test_a_failing_body_is_a_500_not_a_dead_server():
    calls = []

    def flaky() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return b"# HELP x y\n"

    running = serve_metrics(flaky, "127.0.0.1:0")
    try:
        with pytest.raises(urllib.error.HTTPError) as info:
            _get(f"http://127.0.0.1:{running.port}/metrics")
        assert info.value.code == 500 and b"RuntimeError: boom" in info.value.read()
        assert _get(f"http://127.0.0.1:{running.port}/metrics")[0] == 200
    finally:
        running.stop()
