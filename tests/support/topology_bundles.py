"""Hand-built topology bundles for the placement, capacity and blocked-demand tests.

The layouts follow documented designs (not captures of a real machine): an 8x L40S-like PCIe server
(two PCIe switches per socket: PIX inside a switch, NODE across switches of one socket, SYS across
sockets), an HGX H100-like board (8 GPUs on NVSwitch, NV18 every pair, NUMA 0: GPUs 0-3, NUMA 1:
4-7), an A100 HGX (NV12), and a node with no topology rows at all (unknown).
"""

from __future__ import annotations

import json
from itertools import combinations

import pandas as pd

from gpuwatch import store
from gpuwatch.analyses.params import params

T0 = pd.Timestamp("2026-03-02T00:00:00")
WINDOW = (T0.to_pydatetime(), (T0 + pd.Timedelta(hours=6)).to_pydatetime())
H100, L40S, A100, L4 = "NVIDIA H100 80GB HBM3", "NVIDIA L40S", "NVIDIA A100-SXM4-80GB", "NVIDIA L4"
PRICES = {H100: 4.0, L40S: 1.5, A100: 3.0, L4: 0.8}


def minutes(m: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(minutes=m)


def uuid(node: str, i: int) -> str:
    return f"GPU-{node}-{i}"


def pcie_link(i: int, j: int) -> str:
    """L40S-like: switches {0,1} {2,3} on socket 0, {4,5} {6,7} on socket 1."""
    if i // 4 != j // 4:
        return "SYS"
    return "PIX" if i // 2 == j // 2 else "NODE"


class Bundle:
    """Frames of a bundle under construction."""

    def __init__(self):
        self.devices, self.topology, self.pods, self.status, self.nodes = [], [], [], [], []

    def node(self, name: str, model: str, gpus: int, *, link=None, nvlinks: int | None = None, numa=None,
             labels: dict | None = None) -> Bundle:
        for i in range(gpus):
            self.devices.append({"node": name, "gpu_uuid": uuid(name, i), "gpu_index": i, "gpu_model": model,
                                 "fb_total_bytes": 80 * 2**30, "numa_node": None if numa is None else numa(i)})
        if link is not None:
            for i, j in combinations(range(gpus), 2):
                kind = link(i, j)
                self.topology.append({"node": name, "gpu_uuid": uuid(name, i), "peer_gpu_uuid": uuid(name, j),
                                      "link": kind, "nvlinks": nvlinks if kind == "NV" else None})
        self.nodes.append({"node": name, "labels": json.dumps(labels or {})})
        return self

    def pod(self, name: str, node: str, gpus: list[int], start: float, end: float | None, *, namespace: str = "ml",
            job: str | None = None, resource: str = "nvidia.com/gpu") -> Bundle:
        self.pods.append({"namespace": namespace, "pod": name, "node": node, "owner_kind": "Job" if job else "",
                          "owner_name": job or "", "start_ts": minutes(start),
                          "end_ts": None if end is None else minutes(end), "gpu_resource": resource,
                          "gpu_count": float(len(gpus)), "device_ids": ",".join(uuid(node, i) for i in gpus)})
        return self

    def pending(self, name: str, gpus: int, start: float, until: float | None, *, selector: dict | None = None,
                job: str | None = None, namespace: str = "ml") -> Bundle:
        base = {"namespace": namespace, "pod": name, "container": "main", "job": job, "gpu_request": float(gpus),
                "created_ts": minutes(start), "gpu_resource": "nvidia.com/gpu",
                "node_selector": json.dumps(selector) if selector else None}
        self.status.append({**base, "ts": minutes(start), "phase": "Pending", "unschedulable": 1})
        if until is not None:
            self.status.append({**base, "ts": minutes(until), "phase": "Running", "unschedulable": 0,
                                "scheduled_ts": minutes(until)})
        return self

    def observed(self) -> list[dict]:
        """A device-level sample on each node's first GPU every 5 minutes of the window: the nodes were
        observed (schedulable capacity judges a node only while it was; before that its GPUs are unknown)."""
        first = {}
        for d in self.devices:
            first.setdefault(d["node"], d["gpu_uuid"])
        return [{"ts": minutes(m), "node": node, "gpu_uuid": gpu, "gpu_util": 0.5}
                for node, gpu in first.items() for m in range(0, 360, 5)]

    def frames(self) -> dict[str, pd.DataFrame]:
        out = {"devices": pd.DataFrame(self.devices), "nodes": pd.DataFrame(self.nodes),
               "prices": pd.DataFrame({"gpu_model": list(PRICES), "usd_per_gpu_hour": list(PRICES.values())}),
               "samples": pd.DataFrame(self.observed())}
        for name, rows in (("topology", self.topology), ("pods", self.pods), ("pod_status", self.status)):
            if rows:
                out[name] = pd.DataFrame(rows)
        return out

    def load(self, **overrides):
        con = store.connect(None)
        store.load(con, self.frames(), source="test")
        return con, params(*WINDOW, **overrides)


def hgx(b: Bundle, name: str, model: str = H100, nvlinks: int = 18) -> Bundle:
    return b.node(name, model, 8, link=lambda i, j: "NV", nvlinks=nvlinks, numa=lambda i: i // 4)


def pcie(b: Bundle, name: str) -> Bundle:
    return b.node(name, L40S, 8, link=pcie_link, numa=lambda i: i // 4)


def placement_bundle() -> Bundle:
    """Every placement case of tests/test_topology_placement.py."""
    b = Bundle()
    # misplaced: GPUs 0 and 4 (SYS) while 2,3 (PIX) were free when it started
    pcie(b, "pcie-1").pod("pcie-bad", "pcie-1", [0, 4], 10, 190)
    # decoy: the same GPUs, but every other GPU was held when it started (freed 50 min later)
    pcie(b, "pcie-2").pod("pcie-filler", "pcie-2", [1, 2, 3, 5, 6, 7], 0, 60).pod("pcie-ok", "pcie-2", [0, 4], 10, 190)
    # HGX NUMA split: 2,3,4,5 while 0-3 (one NUMA node) could have been had
    hgx(b, "hgx-1").pod("numa-split", "hgx-1", [2, 3, 4, 5], 0, 120)
    # spread job: 2 x 4 GPUs on two empty HGX nodes (one node could hold both)
    hgx(b, "hgx-2").pod("ddp-0", "hgx-2", [0, 1, 2, 3], 200, 320, job="ddp")
    hgx(b, "hgx-3").pod("ddp-1", "hgx-3", [0, 1, 2, 3], 200, 320, job="ddp")
    # decoy job: 2 x 4 GPUs on two A100 nodes whose other halves were held: two nodes were needed
    hgx(b, "a100-1", A100, 12).pod("a-fill-1", "a100-1", [4, 5, 6, 7], 0, None)
    hgx(b, "a100-2", A100, 12).pod("a-fill-2", "a100-2", [4, 5, 6, 7], 0, None)
    b.pod("ok-0", "a100-1", [0, 1, 2, 3], 30, 300, job="ok").pod("ok-1", "a100-2", [0, 1, 2, 3], 30, 300, job="ok")
    # unknown topology: no link rows for this node
    b.node("dark-1", L4, 4).pod("dark", "dark-1", [0, 1], 0, 100)
    return b


def blocked_bundle() -> Bundle:
    """Two 4-GPU L4 nodes each half held; pending pods that need 4, 8, another pool, a 2x2 gang."""
    b = Bundle()
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4"}
    for name in ("blk-1", "blk-2"):
        b.node(name, L4, 4, link=lambda i, j: "PIX" if i // 2 == j // 2 else "SYS", numa=lambda i: i // 2,
               labels=labels)
    b.pod("f1", "blk-1", [0, 1], 0, 240).pod("f2a", "blk-2", [0], 0, 240).pod("f2b", "blk-2", [2], 0, 240)
    b.pending("wants-4", 4, 5, 120, selector=labels)            # 4 free in the pool, 2 per node: blocked
    b.pending("wants-8", 8, 5, 120, selector=labels)            # never 8 free: insufficient capacity
    b.pending("wants-h200", 2, 5, 120, selector={"nvidia.com/gpu.product": "NVIDIA-H200"})  # no such nodes
    b.pending("gang-0", 2, 5, 60, job="gang").pending("gang-1", 2, 5, 60, job="gang")  # 2 x 2 fits: not GPUs
    return b
