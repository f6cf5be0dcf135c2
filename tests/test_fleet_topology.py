"""The topology ``build_fleet(topology=True)`` gives the simulated fleet (gpuwatch.fleet.layouts,
topology_plant, topology_scenes, topology_truth).

Checks: the fleet without topology is untouched (its devices but for their NUMA nodes, pods, segments,
states, truth but for the new column, health, failures and samples); every node's layout is complete
and symmetric and follows its documented board; every truth label holds by brute force against the
fleet's own pods file and states (independently of the planter's judge: plain enumeration here), at
the accuracy tests' size (64 GPUs, 2 days) and the demo's (64 GPUs, 7 days), with enough of each; the
pending pods' states follow the data contract; the new models' signals (no NVLink traffic on L40S);
deterministic in the seed.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from itertools import combinations, product

import numpy as np
import pytest

from gpuwatch import topology
from gpuwatch.fleet import GPU_SPECS, build_fleet, iter_samples
from gpuwatch.fleet.catalog import GPU_PRODUCT_LABEL, gpu_product

WHOLE = "nvidia.com/gpu"
EXTRA = {"NVIDIA L40S": 2, "NVIDIA H100 80GB HBM3": 1, "NVIDIA GB200": 2}


@pytest.fixture(scope="module")
def base():
    return build_fleet(gpus=64, seed=0, days=2, failures=True)


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=64, seed=0, days=2, failures=True, topology=True)


@pytest.fixture(scope="module")
def demo():
    return build_fleet(gpus=64, seed=0, days=7, failures=True, topology=True)


@pytest.fixture(scope="module", params=["64 GPUs x 2 days", "demo: 64 GPUs x 7 days"])
def judged(request, fleet, demo):
    return fleet if request.param.startswith("64") else demo


# -- brute force, from what the fleet publishes --------------------------------------------------

class View:
    """A fleet as the analyses see it: links and NUMA nodes by GPU UUID, each pod's GPUs and times."""

    def __init__(self, fleet):
        self.fleet = fleet
        self.rank = {frozenset((r["gpu_uuid"], r["peer_gpu_uuid"])): topology.rank(r["link"]) for r in fleet.topology}
        self.numa = {d.gpu_uuid: d.numa_node for d in fleet.devices}
        self.model = {d.node: d.gpu_model for d in fleet.devices}
        parent = {d.mig_uuid: d.gpu_uuid for d in fleet.devices if d.is_mig}
        self.gpus = [tuple(parent.get(g, g) for g in p.device_ids) for p in self.fleet.pods]
        not_whole = {d.gpu_uuid for d in fleet.devices if d.is_mig}
        not_whole |= {g for p, gpus in zip(fleet.pods, self.gpus, strict=True) if p.gpu_resource != WHOLE for g in gpus}
        self.whole = {}
        for d in fleet.devices:
            if d.gpu_uuid not in not_whole:
                self.whole.setdefault(d.node, set()).add(d.gpu_uuid)
        self.truth = {(r["namespace"], r["pod"]): r for r in fleet.truth}
        self.jobs = {(r["namespace"], r["pod"]): r["job"] for r in fleet.pod_status if r["job"]}

    def free(self, node: str, t: float, *, skip=()) -> set[str]:
        held = set()
        for i, p in enumerate(self.fleet.pods):
            end = self.fleet.end if p.end_ts is None else p.end_ts
            if p.node == node and i not in skip and p.start_ts <= t < end:
                held.update(self.gpus[i])
        return self.whole.get(node, set()) - held

    def quality(self, gpus) -> tuple[int, int]:
        worst = max((self.rank[frozenset(pair)] for pair in combinations(gpus, 2)), default=0)
        return worst, len({self.numa[g] for g in gpus})

    def best(self, gpus, k: int) -> tuple[int, int]:
        return min(self.quality(c) for c in combinations(sorted(gpus), k))

    def label(self, pod) -> str:
        return self.truth[(pod.namespace, pod.pod)]["topology"]


def _multi(view):
    return [(i, p) for i, p in enumerate(view.fleet.pods) if p.gpu_resource == WHOLE and len(set(p.device_ids)) >= 2]


def _jobs(view) -> dict[tuple[str, str], list[int]]:
    out: dict = {}
    for i, p in enumerate(view.fleet.pods):
        job = view.jobs.get((p.namespace, p.pod))
        if job and p.gpu_resource == WHOLE:
            out.setdefault((p.namespace, job), []).append(i)
    return {k: v for k, v in out.items() if len({view.fleet.pods[i].node for i in v}) > 1}


def _could_use_fewer_nodes(view, indices) -> bool:
    pods = [view.fleet.pods[i] for i in indices]
    start = min(p.start_ts for p in pods)
    pool = [n for n, m in view.model.items() if m == view.model[pods[0].node]]
    room = {n: len(view.free(n, start, skip=set(indices))) for n in pool}
    used = len({p.node for p in pods})
    for nodes in product(pool, repeat=len(pods)):
        need = Counter()
        for node, p in zip(nodes, pods, strict=True):
            need[node] += len(set(p.device_ids))
        if len(need) < used and all(need[n] <= room[n] for n in need):
            return True
    return False


def _waits(view) -> dict[tuple[str, str], list[dict]]:
    rows: dict = {}
    for r in view.fleet.pod_status:
        rows.setdefault((r["namespace"], r["pod"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["ts"]) for k, v in rows.items() if any(r["unschedulable"] == 1 for r in v)}


def _pool(view, selector: str) -> list[str]:
    product_ = json.loads(selector)[GPU_PRODUCT_LABEL]
    return [n for n, m in view.model.items() if gpu_product(m) == product_]


def _wait_minutes(view, rows) -> tuple[int, int]:
    """(minutes the pool had the request free in total but no node did, the most the pool had free)."""
    created, request = rows[0]["created_ts"], rows[0]["gpu_request"]
    until = next((r["ts"] for r in rows if r["phase"] != "Pending"), view.fleet.end)
    pool = _pool(view, rows[0]["node_selector"])
    blocked, most = 0, 0
    for t in np.arange(created, until, 60.0):
        counts = [len(view.free(n, float(t))) for n in pool]
        most = max(most, sum(counts))
        blocked += sum(counts) >= request and max(counts) < request
    return blocked, most


# -- the fleet without topology ---------------------------------------------------------------

def test_the_fleet_without_topology_is_untouched(base, fleet):
    n_dev, n_pods, n_seg = len(base.devices), len(base.pods), len(base.segments)
    assert not base.topology and {(d.numa_node, d.nvlink_clique) for d in base.devices} == {(None, None)}
    assert tuple(dataclasses.replace(d, numa_node=None, nvlink_clique=None) for d in fleet.devices[:n_dev]) == base.devices
    assert fleet.pods[:n_pods] == base.pods and fleet.segments[:n_seg] == base.segments
    assert fleet.pod_status[:len(base.pod_status)] == base.pod_status
    assert (fleet.health, fleet.failures) == (base.health, base.failures)
    assert [{k: v for k, v in row.items() if k != "topology"} for row in fleet.truth[:len(base.truth)]] == list(base.truth)
    grid = np.arange(base.start, base.end, 1800.0)
    for (_, _, ours), (_, _, theirs) in zip(iter_samples(fleet, grid), iter_samples(base, grid), strict=False):
        for name, values in theirs.items():
            np.testing.assert_array_equal(ours[name], values)


def test_extra_nodes_are_appended_with_their_own_generator(base, fleet):
    old = set(base.nodes())
    extra = Counter({d.node: d.gpu_model for d in fleet.devices if d.node not in old}.values())
    assert extra == EXTRA
    assert all(new > max(old) for new in set(fleet.nodes()) - old)
    other = build_fleet(gpus=64, seed=0, days=2, failures=False, topology=True)
    assert {d.gpu_uuid for d in other.devices} == {d.gpu_uuid for d in fleet.devices}


# -- layouts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("gpus", [64, 60])
def test_every_node_has_a_complete_symmetric_layout(gpus):
    fleet = build_fleet(gpus=gpus, seed=2, days=0.5, topology=True)
    for node in fleet.nodes():
        whole = sorted({(d.gpu_index, d.gpu_uuid) for d in fleet.devices if d.node == node})
        rows = [r for r in fleet.topology if r["node"] == node]
        pairs = [frozenset((r["gpu_uuid"], r["peer_gpu_uuid"])) for r in rows]
        assert len(pairs) == len(set(pairs)) == len(whole) * (len(whole) - 1) // 2, node
        for r in rows:
            topology.rank(r["link"])
            assert (r["nvlinks"] is not None) == (r["link"] == "NV") and r["nvlinks"] != 0
        uuids = [u for _, u in whole]
        layout = topology.Layout.build(uuids, [(r["gpu_uuid"], r["peer_gpu_uuid"], r["link"], r["nvlinks"]) for r in rows],
                                       {d.gpu_uuid: d.numa_node for d in fleet.devices if d.node == node})
        assert all(layout.ranks[i][j] is not None and layout.ranks[i][j] == layout.ranks[j][i]
                   for i, j in combinations(range(layout.size), 2))
        assert None not in layout.numa
    if gpus == 60:
        assert len({d.gpu_index for d in fleet.devices if d.node == "gpu-node-007"}) == 4


def _links_by_index(fleet, node) -> dict[tuple[int, int], str]:
    index = {d.gpu_uuid: d.gpu_index for d in fleet.devices if d.node == node}
    return {tuple(sorted((index[r["gpu_uuid"]], index[r["peer_gpu_uuid"]]))): topology.label(r["link"], r["nvlinks"])
            for r in fleet.topology if r["node"] == node}


def test_layouts_follow_the_documented_boards(fleet):
    by_model: dict[str, list[str]] = {}
    for d in fleet.devices:
        if d.node not in by_model.setdefault(d.gpu_model, []):
            by_model[d.gpu_model].append(d.node)
    for model, label, expected_numa in (("NVIDIA H100 80GB HBM3", "NV18", (0, 0, 0, 0, 1, 1, 1, 1)),
                                        ("NVIDIA A100-SXM4-80GB", "NV12", (0, 0, 0, 0, 1, 1, 1, 1)),
                                        ("NVIDIA GB200", "NV18", (0, 0, 1, 1))):
        for node in by_model[model]:
            assert set(_links_by_index(fleet, node).values()) == {label}, node
            per_gpu = {d.gpu_index: d.numa_node for d in fleet.devices if d.node == node}
            assert tuple(per_gpu[i] for i in sorted(per_gpu)) == expected_numa, node
    l40s = by_model["NVIDIA L40S"][0]
    links = _links_by_index(fleet, l40s)
    assert {p for p, v in links.items() if v == "PIX"} == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert {p for p, v in links.items() if v == "PXB"} == {(0, 2), (0, 3), (1, 2), (1, 3)}
    assert {p for p, v in links.items() if v == "NODE"} == {(4, 6), (4, 7), (5, 6), (5, 7)}
    assert {p for p, v in links.items() if v == "SYS"} == {(i, j) for i in range(4) for j in range(4, 8)}
    assert [d.numa_node for d in sorted((d for d in fleet.devices if d.node == l40s), key=lambda d: d.gpu_index)] == \
        [0, 0, 0, 0, 1, 1, 1, 1]
    cliques = {d.node: d.nvlink_clique for d in fleet.devices}
    racks = {cliques[n] for n in by_model["NVIDIA GB200"]}
    assert len(racks) == 1 and None not in racks and "/" in next(iter(racks))
    assert {c for n, c in cliques.items() if n not in by_model["NVIDIA GB200"]} == {None}


# -- truth, by brute force --------------------------------------------------------------------

def test_placement_labels_hold_by_brute_force(judged):
    view = View(judged)
    for i, pod in _multi(view):
        label = view.label(pod)
        if label in ("spread", "blocked", "full"):  # a job's or a wait's verdict, checked below
            continue
        free = view.free(pod.node, pod.start_ts, skip={i}) | set(view.gpus[i])
        better = view.best(free, len(set(view.gpus[i]))) < view.quality(set(view.gpus[i]))
        assert label == ("misplaced" if better else "well_placed"), (pod.pod, label)
    labelled = {view.label(p) for i, p in enumerate(judged.pods) if (i, p) not in _multi(view)}
    assert labelled <= {"", "spread", "blocked", "full"}


def test_spread_labels_hold_by_brute_force(judged):
    view = View(judged)
    jobs = _jobs(view)
    assert jobs
    for members in jobs.values():
        labels = {view.label(judged.pods[i]) for i in members}
        if _could_use_fewer_nodes(view, members):
            assert labels == {"spread"}
        else:
            assert "spread" not in labels and labels <= {"well_placed", "misplaced", "blocked"}
    assert all(i in {j for m in jobs.values() for j in m} for i, p in enumerate(judged.pods) if view.label(p) == "spread")


def test_pending_labels_hold_by_brute_force(judged):
    view = View(judged)
    waits = _waits(view)
    assert waits
    for key, rows in waits.items():
        blocked, most = _wait_minutes(view, rows)
        label = view.truth[key]["topology"]
        assert label in ("blocked", "full"), key
        if label == "blocked":
            assert blocked >= 30, key
        else:
            assert most < rows[0]["gpu_request"] and blocked == 0, key
    assert {k for k, r in view.truth.items() if r["topology"] in ("blocked", "full")} == set(waits)


def test_enough_of_every_label(judged):
    view = View(judged)
    ideal = {}
    labels = Counter(r["topology"] for r in judged.truth)
    decoys = 0
    for i, pod in _multi(view):
        k = len(set(view.gpus[i]))
        if (pod.node, k) not in ideal:
            ideal[(pod.node, k)] = view.best(view.whole[pod.node], k)
        decoys += view.label(pod) == "well_placed" and view.quality(set(view.gpus[i])) > ideal[(pod.node, k)]
    jobs = _jobs(view)
    spread = sum({view.label(judged.pods[i]) for i in m} == {"spread"} for m in jobs.values())
    spread_decoys = sum({view.label(judged.pods[i]) for i in m} == {"well_placed"} for m in jobs.values())
    assert labels["misplaced"] >= 6 and decoys >= 4, (labels, decoys)
    assert spread >= 3 and spread_decoys >= 2, (spread, spread_decoys)
    assert labels["blocked"] >= 4 and labels["full"] >= 2, labels
    pending = [r for r in judged.truth if r["behavior"] == "pending"]
    assert {(r["placement"], r["topology"] in ("blocked", "full")) for r in pending} == {("none", True)}


def test_pending_pods_states_follow_the_contract(judged):
    view = View(judged)
    pods = {(p.namespace, p.pod): p for p in judged.pods}
    stayed = 0
    for key, rows in _waits(view).items():
        first = rows[0]
        assert (first["phase"], first["unschedulable"], first["ts"]) == ("Pending", 1, first["created_ts"])
        assert first["scheduled_ts"] is None and {r["gpu_resource"] for r in rows} == {WHOLE}
        assert {r["node_selector"] for r in rows} == {first["node_selector"]} and {r["job"] for r in rows} != {None}
        running = [r for r in rows if r["phase"] == "Running"]
        if not running:
            stayed += 1
            assert key not in pods and [r["phase"] for r in rows] == ["Pending"]
            continue
        pod = pods[key]
        assert running[0]["scheduled_ts"] == running[0]["ts"] == pod.start_ts > first["created_ts"]
        assert pod.node in _pool(view, first["node_selector"]) and pod.gpu_count == first["gpu_request"]
        assert pod.owner_name == first["job"]
    assert stayed >= 1


def test_multi_pod_jobs_share_their_job_label_and_owner(judged):
    view = View(judged)
    for (_, job), members in _jobs(view).items():
        assert {judged.pods[i].owner_name for i in members} == {job}


# -- signals ----------------------------------------------------------------------------------

def test_new_models_produce_their_samples(fleet):
    models = {d.gpu_model for d in fleet.devices}
    assert {"NVIDIA L40S", "NVIDIA GB200"} <= models
    grid = np.arange(fleet.start, fleet.end, 300.0)
    nvlink: dict[str, float] = {}
    for seg, _, cols in iter_samples(fleet, grid):
        device = fleet.devices[seg.device]
        spec = GPU_SPECS[device.gpu_model]
        if device.gpu_model in ("NVIDIA L40S", "NVIDIA GB200"):
            assert spec["idle_w"] <= cols["power_watts"].min() and cols["power_watts"].max() <= spec["tdp_w"]
            assert cols["fb_used_bytes"].max() <= device.fb_total_bytes and not np.isnan(cols["gpu_util"]).any()
        if seg.multi_gpu and seg.kind == "training":
            nvlink[device.gpu_model] = max(nvlink.get(device.gpu_model, 0.0), float(np.max(cols["nvlink_tx_bytes_per_second"])))
    assert nvlink["NVIDIA L40S"] == 0.0
    assert nvlink["NVIDIA GB200"] > 0 and nvlink["NVIDIA H100 80GB HBM3"] > 0


# -- determinism ------------------------------------------------------------------------------

def test_same_seed_same_topology_other_seed_other():
    again = build_fleet(gpus=16, seed=4, days=2, topology=True)
    assert again == build_fleet(gpus=16, seed=4, days=2, topology=True)
    other = build_fleet(gpus=16, seed=5, days=2, topology=True)
    assert [p.start_ts for p in other.pods[-30:]] != [p.start_ts for p in again.pods[-30:]]


def test_a_short_trace_plants_what_fits():
    fleet = build_fleet(gpus=8, seed=0, days=0.25, topology=True)
    assert Counter(d.gpu_model for d in fleet.devices)["NVIDIA L40S"] == 16
    labels = Counter(r["topology"] for r in fleet.truth)
    assert set(labels) <= {"", "well_placed", "misplaced", "blocked", "full", "spread"}
    assert labels["misplaced"] == 1 and labels["blocked"] == labels["full"] == 1  # one HGX scene, two waiters to the end
