"""The Kubernetes API edge: the only module that imports ``kubernetes`` (lazily).

Reads return plain JSON dicts (``_preload_content=False``), so parsing stays pure and testable.
Every call goes through ``Cluster.call``: 5xx, 429 on reads, timeouts and refused connections are
retried with exponential backoff (the sleep is injectable), then raised as ``Unreachable``; 409 is
raised as ``Conflict`` for the caller to re-read and retry; 404 on a read is ``None``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"
# kind -> (API class, method suffix) for the built-in kinds the controller reads or writes.
TYPED = {
    "Pod": ("CoreV1Api", "namespaced_pod"), "Namespace": ("CoreV1Api", "namespace"),
    "ReplicaSet": ("AppsV1Api", "namespaced_replica_set"),
    "Deployment": ("AppsV1Api", "namespaced_deployment"),
    "StatefulSet": ("AppsV1Api", "namespaced_stateful_set"),
    "Job": ("BatchV1Api", "namespaced_job"), "Lease": ("CoordinationV1Api", "namespaced_lease"),
}
# kind -> (group, version, plural) for custom resources (more come from the policy's custom_kinds).
CUSTOM = {"Notebook": ("kubeflow.org", "v1", "notebooks"), "RayCluster": ("ray.io", "v1", "rayclusters")}


class KubeError(Exception):
    """An API call that failed in a way the caller must handle; ``.status`` is the HTTP code."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class Unreachable(KubeError):
    """The API server could not be reached (or kept failing) after retries."""


class Conflict(KubeError):
    """409: the object changed since it was read (resourceVersion) or already exists."""


class Refused(KubeError):
    """429 on an eviction: a PodDisruptionBudget allows no disruption now."""


def connect(*, host: str | None = None, kubeconfig: str | None = None, context: str | None = None,
            in_cluster: bool = False, timeout_seconds: float = 10.0,
            sleep: Callable[[float], None] = time.sleep) -> Cluster:
    """A Cluster from an explicit host (tests, ``kubectl proxy``), in-cluster config or kubeconfig."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if host:
            cfg.host = host
        elif in_cluster or (not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST")):
            config.load_incluster_config(client_configuration=cfg)  # running in a pod
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (config.ConfigException, OSError, TypeError) as exc:
        raise Unreachable(f"no Kubernetes configuration: {exc}") from exc
    cfg.retries = 0  # our own retry loop decides (and logs) what is retried
    return Cluster(client.ApiClient(cfg), timeout_seconds=timeout_seconds, sleep=sleep)


class Cluster:
    """Thin, retrying access to the API objects the controller touches."""

    def __init__(self, api_client: Any, *, timeout_seconds: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep, attempts: int = 4,
                 backoff_seconds: float = 0.5, custom: dict | None = None):
        from kubernetes import client

        self.client, self.api_client = client, api_client
        self.timeout_seconds, self.sleep = timeout_seconds, sleep
        self.attempts, self.backoff_seconds = attempts, backoff_seconds
        self.custom = {**CUSTOM, **(custom or {})}

    def call(self, method: Callable, *args: Any, **kwargs: Any) -> dict | None:
        """Call a typed API method; decode JSON; retry what is worth retrying."""
        from kubernetes.client import ApiException
        from urllib3.exceptions import HTTPError

        delay = self.backoff_seconds
        for attempt in range(1, self.attempts + 1):
            try:
                response = method(*args, _preload_content=False,
                                  _request_timeout=self.timeout_seconds, **kwargs)
                return json.loads(response.data or b"null")
            except ApiException as exc:
                retry = _classify(exc, method.__name__)
                problem = f"HTTP {exc.status} {exc.reason}"
            except (HTTPError, OSError) as exc:
                retry, problem = True, f"{type(exc).__name__}: {exc}"
            if attempt < self.attempts and retry:
                log.warning("%s failed (%s); retry %d in %.1fs", method.__name__, problem, attempt, delay)
                self.sleep(delay)
                delay *= 2
        raise Unreachable(f"{method.__name__}: {problem} after {self.attempts} attempts")

    def api(self, name: str) -> Any:
        return getattr(self.client, name)(self.api_client)

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        """GET one object; None when it does not exist."""
        try:
            if kind == "Namespace":
                return self.call(self.api("CoreV1Api").read_namespace, name)
            if kind in TYPED:
                api, suffix = TYPED[kind]
                return self.call(getattr(self.api(api), f"read_{suffix}"), name, namespace)
            group, version, plural = self._custom(kind)
            return self.call(self.api("CustomObjectsApi").get_namespaced_custom_object,
                             group, version, namespace, plural, name)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def pods(self, namespace: str) -> list[dict]:
        """Every pod in a namespace (raw JSON items)."""
        listing = self.call(self.api("CoreV1Api").list_namespaced_pod, namespace)
        return (listing or {}).get("items", [])

    def patch(self, kind: str, namespace: str, name: str, body: dict) -> dict:
        """JSON merge patch (``metadata.resourceVersion`` in ``body`` makes it conditional)."""
        if kind in TYPED:
            api, suffix = TYPED[kind]
            return self.call(getattr(self.api(api), f"patch_{suffix}"), name, namespace, body,
                             _content_type=MERGE_PATCH)
        group, version, plural = self._custom(kind)
        return self.call(self.api("CustomObjectsApi").patch_namespaced_custom_object, group,
                         version, namespace, plural, name, body, _content_type=MERGE_PATCH)

    def evict(self, namespace: str, name: str) -> None:
        """POST the policy/v1 Eviction; PodDisruptionBudgets are honoured by the server."""
        body = self.client.V1Eviction(api_version="policy/v1", kind="Eviction",
                                      metadata=self.client.V1ObjectMeta(name=name, namespace=namespace))
        self.call(self.api("CoreV1Api").create_namespaced_pod_eviction, name, namespace, body)

    def event(self, namespace: str, involved: dict, *, reason: str, message: str,
              kind: str = "Normal", now: str) -> None:
        """Record a core/v1 Event on ``involved`` (kind, name, uid, apiVersion)."""
        body = self.client.CoreV1Event.from_dict({
            "metadata": {"generateName": f"{involved['name']}.gpuwatch-", "namespace": namespace},
            "involvedObject": {**involved, "namespace": namespace}, "reason": reason,
            "message": message[:1024], "type": kind, "firstTimestamp": now, "lastTimestamp": now,
            "count": 1, "source": {"component": "gpuwatch-reclaim"},
            "reportingComponent": "gpuwatch.io/reclaim"})
        self.call(self.api("CoreV1Api").create_namespaced_event, namespace, body)

    def lease_create(self, namespace: str, body: dict) -> dict:
        api = self.api("CoordinationV1Api")
        return self.call(api.create_namespaced_lease, namespace, self.client.V1Lease.from_dict(body))

    def lease_replace(self, namespace: str, name: str, body: dict) -> dict:
        api = self.api("CoordinationV1Api")
        return self.call(api.replace_namespaced_lease, name, namespace, self.client.V1Lease.from_dict(body))

    def _custom(self, kind: str) -> tuple[str, str, str]:
        if kind not in self.custom:
            raise KubeError(f"no API known for kind {kind!r} (add it to policy custom_kinds)")
        return self.custom[kind]


def _classify(exc: Any, method: str) -> bool:
    """Raise what the caller must see; return True when the failure is worth retrying."""
    status = exc.status or 0
    if status == 409:
        raise Conflict(_message(exc), 409)
    if status == 429 and "eviction" in method:
        raise Refused(_message(exc), 429)
    if status >= 500 or status == 429:
        return True
    raise KubeError(f"HTTP {status}: {_message(exc)}", status)


def _message(exc: Any) -> str:
    try:
        return json.loads(exc.body).get("message") or str(exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)
