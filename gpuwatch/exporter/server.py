"""The exporter's HTTP server: ``/metrics`` (text format 0.0.4) and ``/healthz``.

``/metrics`` gathers a private CollectorRegistry holding only the ExporterCollector (no process
or platform collectors: every series is declared in METRICS). ``/healthz`` is 200 only while the
source is up and sees at least one GPU; its body says why either way.
"""

from __future__ import annotations

import gzip
import logging
import threading

from gpuwatch import units
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exposition import CONTENT_TYPE, render

log = logging.getLogger(__name__)


def registry_for(collector: ExporterCollector):
    """A private CollectorRegistry with just our collector."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def parse_listen(listen: str) -> tuple[str, int]:
    """``:9400`` -> ("", 9400) (all interfaces); ``127.0.0.1:9400`` -> ("127.0.0.1", 9400)."""
    return units.parse_listen(listen, what="--listen")


class Server:
    """A running exporter server; ``.port`` is the bound port, ``.stop()`` shuts it down."""

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
        server.trigger.pull_trigger(close_all)
        self.thread.join(timeout=5)
        server.task_dispatcher.shutdown()


# Serving limits: a few worker threads render (a scrape takes milliseconds); waitress reads and
# writes every connection in its I/O loop, so a client that connects and sends nothing holds no
# worker and is dropped after CHANNEL_TIMEOUT_S; at most CONNECTION_LIMIT connections are open.
THREADS, BACKLOG, CHANNEL_TIMEOUT_S, CONNECTION_LIMIT = 4, 1024, 10, 512
GZIP_MIN_BYTES = 1024


def serve(collector: ExporterCollector, listen: str = ":9400") -> Server:
    """Start serving in a background thread (port 0 = pick a free one); waitress, bounded."""
    from waitress.server import create_server

    host, port = parse_listen(listen)
    server = create_server(wsgi_app(registry_for(collector), collector), host=host or "0.0.0.0", port=port,
                           threads=THREADS, backlog=BACKLOG, channel_timeout=CHANNEL_TIMEOUT_S,
                           connection_limit=CONNECTION_LIMIT, ident="gpuwatch", expose_tracebacks=False,
                           clear_untrusted_proxy_headers=True)
    thread = threading.Thread(target=server.run, name="gpuwatch-exporter", daemon=True)
    thread.start()
    return Server(server, thread)


class _Rendered:
    """The exposition of one refresh, plain and gzipped: every scrape inside the refresh interval
    gets the same bytes (the readings cannot change before the next refresh), rendered once."""

    def __init__(self):
        self.lock, self.state, self.plain, self.gzipped = threading.Lock(), None, b"", None

    def body(self, registry, collector: ExporterCollector, *, gzipped: bool) -> bytes:
        state = collector.refresh()
        with self.lock:
            if self.state is not state:
                self.state, self.plain, self.gzipped = state, render(registry.collect()), None
            if not gzipped or len(self.plain) < GZIP_MIN_BYTES:
                return self.plain
            if self.gzipped is None:
                self.gzipped = gzip.compress(self.plain, compresslevel=5)
            return self.gzipped


def wsgi_app(registry, collector: ExporterCollector):
    """GET and HEAD of /metrics, /healthz and /; gzip when the client accepts it."""
    rendered = _Rendered()

    def app(environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        wants_gzip = "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "")
        if method not in ("GET", "HEAD"):
            code, body, kind = 405, b"method not allowed: GET or HEAD\n", "text/plain; charset=utf-8"
        elif path == "/metrics":
            code, body, kind = _metrics(rendered, registry, collector, gzipped=wants_gzip)
        else:
            code, body, kind = _route(path, collector)
        headers = [("Content-Type", kind)]
        if body[:2] == b"\x1f\x8b":
            headers += [("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")]
        headers.append(("Content-Length", str(len(body))))
        start_response(_STATUS[code], headers)
        return [b""] if method == "HEAD" else [body]
    return app


_STATUS = {200: "200 OK", 404: "404 Not Found", 405: "405 Method Not Allowed", 500: "500 Internal Server Error",
           503: "503 Service Unavailable"}
_TEXT = "text/plain; charset=utf-8"


def _metrics(rendered: _Rendered, registry, collector: ExporterCollector, *, gzipped: bool) -> tuple[int, bytes, str]:
    try:
        return 200, rendered.body(registry, collector, gzipped=gzipped), CONTENT_TYPE
    except Exception as exc:  # a bug must not kill the server; say what broke
        log.exception("request /metrics failed")
        return 500, f"internal error: {type(exc).__name__}: {exc}\n".encode(), _TEXT


def _route(path: str, collector: ExporterCollector) -> tuple[int, bytes, str]:
    try:
        if path in ("/healthz", "/health"):
            ok, body = collector.health()
            return (200 if ok else 503), body.encode(), _TEXT
        if path == "/":
            return 200, b"gpuwatch exporter: /metrics /healthz\n", _TEXT
        return 404, b"not found\n", _TEXT
    except Exception as exc:  # a bug must not kill the server; say what broke
        log.exception("request %s failed", path)
        return 500, f"internal error: {type(exc).__name__}: {exc}\n".encode(), _TEXT
