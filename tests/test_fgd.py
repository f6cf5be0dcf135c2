"""fragmentation_fgd (docs/architecture.md#finding-semantics, Weng et al. ATC'23) against an independent brute-force FGD: a
task type "fits" a node when some k-subset of its GPUs can each take d, and the fragment is the
free share outside every GPU such a subset could use. Checked on random small clusters and on
the REAL Alibaba openb trace (pods running at one instant packed first-fit onto its GPU nodes),
both through a real DuckDB store and gpuwatch.analyses.
"""

from __future__ import annotations

import csv
import itertools
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuwatch import analyses, store
from gpuwatch import fleet as workloads
from gpuwatch.analyses.fragmentation_fgd import FLEET, TaskType, node_fragment
from gpuwatch.fleet import command as simulate
from gpuwatch.model import BUNDLE_COLUMNS

BASE = 1_700_000_000.0  # trace seconds are relative; anchor them at a fixed epoch


def brute_fragment(free: list[int], tasks: Counter) -> float:
    """Expected milli-GPU no task can use, by trying every k-subset of the node's GPUs."""
    total = sum(tasks.values())
    out = 0.0
    for (k, d), n in tasks.items():
        usable = set()
        for combo in itertools.combinations(range(len(free)), k):
            if all(free[g] >= d for g in combo):
                usable.update(combo)
        out += n / total * (sum(free) - sum(free[g] for g in usable))
    return out


@dataclass
class Cluster:
    """GPU nodes (name -> model, gpus) and pods placed on them first-fit."""

    nodes: dict[str, tuple[str, int]]
    free: dict[str, list[int]] = field(default_factory=dict)
    pods: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.free = {n: [1000] * g for n, (_, g) in self.nodes.items()}

    def place(self, name: str, k: int, d: int, *, start: float, end: float | None, running: bool) -> bool:
        """First fit: the first node with k GPUs that each have d free (a running pod takes them)."""
        ids = ""
        if running:
            spot = next(((n, [g for g, r in enumerate(f) if r >= d][:k]) for n, f in self.free.items()
                         if sum(r >= d for r in f) >= k), None)
            if spot is None:
                return False
            node, gpus = spot
            for g in gpus:
                self.free[node][g] -= d
            ids = ",".join(f"{node}-gpu{g}" for g in gpus)
        self.pods.append({"namespace": "openb", "pod": name, "node": node if running else None,
                          "start_ts": pd.Timestamp(BASE + start, unit="s", tz="UTC"),
                          "end_ts": None if end is None else pd.Timestamp(BASE + end, unit="s", tz="UTC"),
                          "gpu_resource": "nvidia.com/gpu" if d == 1000 else "nvidia.com/gpu.shared",
                          "gpu_count": k * d / 1000, "device_ids": ids})
        return True

    def frames(self) -> dict[str, pd.DataFrame]:
        devices = [{"node": n, "gpu_uuid": f"{n}-gpu{g}", "gpu_index": g, "gpu_model": model}
                   for n, (model, count) in self.nodes.items() for g in range(count)]
        return {"devices": pd.DataFrame(devices, columns=list(BUNDLE_COLUMNS["devices"])),
                "pods": pd.DataFrame(self.pods, columns=list(BUNDLE_COLUMNS["pods"]))}

    def task_mix(self) -> Counter:
        return Counter((max(1, round(p["gpu_count"])) if p["gpu_count"] >= 1 else 1,
                        1000 if p["gpu_count"] >= 1 else round(p["gpu_count"] * 1000)) for p in self.pods)


def analyse(cluster: Cluster, *, end: float) -> pd.DataFrame:
    con = store.connect(None)
    store.load(con, cluster.frames(), source="test")
    return analyses.run(con, "fragmentation_fgd", start=pd.Timestamp(BASE, unit="s").to_pydatetime(),
                        end=pd.Timestamp(BASE + end, unit="s").to_pydatetime())


def check_against_brute(cluster: Cluster, got: pd.DataFrame) -> None:
    mix = cluster.task_mix()
    nodes = got[got["node"] != FLEET].set_index("node")
    assert set(nodes.index) == set(cluster.nodes)
    for node, free in cluster.free.items():
        assert nodes.loc[node, "free_gpu_share"] == pytest.approx(sum(free) / 1000)
        assert nodes.loc[node, "fragmented_gpu_share"] == pytest.approx(brute_fragment(free, mix) / 1000)
    fleet = got[got["node"] == FLEET].iloc[0]
    free_total = sum(map(sum, cluster.free.values()))
    expected = sum(brute_fragment(f, mix) for f in cluster.free.values()) / free_total if free_total else None
    if expected is None:
        assert pd.isna(fleet["fragmentation_ratio"])
    else:
        assert 0.0 <= fleet["fragmentation_ratio"] <= 1.0
        assert fleet["fragmentation_ratio"] == pytest.approx(expected, abs=1e-9)


pod_shapes = st.one_of(st.tuples(st.sampled_from([1, 2, 4]), st.just(1000)),
                       st.tuples(st.just(1), st.integers(1, 19).map(lambda x: x * 50)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4),
       st.lists(st.tuples(pod_shapes, st.booleans()), min_size=1, max_size=30))
@example([1], [((1, 1000), False)] * 5 + [((2, 1000), False)] * 2 + [((4, 1000), False)] * 2
         + [((1, 250), True), ((1, 550), True)])  # all free share fragmented: float sum once gave 1.0000000000000002
def test_random_clusters_match_brute_force(gpus_per_node, pods):
    cluster = Cluster({f"n{i}": ("G2", g) for i, g in enumerate(gpus_per_node)})
    for i, ((k, d), running) in enumerate(pods):
        # finished pods count in the task mix but hold nothing at the window's end
        if not cluster.place(f"p{i}", k, d, start=10.0 * i, end=None if running else 10.0 * i + 5, running=running):
            cluster.place(f"p{i}", k, d, start=10.0 * i, end=10.0 * i + 5, running=False)
    check_against_brute(cluster, analyse(cluster, end=10.0 * len(pods) + 10))


def test_formula_cases_from_the_paper():
    # a node with GPUs free 1000, 500, 200: a whole-GPU task wastes the two partial ones
    assert node_fragment([(1000, "A"), (500, "A"), (200, "A")], [TaskType(1, 1000)]) == 700
    # a 2-GPU task cannot run at all: everything free is fragment
    assert node_fragment([(1000, "A"), (500, "A")], [TaskType(2, 1000)]) == 1500
    # a task pinned to another model cannot run here either
    assert node_fragment([(1000, "A")], [TaskType(1, 500, "B")]) == 1000
    # popularity-weighted: 3/4 of tasks need 0.3 (frag 200), 1/4 need 1.0 (frag 700)
    mix = [TaskType(1, 300, weight=3), TaskType(1, 1000, weight=1)]
    assert node_fragment([(1000, "A"), (500, "A"), (200, "A")], mix) == pytest.approx(0.75 * 200 + 0.25 * 700)
    assert node_fragment([(1000, "A")], []) is None


def read_openb(root) -> tuple[list[dict], list[dict]]:
    folder = root / "alibaba_gpu_v2023_openb"
    with open(folder / "openb_node_list_gpu_node.csv") as f:
        nodes = list(csv.DictReader(f))
    with open(folder / "openb_pod_list_default.csv") as f:
        pods = [p for p in csv.DictReader(f) if int(p["num_gpu"]) > 0]
    return nodes, pods


def busiest_instant(pods: list[dict]) -> int:
    """The trace time with the most GPU pods running (creation <= t < deletion)."""
    events = sorted([(int(p["creation_time"]), 1) for p in pods] + [(int(p["deletion_time"]), -1) for p in pods])
    running, best = 0, (0, 0)
    for t, step in events:
        running += step
        best = max(best, (running, t))
    return best[1]


@pytest.mark.parametrize("mode", ["instant", "arrivals"])
def test_fgd_on_the_real_openb_trace(shared_data, mode):
    """``instant``: the pods running at the trace's busiest instant (only ~50: openb pods are short);
    ``arrivals``: every GPU pod in creation order and none leaving, as the paper's simulator
    replays the trace, until first-fit finds no room (those left over still count in the mix)."""
    nodes, pods = read_openb(shared_data)
    cluster = Cluster({n["sn"]: (n["model"], int(n["gpu"])) for n in nodes})
    instant = busiest_instant(pods) + 1 if mode == "instant" else max(int(p["creation_time"]) for p in pods) + 1
    window_start = instant - 86400 if mode == "instant" else 0
    placed = 0
    for p in sorted(pods, key=lambda p: (int(p["creation_time"]), p["name"])):
        created, deleted = int(p["creation_time"]), int(p["deletion_time"])
        if created >= instant or (mode == "instant" and deleted <= window_start):
            continue
        k, d = int(p["num_gpu"]), int(p["gpu_milli"]) if int(p["num_gpu"]) == 1 else 1000
        running = mode == "arrivals" or deleted >= instant
        start, end = created - window_start, None if running else deleted - window_start
        ok = cluster.place(p["name"], k, d, start=start, end=end, running=running)
        if not ok:  # no room: still part of the demand, holding nothing
            cluster.place(p["name"], k, d, start=start, end=instant - window_start - 1, running=False)
        placed += ok and running
    assert placed >= (50 if mode == "instant" else 5000)
    got = analyse(cluster, end=instant - window_start)
    check_against_brute_fast(cluster, got)
    if mode == "arrivals":  # a packed cluster of mixed fractional pods does fragment
        assert got.iloc[-1]["fragmented_gpu_share"] > 0


def check_against_brute_fast(cluster: Cluster, got: pd.DataFrame) -> None:
    """Per-node brute force is exponential in k; for the 8-GPU nodes use its closed form per task."""
    mix = cluster.task_mix()
    total = sum(mix.values())
    fragment = {}
    for node, free in cluster.free.items():
        out = 0.0
        for (k, d), n in mix.items():
            fits = [g for g in free if g >= d]
            out += n / total * (sum(free) - (sum(fits) if len(fits) >= k else 0))
        fragment[node] = out
    nodes = got[got["node"] != FLEET].set_index("node")
    assert nodes["fragmented_gpu_share"].to_dict() == pytest.approx({n: v / 1000 for n, v in fragment.items()})
    fleet = got[got["node"] == FLEET].iloc[0]
    expected = sum(fragment.values()) / sum(map(sum, cluster.free.values()))
    assert 0.0 <= fleet["fragmentation_ratio"] <= 1.0
    assert fleet["fragmentation_ratio"] == pytest.approx(expected, abs=1e-9)
    assert fleet["gpus"] == sum(g for _, g in cluster.nodes.values())


def test_simulated_fleet_matches_its_own_timeline():
    """Whole, multi-GPU and time-sliced (4 replicas) pods of workloads.build_fleet; MIG GPUs excluded."""
    fleet = workloads.build_fleet(gpus=40, seed=5, days=1)
    con = store.connect(None)
    store.load(con, {"devices": simulate.devices_frame(fleet), "pods": simulate.pods_frame(fleet, fmt="parquet")},
               source="test")
    got = analyses.run(con, "fragmentation_fgd", start=pd.Timestamp(fleet.start, unit="s").to_pydatetime(),
                       end=pd.Timestamp(fleet.end, unit="s").to_pydatetime())
    mig_gpus = {d.gpu_uuid for d in fleet.devices if d.is_mig}
    free = {d.gpu_uuid: 1000 for d in fleet.devices if not d.is_mig and d.gpu_uuid not in mig_gpus}
    node_of = {d.gpu_uuid: d.node for d in fleet.devices}
    mix: Counter = Counter()
    for p in fleet.pods:
        if p.gpu_resource.startswith("nvidia.com/mig-"):
            continue
        k = len(p.device_ids)
        mix[(k, round(1000 * p.gpu_count / k))] += 1
        for uuid in p.device_ids if p.end_ts is None else ():
            free[uuid] -= round(1000 * p.gpu_count / k)
    assert any(d < 1000 for _, d in mix) and any(k > 1 for k, _ in mix)  # shared and multi-GPU tasks present
    per_node: dict[str, list[int]] = {}
    for uuid, r in sorted(free.items()):
        per_node.setdefault(node_of[uuid], []).append(r)
    nodes = got[got["node"] != FLEET].set_index("node")
    assert nodes["gpus"].to_dict() == {n: len(f) for n, f in per_node.items()}
    for node, f in per_node.items():
        assert nodes.loc[node, "free_gpu_share"] == pytest.approx(sum(f) / 1000)
        assert nodes.loc[node, "fragmented_gpu_share"] == pytest.approx(brute_fragment(f, mix) / 1000)


def test_index_device_ids_name_a_gpu_on_the_pods_node():
    cluster = Cluster({"a": ("T4", 2), "b": ("T4", 2)})
    cluster.place("p0", 1, 300, start=0, end=None, running=True)  # a-gpu0
    cluster.place("p1", 1, 1000, start=0, end=5, running=False)  # a whole-GPU task type, gone by the end
    frames = cluster.frames()
    frames["pods"].loc[0, "device_ids"] = "0"  # deviceIDStrategy=index: "0" is GPU 0 of node a, not of b
    con = store.connect(None)
    store.load(con, frames, source="test")
    got = analyses.run(con, "fragmentation_fgd", start=pd.Timestamp(BASE, unit="s").to_pydatetime(),
                       end=pd.Timestamp(BASE + 10, unit="s").to_pydatetime()).set_index("node")
    assert (got.loc["a", "free_gpu_share"], got.loc["b", "free_gpu_share"]) == (pytest.approx(1.7), pytest.approx(2.0))
    # half the tasks need a whole GPU: a-gpu0's 0.7 is fragment for them, for the 0.3 tasks it is not
    assert (got.loc["a", "fragmented_gpu_share"], got.loc["b", "fragmented_gpu_share"]) == (pytest.approx(0.35), 0.0)
