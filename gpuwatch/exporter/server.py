"""The HTTP server of both exporters: ``/metrics`` (text format 0.0.4) and ``/healthz`` on waitress.

``serve(collector, listen)`` serves the node exporter: a private CollectorRegistry holding only
the ExporterCollector (no process or platform collectors: every series is declared in METRICS);
``/healthz`` is 200 only while the source is up and sees at least one GPU. ``serve_metrics`` is
the same server for any other ``/metrics`` body (the findings exporter). Both are bounded by
``Limits``: a few worker threads, a real listen backlog, a connection cap, and an idle timeout;
waitress reads and writes every connection in its I/O loop, so a client that connects and sends
nothing (or half a request) holds no worker thread and is dropped after the timeout.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpuwatch import units
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exposition import CONTENT_TYPE, render

log = logging.getLogger(__name__)
GZIP_MIN_BYTES = 1024  # below this gzip saves less than its header costs
_TEXT = "text/plain; charset=utf-8"
_STATUS = {200: "200 OK", 404: "404 Not Found", 405: "405 Method Not Allowed", 500: "500 Internal Server Error",
           503: "503 Service Unavailable"}


@dataclass(frozen=True)
class Limits:
    """Serving limits. A scrape renders in milliseconds, so 4 workers serve many clients; waitress
    sweeps idle connections every ``cleanup_interval_s`` and drops those idle ``idle_timeout_s``."""

    threads: int = 4
    backlog: int = 1024
    connection_limit: int = 512
    idle_timeout_s: int = 10
    cleanup_interval_s: int = 2


DEFAULT_LIMITS = Limits()


def parse_listen(listen: str) -> tuple[str, int]:
    """``:9400`` -> ("", 9400) (all interfaces); ``127.0.0.1:9400`` -> ("127.0.0.1", 9400)."""
    return units.parse_listen(listen, what="--listen")


class Server:
    """A running server; ``.port`` is the bound port, ``.stop()`` shuts it down."""

    def __init__(self, wsgi_server, thread: threading.Thread):
        self.wsgi_server, self.thread = wsgi_server, thread
        self.port = wsgi_server.effective_port

    def stop(self) -> None:
        """Close every channel from inside the I/O loop (closing from here would pull sockets out
        from under its select), so the loop ends on its own; then stop the workers."""
        server = self.wsgi_server

        def close_all() -> None:
            for channel in list(server._map.values()):
                channel.close()
        # a closed trigger (OSError) means the loop has already ended: nothing left to close
        if self.thread.is_alive():
            with contextlib.suppress(OSError):
                server.trigger.pull_trigger(close_all)
        self.thread.join(timeout=5)
        server.task_dispatcher.shutdown()


def serve(collector: ExporterCollector, listen: str = ":9400", *, limits: Limits = DEFAULT_LIMITS) -> Server:
    """Serve the node exporter in a background thread (port 0 = pick a free one)."""
    registry, rendered = registry_for(collector), _Rendered()
    app = metrics_app(lambda: rendered.body(registry, collector), health=collector.health,
                      index=b"gpuwatch exporter: /metrics /healthz\n")
    return serve_app(app, listen, name="gpuwatch-exporter", limits=limits)


def serve_metrics(metrics: Callable[[], bytes], listen: str, *, health: Callable[[], tuple[bool, str]] | None = None,
                  content_type: str = CONTENT_TYPE, name: str = "gpuwatch-metrics",
                  limits: Limits = DEFAULT_LIMITS) -> Server:
    """Serve ``metrics()`` on /metrics (and ``health()`` on /healthz) with the exporter's server."""
    return serve_app(metrics_app(metrics, health=health, content_type=content_type), listen, name=name, limits=limits)


def serve_app(app, listen: str, *, name: str, limits: Limits = DEFAULT_LIMITS) -> Server:
    """Start a WSGI app on waitress in a background thread, bounded by ``limits``."""
    from waitress.server import create_server

    host, port = parse_listen(listen)
    # requests waiting for one of the few workers is the design, not an incident: no warning per request
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    server = create_server(app, host=host or "0.0.0.0", port=port, threads=limits.threads, backlog=limits.backlog,
                           connection_limit=limits.connection_limit, channel_timeout=limits.idle_timeout_s,
                           cleanup_interval=limits.cleanup_interval_s, ident="gpuwatch", expose_tracebacks=False,
                           clear_untrusted_proxy_headers=True)
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    return Server(server, thread)


def registry_for(collector: ExporterCollector):
    """A private CollectorRegistry with just our collector."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


class _Rendered:
    """The exposition of one refresh: every scrape inside the refresh interval gets the same bytes
    (the readings cannot change before the next refresh), rendered once."""

    def __init__(self):
        self.lock, self.state, self.plain = threading.Lock(), None, b""

    def body(self, registry, collector: ExporterCollector) -> bytes:
        state = collector.refresh()
        with self.lock:
            if self.state is not state:
                self.state, self.plain = state, render(registry.collect())
            return self.plain


class _Gzipped:
    """The gzip of the last body, compressed once however many clients ask for it."""

    def __init__(self):
        self.lock, self.plain, self.packed = threading.Lock(), None, b""

    def of(self, plain: bytes) -> bytes:
        with self.lock:
            if not (plain is self.plain or plain == self.plain):
                self.plain, self.packed = plain, gzip.compress(plain, compresslevel=5)
            return self.packed


def metrics_app(metrics: Callable[[], bytes], *, health: Callable[[], tuple[bool, str]] | None = None,
                content_type: str = CONTENT_TYPE, index: bytes = b"gpuwatch: /metrics /healthz\n"):
    """A WSGI app: GET and HEAD of /metrics, /healthz and /; gzip when the client accepts it."""
    gzipped = _Gzipped()

    def app(environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method not in ("GET", "HEAD"):
            code, body, kind = 405, b"method not allowed: GET or HEAD\n", _TEXT
        else:
            code, body, kind = _answer(path, metrics, health=health, index=index, content_type=content_type)
        headers = [("Content-Type", kind)]
        if code == 200 and path == "/metrics" and _accepts_gzip(environ) and len(body) >= GZIP_MIN_BYTES:
            body = gzipped.of(body)
            headers += [("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")]
        headers.append(("Content-Length", str(len(body))))
        start_response(_STATUS[code], headers)
        return [b""] if method == "HEAD" else [body]
    return app


def _accepts_gzip(environ) -> bool:
    """True when Accept-Encoding lists gzip without ``q=0`` (RFC 9110 12.5.3)."""
    for item in environ.get("HTTP_ACCEPT_ENCODING", "").split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() in ("gzip", "x-gzip"):
            return params.replace(" ", "").lower() not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


def _answer(path: str, metrics, *, health, index: bytes, content_type: str) -> tuple[int, bytes, str]:
    try:
        if path == "/metrics":
            return 200, metrics(), content_type
        if path in ("/healthz", "/health"):
            ok, body = health() if health else (True, "ok\n")
            return (200 if ok else 503), body.encode(), _TEXT
        if path == "/":
            return 200, index, _TEXT
        return 404, b"not found\n", _TEXT
    except Exception as exc:  # a bug must not kill the server; say what broke
        log.exception("request %s failed", path)
        return 500, f"internal error: {type(exc).__name__}: {exc}\n".encode(), _TEXT
