"""The reclaim controller: the only part of gpuwatch that writes to the Kubernetes API.

Shape (idle-culler's, split in two): ``plan.plan(findings, pods, policy, now)`` is pure and
decides; ``apply.apply(actions, cluster, dry_run=True)`` is the one writer. State lives in
annotations on the cluster objects, so a restarted controller picks up where it stopped.
Nothing here is imported at ``gpuwatch`` import time; ``kubernetes`` is imported lazily by
``kube.py`` only.
"""

from __future__ import annotations

# Annotation and label keys: the controller's whole persistent state on the cluster.
OPT_IN_LABEL = "gpuwatch.io/reclaim"  # namespace label; value "enabled" opts the namespace in
EXEMPT_ANNOTATION = "gpuwatch.io/reclaim"  # pod/owner annotation; value "never" exempts it
WARNING_ANNOTATION = "gpuwatch.io/reclaim-warning"  # pod annotation: RFC 3339 time of the warning
RECLAIMED_ANNOTATION = "gpuwatch.io/reclaimed-at"  # owner annotation: RFC 3339 time of the action
PREVIOUS_REPLICAS_ANNOTATION = "gpuwatch.io/reclaim-previous-replicas"
KUBEFLOW_STOP_ANNOTATION = "kubeflow-resource-stopped"  # Kubeflow's own: its controller scales to 0
