"""Leader election through a ``coordination.k8s.io/v1`` Lease, so two replicas never both act.

The lease is taken or renewed with a conditional write (``resourceVersion``): of two replicas
racing for an expired lease, the API server lets exactly one win (the other gets 409).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuwatch.reclaim.kube import Conflict, KubeError
from gpuwatch.reclaim.records import as_utc

log = logging.getLogger(__name__)


@dataclass
class Elector:
    """``elect(now) -> bool``: hold (take, renew) the lease, or learn that someone else holds it."""

    cluster: object
    namespace: str
    name: str
    identity: str
    lease_seconds: int = 60

    def elect(self, now: datetime) -> bool:
        try:
            lease = self.cluster.read("Lease", self.namespace, self.name)
            if lease is None:
                self.cluster.lease_create(self.namespace, self._body(None, now))
                return True
            spec = lease.get("spec") or {}
            if not self._free(spec, now):
                log.info("not the leader: lease %s/%s held by %s", self.namespace, self.name,
                         spec.get("holderIdentity"))
                return False
            self.cluster.lease_replace(self.namespace, self.name, self._body(lease, now))
            return True
        except Conflict:
            log.info("lost the race for lease %s/%s", self.namespace, self.name)
            return False
        except KubeError as exc:
            log.error("leader election failed, acting as follower: %s", exc)
            return False

    def _free(self, spec: dict, now: datetime) -> bool:
        holder = spec.get("holderIdentity")
        renewed = as_utc(spec.get("renewTime"))
        if not holder or holder == self.identity or renewed is None:
            return True
        return now >= renewed + timedelta(seconds=spec.get("leaseDurationSeconds") or self.lease_seconds)

    def _body(self, lease: dict | None, now: datetime) -> dict:
        spec = (lease or {}).get("spec") or {}
        mine = spec.get("holderIdentity") == self.identity
        # MicroTime must carry 6 fraction digits, but the client serialises via isoformat(), which
        # drops a zero fraction: nudge a whole second by 1 µs so the API server can parse it.
        stamp = (now if now.microsecond else now.replace(microsecond=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        metadata = {"name": self.name, "namespace": self.namespace}
        if lease:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                         "acquireTime": spec.get("acquireTime") if mine else stamp, "renewTime": stamp,
                         "leaseTransitions": (spec.get("leaseTransitions") or 0) + (0 if mine or not lease else 1)}}
