"""The exporter's HTTP server: ``/metrics`` (text format 0.0.4) and ``/healthz``.

``/metrics`` gathers a private CollectorRegistry holding only the ExporterCollector (no process
or platform collectors: every series is declared in METRICS). ``/healthz`` is 200 only while the
source is up and sees at least one GPU; its body says why either way.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread):
        self.httpd, self.thread = httpd, thread
        self.port = httpd.server_address[1]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(collector: ExporterCollector, listen: str = ":9400") -> Server:
    """Start serving in a background thread (port 0 = pick a free one)."""
    registry = registry_for(collector)
    handler = type("Handler", (_Handler,), {"registry": registry, "collector": collector})
    httpd = ThreadingHTTPServer(parse_listen(listen), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="gpuwatch-exporter", daemon=True)
    thread.start()
    return Server(httpd, thread)


class _Handler(BaseHTTPRequestHandler):
    registry = None
    collector: ExporterCollector | None = None

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self._reply(200, render(self.registry.collect()), CONTENT_TYPE)
            elif path in ("/healthz", "/health"):
                ok, body = self.collector.health()
                self._reply(200 if ok else 503, body.encode(), "text/plain; charset=utf-8")
            elif path == "/":
                self._reply(200, b"gpuwatch exporter: /metrics /healthz\n", "text/plain; charset=utf-8")
            else:
                self._reply(404, b"not found\n", "text/plain; charset=utf-8")
        except Exception as exc:  # a bug must not kill the server thread; say what broke
            log.exception("request %s failed", path)
            self._reply(500, f"internal error: {type(exc).__name__}: {exc}\n".encode(), "text/plain; charset=utf-8")

    def _reply(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # per-request logs at debug, not stderr
        log.debug("%s " + format, self.address_string(), *args)
