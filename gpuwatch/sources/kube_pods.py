"""Kubernetes API source: the UID and labels of the pods on this node.

dcgm-exporter adds them with ``--kubernetes-enable-pod-uid``, ``--kubernetes-enable-pod-labels``
and ``--kubernetes-pod-label-allowlist-regex``, reading a Pod informer limited to
``spec.nodeName=$NODE_NAME``. We read the same pods with one list call every ``ttl_s``, not a
watch: a series only needs them at scrape time; a node's list is small and, asked with
``resourceVersion=0``, served from the API server's watch cache, not etcd; pod labels and UIDs
change rarely, and a new pod gets its uid and labels within ``ttl_s``. A watch would add a
thread, reconnects and resourceVersion bookkeeping to save one small request per node every 30 s.
``read()`` does the I/O, ``parse()`` is pure.

What we took from dcgm-exporter (main d5e5f51, 2026-05-12: ``internal/pkg/transformation/
kubernetes.go`` NewPodMapper, createPodInfo, shouldIncludeLabel and the Labels loop in Process;
``internal/pkg/utils/utils.go`` SanitizeLabelName; ``pkg/cmd/app.go``; chart ``daemonset.yaml``):

- Allow-list: comma-separated patterns (a string-slice flag; the chart joins its list with
  ","). A label is kept when any pattern matches anywhere in its *original key* (Go's
  ``MatchString`` is a search, not a full match). None or "" keeps every label.
- Names: every character outside ``[a-zA-Z0-9_]`` becomes ``_``.
- Collisions: pod labels never replace the series' own attributes (pod, namespace, container,
  pod_uid, vgpu ...): attributes win.

Where we differ, on purpose: a pattern that does not compile is a :class:`UsageError`
(dcgm-exporter logs it, skips it, and keeps every label if no pattern is left); a name starting
with a digit gets a leading ``_`` (dcgm-exporter emits it as is, and Prometheus rejects it); every
name in :data:`RESERVED_LABELS` is dropped (dcgm-exporter guards only its attributes, so a label
called ``gpu`` or ``modelName`` is written twice); when two keys give one name (``a.b``, ``a_b``)
the first in sort order wins (Go's map order picks one at random each time); when the API cannot
be reached, the last good list is served for ``max_stale_s`` and then :class:`KubePodsError` is
raised (an informer serves its cache for ever and says nothing).
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gpuwatch.units import UsageError

log = logging.getLogger(__name__)
REASONS = ("unreachable", "forbidden", "error")
ALLOWLIST_FLAG = "--kubernetes-pod-label-allowlist-regex"
RBAC_RULE = '{apiGroups: [""], resources: ["pods"], verbs: ["list"]}'
# The exporter's own label names (dcgm-exporter's and gpuwatch's): a pod label never replaces one.
RESERVED_LABELS = frozenset({
    "pod", "namespace", "container", "pod_uid", "vgpu",  # Kubernetes attributes
    "pod_name", "pod_namespace", "container_name", "uuid",  # the same, with --use-old-namespace
    "UUID", "gpu", "device", "modelName", "Hostname", "hostname", "pci_bus_id",  # device labels
    "GPU_I_PROFILE", "GPU_I_ID", "DCGM_FI_DRIVER_VERSION", "err_code", "err_msg",
    "hpc_job", "dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name",
    "dra_device_name", "dra_mig_profile", "dra_mig_device_uuid",  # dcgm-exporter's other attributes
    "resource", "pid", "mig_uuid", "profile_id", "placement_start", "placement_size",  # gpuwatch_*
})
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_INVALID_CHAR = re.compile(r"[^a-zA-Z0-9_]")
_NO_LABELS: Mapping[str, str] = MappingProxyType({})


class KubePodsError(Exception):
    """The pod list could not be read; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str):
        if reason not in REASONS:
            raise ValueError(f"unknown KubePodsError reason {reason!r}; expected one of {REASONS}")
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class PodMeta:
    """One pod's UID and its labels as Prometheus label names -> values (allow-list applied)."""

    uid: str | None
    labels: Mapping[str, str]


class PodMetadata:
    """(namespace, pod) -> :class:`PodMeta` for the pods on ``node``, listed at most once per ``ttl_s``.

    ``api`` is an :class:`ApiServer`. Safe to share between concurrent scrapes.
    """

    def __init__(self, api, *, node: str, labels: bool, allowlist: str | None, ttl_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, max_stale_s: float = 300.0,
                 timeout_s: float = 5.0):
        self.api, self.node, self.labels = api, _require_node(node), labels
        self.allow = compile_allowlist(allowlist)
        self.ttl_s, self.clock, self.max_stale_s, self.timeout_s = ttl_s, clock, max_stale_s, timeout_s
        self.last_error: KubePodsError | None = None  # set while a failed list is being papered over
        self._pods: dict[tuple[str, str], PodMeta] = {}
        self._good_at: float | None = None
        self._next_list: float | None = None
        self._lock = threading.Lock()

    def get(self) -> dict[tuple[str, str], PodMeta]:
        """The node's pods; while the API fails, the last good list if at most ``max_stale_s`` old."""
        with self._lock:
            now = self.clock()
            if self._next_list is None or now >= self._next_list:
                self._refresh(now)
            error = self.last_error
            if error is not None and self._good_at is None:
                raise KubePodsError(error.reason, str(error))
            if error is not None and now - self._good_at > self.max_stale_s:
                raise KubePodsError(error.reason, f"{error} (last good pod list {now - self._good_at:.0f} s "
                                    f"ago, older than the {self.max_stale_s:g} s allowed)")
            return dict(self._pods)

    def read(self) -> dict:
        """One list call: the raw ``PodList`` JSON of the pods on the node."""
        where = f"listing pods on node {self.node!r} (GET /api/v1/pods?fieldSelector=spec.nodeName=...)"
        query = {"fieldSelector": f"spec.nodeName={self.node}", "resourceVersion": "0"}
        try:
            return json.loads(self.api.get("/api/v1/pods", query, timeout=self.timeout_s))
        except urllib.error.HTTPError as exc:
            raise _http_error(exc.code, exc.read(), exc.reason, where) from None
        except (urllib.error.URLError, OSError) as exc:
            raise KubePodsError("unreachable", f"{where}: {type(exc).__name__}: {exc}") from None
        except ValueError as exc:
            raise KubePodsError("error", f"{where}: the answer is not JSON: {exc}") from None

    def _refresh(self, now: float) -> None:
        self._next_list = now + self.ttl_s  # failed or not: one list per TTL, whatever the scrape rate
        try:
            raw = self.read()
        except KubePodsError as exc:
            log.warning("pod metadata: %s", exc)
            self.last_error = exc
            return
        self._pods = parse(raw, node=self.node, labels=self.labels, allow=self.allow)
        self._good_at, self.last_error = now, None


def parse(listing: Mapping, *, node: str, labels: bool,
          allow: Sequence[re.Pattern] = ()) -> dict[tuple[str, str], PodMeta]:
    """A ``PodList`` JSON -> (namespace, pod) -> :class:`PodMeta`, for pods on ``node`` only."""
    out = {}
    for item in listing.get("items") or ():
        meta = item.get("metadata") or {}
        if (item.get("spec") or {}).get("nodeName") != node:
            continue  # the field selector already did this; a stray item must not leak in
        names = pod_labels(meta.get("labels") or {}, allow) if labels else _NO_LABELS
        out[(meta.get("namespace", ""), meta.get("name", ""))] = PodMeta(meta.get("uid") or None, names)
    return out


def pod_labels(raw: Mapping[str, str], allow: Sequence[re.Pattern] = ()) -> Mapping[str, str]:
    """Pod label keys -> values, as Prometheus label names: allow-listed, sanitized, reserved dropped."""
    out: dict[str, str] = {}
    for key in sorted(raw):
        if allow and not any(pattern.search(key) for pattern in allow):
            continue
        name = sanitize_label_name(key)
        if name not in RESERVED_LABELS and name not in out:  # attributes win; then sort order
            out[name] = str(raw[key])
    return MappingProxyType(out)


def sanitize_label_name(key: str) -> str:
    """A label key as a Prometheus label name: ``app.kubernetes.io/name`` -> ``app_kubernetes_io_name``.

    Each character outside ``[a-zA-Z0-9_]`` becomes ``_`` (dcgm-exporter); a leading digit gets a ``_``.
    """
    name = _INVALID_CHAR.sub("_", key)
    return f"_{name}" if not name or name[0].isdigit() else name


def compile_allowlist(allowlist: str | None) -> tuple[re.Pattern, ...]:
    """Comma-separated regular expressions -> compiled patterns; () keeps every label."""
    out = []
    for pattern in filter(None, (p.strip() for p in (allowlist or "").split(","))):
        try:
            out.append(re.compile(pattern))
        except re.error as exc:
            raise UsageError(f"{ALLOWLIST_FLAG}: {pattern!r} is not a valid regular expression ({exc}); "
                             "give comma-separated patterns searched in pod label keys, "
                             r"e.g. '^app\.kubernetes\.io/,^team$'") from None
    return tuple(out)


@dataclass(frozen=True)
class ApiServer:
    """The Kubernetes API as the exporter reaches it: base URL, bearer-token file (re-read on each
    call: projected tokens rotate), CA bundle. Standard library only — the exporter image carries no
    Kubernetes client, and one GET is all it needs."""

    url: str
    token_file: str | None = None
    ca_file: str | None = None

    def get(self, path: str, query: Mapping[str, str], *, timeout: float) -> bytes:
        """The body of ``GET url+path?query`` (urllib's HTTPError / URLError / OSError on failure)."""
        headers = {"Accept": "application/json"}
        if self.token_file:
            with open(self.token_file) as f:
                headers["Authorization"] = "Bearer " + f.read().strip()
        request = urllib.request.Request(f"{self.url.rstrip('/')}{path}?{urllib.parse.urlencode(query)}",
                                         headers=headers)
        context = ssl.create_default_context(cafile=self.ca_file) if self.url.startswith("https") else None
        with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:
            return reply.read()


def in_cluster(env: Mapping[str, str] | None = None, account_dir: str = SERVICE_ACCOUNT_DIR) -> ApiServer | None:
    """The API server as a pod reaches it (``KUBERNETES_SERVICE_HOST``/``_PORT`` and the mounted
    service-account token and CA); None outside a pod."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return None
    host = f"[{host}]" if ":" in host else host
    return ApiServer(f"https://{host}:{port}", os.path.join(account_dir, "token"), os.path.join(account_dir, "ca.crt"))


def open_pod_metadata(*, node: str, labels: bool, allowlist: str | None, api_url: str | None = None) -> PodMetadata:
    """A :class:`PodMetadata` on the in-cluster service account, or on ``api_url`` (an
    unauthenticated endpoint such as ``kubectl proxy``, for running outside a pod). Raises
    :class:`UsageError` for a bad flag and :class:`KubePodsError` when neither is there."""
    compile_allowlist(allowlist)  # a bad flag is reported before any connection is tried
    _require_node(node)
    api = ApiServer(api_url) if api_url else in_cluster()
    if api is None:
        raise KubePodsError("error", "pod UID/labels need the Kubernetes API: in a pod, mount the service-account "
                            "token (automountServiceAccountToken: true); elsewhere pass --kubernetes-api URL "
                            "(e.g. kubectl proxy's http://127.0.0.1:8001)")
    if api.token_file and not os.path.exists(api.token_file):
        raise KubePodsError("error", f"no service-account token at {api.token_file}: set "
                            "automountServiceAccountToken: true on the exporter's pod")
    return PodMetadata(api, node=node, labels=labels, allowlist=allowlist)


def _require_node(node: str) -> str:
    if not node:
        raise UsageError("pod UID/labels need this node's name: --node-name, or $NODE_NAME set from "
                         "spec.nodeName (downward API)")
    return node


def _http_error(status: int, body: bytes, reason: str, where: str) -> KubePodsError:
    detail = _status_message(body) or reason
    if status == 403:
        return KubePodsError("forbidden", f"{where}: HTTP 403 {detail} — bind the exporter's "
                             f"service account to a ClusterRole with the rule {RBAC_RULE}")
    if status == 401:
        return KubePodsError("error", f"{where}: HTTP 401 {detail} — the API server rejected the "
                             "service-account token")
    kind = "unreachable" if status == 429 or status >= 500 else "error"
    return KubePodsError(kind, f"{where}: HTTP {status} {detail}")


def _status_message(body) -> str:
    try:
        return json.loads(body or b"{}").get("message", "")
    except (ValueError, AttributeError):
        return ""
