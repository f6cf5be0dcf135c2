"""A FAKE Kubernetes API server: real HTTP on 127.0.0.1, in a thread, speaking real JSON objects.

It stands in for the API server at the true boundary (none runs here), so the reclaim controller
is driven through the real ``kubernetes`` Python client. It serves namespaced resources under
``/api/v1`` and ``/apis/<group>/<version>`` generically (GET item/list, POST, PUT, PATCH with
merge or strategic-merge patch, DELETE), keeps a global ``resourceVersion`` and answers 409 when
a PUT/PATCH carries a stale one, serves the ``scale`` subresource of Deployments/StatefulSets and
the ``eviction`` subresource of Pods (policy/v1; 429 when a PodDisruptionBudget allows no
disruption). Lists, namespaced or cluster-wide (``GET /api/v1/pods``), honour ``fieldSelector``
on the fields the API server indexes (pods: ``spec.nodeName``, ``status.phase``, metadata name and
namespace; 400 for any other field, as the real server answers). Every request is recorded in
``.log`` as ``Request(method, path, body, ...)``.
Fault injection: ``fail(method, path_part, status, times)`` answers an error instead, and
``stall_after(method, path_part)`` applies a write then blocks the response (a crash window).
RBAC: ``FakeKube(rbac=Rbac(...))`` answers 403 to any request the given ClusterRole and Role
rules do not grant, and ``access(request)`` names what a request needs (group, resource, verb).
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

KINDS = {  # plural -> (apiVersion, kind)
    "namespaces": ("v1", "Namespace"), "pods": ("v1", "Pod"), "events": ("v1", "Event"),
    "deployments": ("apps/v1", "Deployment"), "statefulsets": ("apps/v1", "StatefulSet"),
    "replicasets": ("apps/v1", "ReplicaSet"), "jobs": ("batch/v1", "Job"),
    "notebooks": ("kubeflow.org/v1", "Notebook"), "rayclusters": ("ray.io/v1", "RayCluster"),
    "leases": ("coordination.k8s.io/v1", "Lease"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
}
PLURAL = {kind: plural for plural, (_, kind) in KINDS.items()}
# Fields a list may be selected on; the API server indexes these for pods (every kind: metadata).
SELECTABLE = {"pods": ("spec.nodeName", "status.phase")}
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class Request:
    method: str
    path: str
    body: object
    content_type: str = ""
    query: dict = field(default_factory=dict)
    status: int = 0
    headers: dict = field(default_factory=dict)


class FakeKube:
    """The server: ``with FakeKube() as kube: kube.add(obj); kube.url``."""

    def __init__(self, rbac: Rbac | None = None) -> None:
        self.rbac = rbac
        self.objects: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object
        self.log: list[Request] = []
        self.faults: list[dict] = []
        self.version = 100
        self.lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeKube:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    # -- state -------------------------------------------------------------------------------
    def add(self, obj: dict) -> dict:
        """Store an object (kind/metadata.name/namespace taken from it); returns the stored copy."""
        obj = copy.deepcopy(obj)
        plural = PLURAL[obj["kind"]]
        obj.setdefault("apiVersion", KINDS[plural][0])
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{plural}-{meta['name']}")
        with self.lock:
            self._bump(obj)
            self.objects[(plural, meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            return copy.deepcopy(self.objects.get((PLURAL[kind], namespace, name)))

    def items(self, kind: str) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(o) for (p, _, _), o in self.objects.items() if p == PLURAL[kind]]

    def writes(self) -> list[Request]:
        """Recorded requests that change state (the dry-run guarantee is that there are none)."""
        return [r for r in self.log if r.method in WRITES]

    def fail(self, method: str, path_part: str, status: int, times: int = 1) -> None:
        self.faults.append({"method": method, "part": path_part, "status": status, "times": times})

    def stall_after(self, method: str, path_part: str) -> None:
        """Apply the next matching write, then hold its response until ``release()``."""
        self.faults.append({"method": method, "part": path_part, "status": "stall", "times": 1,
                            "gate": threading.Event()})

    def release(self) -> None:
        """Let every stalled response go (its client may be long dead)."""
        for fault in self.faults:
            if "gate" in fault:
                fault["gate"].set()

    def _bump(self, obj: dict) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def _fault(self, method: str, path: str):
        with self.lock:
            for fault in self.faults:
                if fault["method"] == method and fault["part"] in path and fault["times"] > 0:
                    fault["times"] -= 1
                    return fault.get("gate") or fault["status"]
        return None

    # -- request handling ---------------------------------------------------------------------
    def handle(self, method: str, path: str, body, content_type: str,
               query: dict | None = None) -> tuple[int, dict]:
        plural, namespace, name, sub = _route(path)
        key = (plural, namespace, name)
        with self.lock:
            if method == "GET":
                selector = (query or {}).get("fieldSelector", [""])[0]
                return self._get(plural, namespace, key, sub, selector)
            if method == "POST":
                return self._post(plural, namespace, name, sub, body)
            if key not in self.objects:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            if method == "DELETE":
                return 200, self.objects.pop(key)
            return self._update(key, sub, body, method, content_type)

    def _get(self, plural, namespace, key, sub, field_selector=""):
        if key[2]:
            obj = self.objects.get(key)
            if obj is None:
                return 404, _status(404, "NotFound", f'{plural} "{key[2]}" not found')
            if key[0] in ("deployments", "statefulsets") and sub == "scale":
                return 200, _scale(obj)
            return 200, copy.deepcopy(obj)
        try:
            selected = field_selector_predicate(plural, field_selector)
        except ValueError as exc:
            return 400, _status(400, "BadRequest", str(exc))
        items = [copy.deepcopy(o) for (p, ns, _), o in sorted(self.objects.items())
                 if p == plural and (not namespace or ns == namespace) and selected(o)]
        return 200, {"apiVersion": KINDS[plural][0], "kind": KINDS[plural][1] + "List",
                     "metadata": {"resourceVersion": str(self.version)}, "items": items}

    def _post(self, plural, namespace, name, sub, body):
        if sub == "eviction":
            return self._evict(namespace, name)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self.version + 1:05d}"
        meta["namespace"] = namespace or meta.get("namespace", "")
        if (plural, namespace, meta["name"]) in self.objects:
            return 409, _status(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists')
        body.setdefault("kind", KINDS[plural][1])
        return 201, copy.deepcopy(self.add(body))

    def _evict(self, namespace, name):
        pod = self.objects.get(("pods", namespace, name))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{name}" not found')
        labels = pod["metadata"].get("labels", {})
        for (p, ns, _), pdb in self.objects.items():
            wanted = pdb.get("spec", {}).get("selector", {}).get("matchLabels", {})
            if p == "poddisruptionbudgets" and ns == namespace and wanted.items() <= labels.items() \
                    and pdb.get("status", {}).get("disruptionsAllowed", 0) < 1:
                return 429, _status(429, "TooManyRequests",
                                    "Cannot evict pod as it would violate the pod's disruption budget.")
        del self.objects[("pods", namespace, name)]
        return 201, _status(201, "", "", status="Success")

    def _update(self, key, sub, body, method, content_type):
        current = self.objects[key]
        if sub == "scale":
            body = {"spec": {"replicas": body.get("spec", {}).get("replicas")}}
        sent = (body or {}).get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        if sent and sent != current["metadata"]["resourceVersion"]:
            return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on {key[0]} "{key[2]}": '
                                "the object has been modified; please apply your changes to the latest version")
        if method == "PUT":
            updated = copy.deepcopy(body)
        elif "json-patch" in content_type:
            return 415, _status(415, "UnsupportedMediaType", "the fake serves merge patches only")
        else:
            updated = merge_patch(current, body)
        updated["metadata"]["uid"] = current["metadata"]["uid"]
        self._bump(updated)
        self.objects[key] = updated
        return 200, _scale(updated) if sub == "scale" else copy.deepcopy(updated)


@dataclass(frozen=True)
class Access:
    """What one request needs from RBAC."""

    group: str
    resource: str  # "pods", or "pods/eviction" for a subresource
    verb: str
    namespace: str
    name: str


def access(request: Request) -> Access:
    """The RBAC (group, resource, verb) a recorded request needs, as the API server decides it."""
    parts = [p for p in request.path.split("/") if p]
    group = "" if parts[0] == "api" else parts[1]
    plural, namespace, name, sub = _route(request.path)
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(request.method)
    if verb is None:
        verb = "get" if name else ("watch" if request.query.get("watch") else "list")
    return Access(group, f"{plural}/{sub}" if sub else plural, verb, namespace, name)


@dataclass
class Rbac:
    """ClusterRole rules (everywhere) and Role rules per namespace, as rendered by the chart."""

    cluster: list[dict] = field(default_factory=list)
    namespaced: dict[str, list[dict]] = field(default_factory=dict)

    def allows(self, request: Request) -> bool:
        need = access(request)
        rules = self.cluster + (self.namespaced.get(need.namespace, []) if need.namespace else [])
        return any(_grants(rule, need) for rule in rules)


def _grants(rule: dict, need: Access) -> bool:
    names = rule.get("resourceNames") or []
    return (need.group in rule["apiGroups"] and need.resource in rule["resources"]
            and need.verb in rule["verbs"] and (not names or need.name in names))


def field_selector_predicate(plural: str, selector: str):
    """``spec.nodeName=n1,status.phase!=Failed`` -> predicate on stored objects (``=``, ``==``, ``!=``).

    A missing field reads as "" (``spec.nodeName=`` selects unscheduled pods); a field the API
    server does not index for the kind is a ValueError carrying the server's 400 message.
    """
    terms = []
    for term in filter(None, selector.split(",")):
        negate = "!=" in term
        path, _, value = term.partition("!=" if negate else "=")
        if path not in ("metadata.name", "metadata.namespace", *SELECTABLE.get(plural, ())):
            raise ValueError(f"field label not supported: {path}")
        terms.append((path.split("."), value.removeprefix("="), negate))
    return lambda obj: all((_dig(obj, keys) == value) != negate for keys, value, negate in terms)


def _dig(obj: dict, keys: list[str]) -> str:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return "" if obj is None else str(obj)


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch (strategic merge is the same for the maps the controller patches)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _scale(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "resourceVersion": meta["resourceVersion"]},
            "spec": {"replicas": obj.get("spec", {}).get("replicas", 0)},
            "status": {"replicas": obj.get("status", {}).get("replicas", 0)}}


def _status(code: int, reason: str, message: str, status: str = "Failure") -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status,
            "message": message, "reason": reason, "code": code}


def _forbidden(need: Access) -> str:
    """The API server's wording for an RBAC denial (the user is the chart's service account)."""
    where = f'in the namespace "{need.namespace}"' if need.namespace else "at the cluster scope"
    resource = need.resource.split("/")[0] + (f' "{need.name}"' if need.name else "")
    return (f'{resource} is forbidden: User "system:serviceaccount:gpuwatch:gpuwatch" cannot '
            f'{need.verb} resource "{need.resource}" in API group "{need.group}" {where}')


def _route(path: str) -> tuple[str, str, str, str]:
    """``/api/v1/namespaces/ns/pods/p/eviction`` -> ("pods", "ns", "p", "eviction")."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    if parts[0] == "namespaces" and len(parts) >= 3:
        namespace, parts = parts[1], parts[2:]
    else:
        namespace = ""
    parts += ["", ""]
    return parts[0], namespace, parts[1], parts[2]


def _handler(kube: FakeKube):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output quiet
            pass

        def _serve(self, method: str) -> None:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            request = Request(method, url.path, body, self.headers.get("Content-Type", ""),
                              parse_qs(url.query), headers=dict(self.headers.items()))
            kube.log.append(request)
            fault = kube._fault(method, url.path)
            if kube.rbac is not None and not kube.rbac.allows(request):
                status, payload = 403, _status(403, "Forbidden", _forbidden(access(request)))
            elif isinstance(fault, int) and not isinstance(fault, bool):
                status, payload = fault, _status(fault, "Injected", "injected fault")
            else:
                status, payload = kube.handle(method, url.path, copy.deepcopy(body),
                                              request.content_type, request.query)
                if fault is not None:  # a stall: the write is done, the answer waits
                    fault.wait(timeout=30)
            request.status = status
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client was killed while its request stalled

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def do_PUT(self):
            self._serve("PUT")

        def do_PATCH(self):
            self._serve("PATCH")

        def do_DELETE(self):
            self._serve("DELETE")

    return Handler


# -- object builders: the shapes a real API server returns (trimmed to the fields used) ---------
def namespace(name: str, *, opted_in: bool = True, labels: dict | None = None) -> dict:
    labels = {"kubernetes.io/metadata.name": name, **(labels or {})}
    if opted_in:
        labels["gpuwatch.io/reclaim"] = "enabled"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def owner_ref(kind: str, name: str) -> dict:
    return {"apiVersion": KINDS[PLURAL[kind]][0], "kind": kind, "name": name,
            "uid": f"uid-{PLURAL[kind]}-{name}", "controller": True, "blockOwnerDeletion": True}


def pod(ns: str, name: str, *, owner: tuple[str, str] | None = None, gpus: int = 1,
        annotations: dict | None = None, labels: dict | None = None, priority_class: str = "",
        node: str = "gpu-node-1", uid: str | None = None) -> dict:
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-pods-{name}", "labels": labels or {},
            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner_ref(*owner)]
    spec = {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "4"}}}],
            "nodeName": node, "restartPolicy": "Always"}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running"}}


def workload(kind: str, ns: str, name: str, *, replicas: int = 1, owner: tuple[str, str] | None = None,
             annotations: dict | None = None, spec: dict | None = None) -> dict:
    meta = {"name": name, "namespace": ns, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner_ref(*owner)]
    body = {"kind": kind, "metadata": meta, "spec": dict(spec or {})}
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        body["spec"].setdefault("replicas", replicas)
    if kind == "Job":
        body["spec"].setdefault("suspend", False)
    return body
