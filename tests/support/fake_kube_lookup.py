"""A FAKE Kubernetes API server for Helm's cluster-aware render: real HTTP on 127.0.0.1, in a thread.

It stands in for the API server `helm install` talks to (none runs here), so the chart's ``lookup``
calls and ``.Capabilities.APIVersions`` are answered through Helm's own Go client (helm-python-sdk's
``Config.render``): the version and legacy discovery documents (``/version``, ``/api``, ``/apis``,
``/api/v1``, ``/apis/<group>/<version>``), then GET of one object or of a cluster-wide list, for the
kinds given. Aggregated discovery is declined (406 on that Accept would be wrong: the real server
falls back by answering the legacy document, which is what is served). Requests land in ``.log``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# kind -> (group/version, plural, namespaced)
KINDS = {
    "Namespace": ("v1", "namespaces", False),
    "DaemonSet": ("apps/v1", "daemonsets", True),
    "ClusterPolicy": ("nvidia.com/v1", "clusterpolicies", False),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
}


class FakeKube:
    """``with FakeKube(objects, kinds=...) as kube: kube.url`` (kinds: those served; default all)."""

    def __init__(self, objects: list[dict], *, kinds: set[str] | None = None) -> None:
        self.objects = objects
        self.kinds = set(kinds or KINDS)  # served kinds; a CRD not installed is left out
        self.log: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeKube:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def group_versions(self) -> list[str]:
        return sorted({KINDS[k][0] for k in self.kinds})

    def answer(self, path: str) -> dict | None:
        if path == "/version":
            return {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups = [gv.split("/") for gv in self.group_versions() if "/" in gv]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                 "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in groups]}
        for gv in self.group_versions():
            base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
            served = {k: KINDS[k] for k in self.kinds if KINDS[k][0] == gv}
            if path == base:
                return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
                    {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                     "verbs": ["get", "list"]} for kind, (_, plural, namespaced) in served.items()]}
            for kind, (_, plural, _namespaced) in served.items():
                if path == f"{base}/{plural}":
                    items = [o for o in self.objects if o["kind"] == kind]
                    return {"kind": f"{kind}List", "apiVersion": gv, "metadata": {"resourceVersion": "1"},
                            "items": items}
                prefix = f"{base}/{plural}/"
                if path.startswith(prefix):
                    name = path[len(prefix):]
                    return next((o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name), None)
        return None


def _handler(kube: FakeKube):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?")[0].rstrip("/") or "/"
            kube.log.append(path)
            body = kube.answer(path)
            if body is None:
                body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                        "code": 404, "message": f"{path} not found"}
            data = json.dumps(body).encode()
            self.send_response(body.get("code", 200) if body.get("kind") == "Status" else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler
