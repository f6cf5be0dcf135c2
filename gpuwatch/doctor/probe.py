"""What a Prometheus holds of each signal (gpuwatch/signals.py), per GPU node: the coverage frame of
analyses/signal_coverage.sql (node, signal, observed, expected, present), asked of Prometheus.

GPU nodes and their GPUs come from every dcgm-exporter / gpuwatch series seen in the lookback
(``last_over_time(...[lookback])`` at ``at``), with the readers' own label rules (ingest/series.py:
``hostname``/``Hostname``/``node``, else the scrape instance; ``UUID``/``uuid``). A GPU signal's
``observed`` is the GPUs of the node that serve it, ``expected`` the node's GPUs. A
kube-state-metrics signal's ``observed`` is the node's GPU pods (pods requesting ``nvidia.com/*``,
or attributed on a GPU series there) that have it, ``expected`` the node's GPU pods; a family with
no series at all is absent on every node. Cluster-wide signals (pending pods, teams) have node NULL;
prices live in a store, not in Prometheus: present NULL unless ``--db`` is given.
"""

from __future__ import annotations

from typing import Any

from gpuwatch import signals
from gpuwatch.ingest import prometheus
from gpuwatch.ingest.series import device_of, first, ksm_label, workload_of

NODE_LABELS = ("hostname", "Hostname", "node", "instance", "UUID", "uuid", "gpu_uuid")
POD_LABELS = ("namespace", "pod", "exported_namespace", "exported_pod", "node")
GPU_SOURCES = (signals.DCGM, signals.GPUWATCH)


def _regex(names: tuple[str, ...]) -> str:
    return "|".join(names)


def gpus(client: prometheus.Client, names: tuple[str, ...], *, at: float, lookback: str) -> dict[str, set]:
    """node -> GPU UUIDs serving any of ``names`` in the lookback."""
    query = f'count by ({",".join(NODE_LABELS)}) (last_over_time({{__name__=~"{_regex(names)}"}}[{lookback}]))'
    out: dict[str, set] = {}
    for labels, _, _ in client.query(query, at):
        device = device_of(labels)
        if device is not None:
            out.setdefault(device[0], set()).add(device[1])
    return out


def pods(client: prometheus.Client, name: str, *, at: float, lookback: str, by: tuple[str, ...] = ()) -> list[dict]:
    """The label sets of ``name``'s series in the lookback (by pod, plus ``by`` labels)."""
    query = f'count by ({",".join(POD_LABELS + by)}) (last_over_time({name}[{lookback}]))'
    return [labels for labels, _, _ in client.query(query, at)]


def _pod(labels: dict) -> tuple:
    """(namespace, pod) of a kube-state-metrics series (``exported_*`` under honorLabels: false)."""
    return first(labels, "exported_namespace", "namespace"), first(labels, "exported_pod", "pod")


def coverage(client: prometheus.Client, *, at: float, lookback: str = "1h", team_label: str = "team"):
    """The coverage frame (analyses/signal_coverage.sql's columns) of the Prometheus behind ``client``."""
    import pandas as pd

    gpu_signals = [s for s in signals.SIGNALS.values() if s.source in GPU_SOURCES]
    every = tuple(n for s in gpu_signals for n in s.series)
    fleet = gpus(client, every, at=at, lookback=lookback)
    gpu_pods = _gpu_pods(client, fleet, at=at, lookback=lookback)
    rows = []
    for signal in gpu_signals:
        found = gpus(client, signal.series, at=at, lookback=lookback)
        rows += [(node, signal.name, len(found.get(node, set()) & uuids), len(uuids)) for node, uuids in fleet.items()]
    for signal in (s for s in signals.SIGNALS.values() if s.source == signals.KSM and s.per_node):
        if signal.name == "ksm_nodes":  # about the node itself, not its pods
            labelled = {labels.get("node") for labels in pods(client, "kube_node_labels", at=at, lookback=lookback)}
            rows += [(node, signal.name, int(node in labelled), 1) for node in fleet]
            continue
        having = _having(client, signal, at=at, lookback=lookback)
        rows += [(node, signal.name, len(held & having), len(held)) for node, held in _by_node(fleet, gpu_pods).items()]
    all_pods = set().union(*gpu_pods.values()) if gpu_pods else set()
    created = {_pod(labels) for labels in pods(client, "kube_pod_created", at=at, lookback=lookback)}
    teams = _having(client, signals.SIGNALS["ksm_labels"], at=at, lookback=lookback, key=ksm_label(team_label))
    rows += [(None, "pending", len(created), len(created)),
             (None, "teams", len(all_pods & teams), len(all_pods))]
    frame = pd.DataFrame(rows, columns=["node", "signal", "observed", "expected"])
    frame["present"] = frame["observed"] > 0
    prices = pd.DataFrame([{"node": None, "signal": "prices", "observed": None, "expected": None, "present": None,
                            "note": "prices live in a store, not in Prometheus: add --db STORE"}])
    return pd.concat([frame, prices], ignore_index=True), fleet


def _gpu_pods(client: prometheus.Client, fleet: dict, *, at: float, lookback: str) -> dict[str, set]:
    """node -> (namespace, pod) of its GPU pods: KSM's GPU requests, and pods attributed on GPU series."""
    out: dict[str, set] = {}
    requests = 'kube_pod_container_resource_requests{resource=~"nvidia_com_.*"}'
    for labels in pods(client, requests, at=at, lookback=lookback):
        if labels.get("node") in fleet:
            out.setdefault(labels["node"], set()).add(_pod(labels))
    names = _regex(signals.SIGNALS["reported"].series)
    query = (f'count by ({",".join(NODE_LABELS + POD_LABELS + ("exported_container", "container"))}) '
             f'(last_over_time({{__name__=~"{names}"}}[{lookback}]))')
    for labels, _, _ in client.query(query, at):
        device, (ns, pod, _) = device_of(labels), workload_of(labels, _targets(labels))
        if device is not None and pod is not None:
            out.setdefault(device[0], set()).add((ns, pod))
    return out


def _targets(labels: dict) -> frozenset:
    """The scrape target's own pod where the workload sits in ``exported_*`` (never a workload)."""
    return frozenset({(labels.get("namespace"), labels.get("pod"))}) if labels.get("exported_pod") else frozenset()


def _by_node(fleet: dict, gpu_pods: dict) -> dict[str, set]:
    return {node: gpu_pods.get(node, set()) for node in fleet}


def _having(client: prometheus.Client, signal: signals.Signal, *, at: float, lookback: str, key: str = "") -> set:
    """(namespace, pod) of the pods with a series of ``signal`` (with a ``label_*`` where it needs one;
    with label ``key`` where given)."""
    out = set()
    for name in signal.series:
        query = f"last_over_time({name}[{lookback}])"
        for labels, _, _ in client.query(query, at):
            if key and not labels.get(key):
                continue
            if signal.label_prefix and not any(k.startswith(signal.label_prefix) and v for k, v in labels.items()):
                continue
            out.add(_pod(labels))
    return out


def nodes_of(fleet: dict) -> Any:
    """node -> GPUs, sorted."""
    return {node: len(uuids) for node, uuids in sorted(fleet.items())}
