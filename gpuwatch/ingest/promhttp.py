"""HTTP for the Prometheus client: one GET with an overall deadline, cancellable, redirects refused.

``requests`` bounds each socket operation, not a reply: a server trickling one byte a second keeps a
read alive forever. Here every request has an overall ``Deadline``: the sockets it uses are shut
down when it passes (a blocked read returns at once), and the request fails as timed out. A
``Cancel`` holds the requests of one read: ``cancel()`` (``ingest --follow`` on SIGTERM) shuts down
every socket in flight and refuses new requests, so a read stuck on a slow server ends at once.
The sockets are found by a connection class of the session's own adapter (sessions made here);
an injected session is used as it is. A redirect is never followed (the client would carry the
query, and any credentials in the URL, to another host): it is an error naming where it points.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any


class Cancelled(Exception):
    """The read was cancelled (a signal): no request is made any more."""


class Cancel:
    """The requests of one read, cancelled together (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: set[Deadline] = set()
        self.cancelled = False

    def cancel(self) -> None:
        """Refuse new requests and cut every request in flight (safe from a signal handler)."""
        self.cancelled = True
        for watch in list(self._watches):
            watch.cut()

    def add(self, watch: Deadline) -> None:
        with self._lock:
            self._watches.add(watch)
        if self.cancelled:
            watch.cut()

    def remove(self, watch: Deadline) -> None:
        with self._lock:
            self._watches.discard(watch)


class Deadline:
    """The sockets of one request, shut down ``seconds`` after it starts (or when cut)."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.expired = False
        self._timer = threading.Timer(max(0.0, seconds), self.cut)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._timer.cancel()

    def add(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            cut = self.expired
        if cut:
            _shutdown(sock)

    def cut(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def session() -> Any:
    """A ``requests`` session whose connections report their sockets to the request's Deadline."""
    import requests

    watching = threading.local()
    out = requests.Session()
    adapter = _adapter(watching)
    out.mount("http://", adapter)
    out.mount("https://", adapter)
    out.gpuwatch_watching = watching
    return out


def get(sess: Any, url: str, params: dict, *, seconds: float, cancel: Cancel) -> tuple[int, dict, bytes]:
    """(status, headers, body) of GET ``url``, all of it within ``seconds``; ``TimeoutError`` when
    the deadline passed, ``Cancelled`` when ``cancel`` was, ``requests`` errors as raised."""
    if cancel.cancelled:
        raise Cancelled("cancelled")
    watch = Deadline(seconds)
    watching = getattr(sess, "gpuwatch_watching", None)
    if watching is not None:
        watching.deadline = watch
    cancel.add(watch)
    watch.start()
    try:
        reply = sess.get(url, params=params, timeout=max(seconds, 0.001), allow_redirects=False)
        return reply.status_code, dict(reply.headers), reply.content
    except Exception:
        if cancel.cancelled:
            raise Cancelled("cancelled") from None
        if watch.expired:
            raise TimeoutError(f"no complete reply within {seconds:g}s") from None
        raise
    finally:
        watch.stop()
        cancel.remove(watch)
        if watching is not None:
            watching.deadline = None


def _adapter(watching: threading.local) -> Any:
    """A requests adapter whose connections add their socket to ``watching.deadline`` (this thread's
    request) when they connect and when a kept-alive one is reused."""
    from requests.adapters import HTTPAdapter
    from urllib3 import connection, connectionpool

    def report(sock) -> None:
        deadline = getattr(watching, "deadline", None)
        if deadline is not None:
            deadline.add(sock)

    class Reporting:  # before an HTTP(S) connection class: its socket joins the request's deadline
        def connect(self) -> None:
            super().connect()
            report(self.sock)

        def request(self, *args, **kwargs):
            report(self.sock)
            return super().request(*args, **kwargs)

    class Plain(Reporting, connection.HTTPConnection):
        pass

    class Secure(Reporting, connection.HTTPSConnection):
        pass

    class PlainPool(connectionpool.HTTPConnectionPool):
        ConnectionCls = Plain

    class SecurePool(connectionpool.HTTPSConnectionPool):
        ConnectionCls = Secure

    pools = {"http": PlainPool, "https": SecurePool}

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy, **kwargs):
            manager = super().proxy_manager_for(proxy, **kwargs)
            if hasattr(manager, "pool_classes_by_scheme") and not proxy.lower().startswith("socks"):
                manager.pool_classes_by_scheme = pools
            return manager

    return Adapter()
