"""A stand-in Prometheus HTTP API server on 127.0.0.1, for what a real Prometheus never sends.

The real server (tests/support/prometheus.py) is used wherever its replies are what is tested; this
one serves the exact request shapes gpuwatch.ingest.prometheus makes (label values, series,
``query_range`` and instant ``query`` of ``avg_over_time``/``last_over_time`` over one metric name)
from a dict of series, and lets a test replace any reply (junk JSON, a redirect) or send it slowly
(``trickle`` seconds per byte, headers included when ``trickle_headers``), as a broken proxy or HA
front would. Query results ignore the node shard matchers except the no-node shard, which gets no
series (every series here has a hostname), so each series is returned once per query.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Script:
    """What the server answers: ``series`` name -> [(labels, [(ts, value), ...])], values as sent
    (JSON: normally strings); ``override(path, params)`` -> (status, headers, body) or None."""

    series: dict[str, list[tuple[dict, list]]] = field(default_factory=dict)
    override: Callable[[str, dict], tuple[int, dict, bytes] | None] | None = None
    trickle: float = 0.0
    trickle_headers: bool = False
    hits: list[str] = field(default_factory=list)


def _metric(query: str) -> str | None:
    found = re.search(r"_over_time\(([A-Za-z_:][A-Za-z0-9_:]*)", query)
    return found[1] if found else None


def answer(script: Script, path: str, params: dict) -> tuple[int, dict, bytes]:
    """The reply to one request, as (status, headers, body)."""
    if script.override is not None and (found := script.override(path, params)) is not None:
        return found
    if path.startswith("/api/v1/label/"):
        label = path.split("/")[4]
        if label == "__name__":
            data = sorted(script.series)
        else:
            data = sorted({lb[label] for items in script.series.values() for lb, _ in items if label in lb})
    elif path == "/api/v1/series":
        data = []
    elif path in ("/api/v1/query_range", "/api/v1/query"):
        query = params.get("query", "")
        name = _metric(query)
        items = [] if name is None or 'hostname=""' in query else script.series.get(name, [])
        if path == "/api/v1/query":
            at = float(params["time"])
            data = {"resultType": "vector", "result": [
                {"metric": {"__name__": name, **labels}, "value": [at, points[-1][1]]}
                for labels, points in items if points]}
        else:
            lo, hi = float(params["start"]), float(params["end"])
            result = []
            for labels, points in items:
                inside = [p for p in points if _on_grid(p, lo, hi)]
                if inside:
                    result.append({"metric": {"__name__": name, **labels}, "values": inside})
            data = {"resultType": "matrix", "result": result}
    else:
        return 404, {}, b'{"status":"error","errorType":"not_found","error":"no such path"}'
    return 200, {}, json.dumps({"status": "success", "data": data}).encode()


def _on_grid(point, lo: float, hi: float) -> bool:
    try:
        return lo - 1e-6 <= float(point[0]) <= hi + 1e-6
    except (TypeError, ValueError, IndexError):
        return True  # junk timestamps are served as they are


class _Handler(http.server.BaseHTTPRequestHandler):
    script: Script

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        self.script.hits.append(url.path)
        status, headers, body = answer(self.script, url.path, params)
        head = [f"HTTP/1.1 {status} X\r\n".encode(), f"Content-Length: {len(body)}\r\n".encode(),
                b"Content-Type: application/json\r\n"]
        head += [f"{k}: {v}\r\n".encode() for k, v in headers.items()]
        head.append(b"\r\n")
        try:
            self._send(b"".join(head), slow=self.script.trickle_headers)
            self._send(body, slow=self.script.trickle > 0)
        except OSError:
            return

    def _send(self, data: bytes, *, slow: bool) -> None:
        if not slow or self.script.trickle <= 0:
            self.wfile.write(data)
            self.wfile.flush()
            return
        for byte in data:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(self.script.trickle)

    def log_message(self, *args):
        pass


@contextmanager
def serving(script: Script):
    """The server's ``http://127.0.0.1:PORT`` while the block runs."""
    handler = type("Handler", (_Handler,), {"script": script, "protocol_version": "HTTP/1.1"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
