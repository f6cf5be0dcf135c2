"""Databases for the app and report tests: sample_data loaded into a real DuckDB store, and variants.

Not a test module: imported by tests/test_app*.py and tests/test_report*.py.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT

SAMPLE = ROOT / "sample_data"
EVIL_TEAM = "<script>alert(1)</script>"
EVIL_NAMESPACE = "x'; drop table samples; --"


def sample_bundle() -> Path:
    if not any(SAMPLE.glob("samples.*")):
        pytest.skip("sample_data/ has no samples file yet")
    return SAMPLE


def load_sample(path: Path) -> Path:
    """sample_data loaded into a fresh store at ``path`` (a copy of the test process' template:
    tests/support/bundles.py ``sample_store``)."""
    from tests.support.bundles import sample_store

    sample_bundle()
    return sample_store(path)


def load_unpriced(path: Path) -> Path:
    """sample_data whose price list lacks the A100: those GPUs and the pods on them are unpriced."""
    import pandas as pd

    from gpuwatch import store
    from gpuwatch.store import bundle

    frames = {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
              for name, file in bundle.find_files(sample_bundle()).items() if name != "truth"}
    frames["prices"] = frames["prices"][~frames["prices"]["gpu_model"].str.contains("A100")]
    con = store.connect(str(path))
    store.load(con, frames, source="unpriced")
    con.close()
    return path


def load_hostile(path: Path) -> Path:
    """sample_data with one team renamed to a script tag and one namespace to an SQL injection."""
    import pandas as pd

    from gpuwatch import store
    from gpuwatch.store import bundle

    # read with pandas itself: the store's batch readers are its own business (and change)
    frames = {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
              for name, file in bundle.find_files(sample_bundle()).items() if name != "truth"}
    pods = frames["pods"]
    notebooks = sorted(pods.loc[pods["owner_kind"] == "Notebook", "namespace"].unique())
    victim_ns = notebooks[0]  # notebooks hoard: the renamed namespace shows up on every page
    victim_team = sorted(pods.loc[pods["team"].fillna("") != "", "team"].unique())[0]
    pods["team"] = pods["team"].astype(object).replace({victim_team: EVIL_TEAM})
    for name in ("pods", "samples"):  # Parquet may hand back categoricals: rename as plain text
        frames[name]["namespace"] = frames[name]["namespace"].astype(object).replace({victim_ns: EVIL_NAMESPACE})
    con = store.connect(str(path))
    store.load(con, frames, source="hostile")
    con.close()
    return path


WORDS = ("computer-vision-research", "nlp", "recommendation-systems-platform", "ads", "speech-and-audio",
         "robotics-simulation", "search-ranking", "fraud")


def team_names(n: int) -> list[str]:
    """``n`` team names, short and long (the longest ones test label space)."""
    return [f"{WORDS[i % len(WORDS)]}-{i:02d}" for i in range(n)]


def _frames(source: Path | None = None) -> dict:
    import pandas as pd

    from gpuwatch.store import bundle

    return {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
            for name, file in bundle.find_files(source or sample_bundle()).items() if name != "truth"}


def load_many_teams(path: Path, *, teams: int, source: Path | None = None) -> Path:
    """A bundle (default sample_data) with every pod labelled with one of ``teams`` team names (spread evenly)."""
    from gpuwatch import store

    frames = _frames(source)
    frames.pop("teams", None)
    pods = frames["pods"].sort_values(["namespace", "pod"]).reset_index(drop=True)
    names = team_names(teams)
    pods["team"] = [names[i % teams] for i in range(len(pods))]
    frames["pods"] = pods
    con = store.connect(str(path))
    store.load(con, frames, source=f"{teams} teams")
    con.close()
    return path


def simulate(out: Path, *, gpus: int, days: int, seed: int = 3, step: int = 300) -> Path:
    """A simulated bundle (the real `gpuwatch simulate`), e.g. for a store with hundreds of pods."""
    from gpuwatch import cli

    assert cli.main(["simulate", "--gpus", str(gpus), "--days", str(days), "--seed", str(seed), "--step", str(step),
                     "--out", str(out)]) == 0
    return out


def load_one_pod(path: Path) -> Path:
    """sample_data cut down to one pod on one GPU (its device rows and samples only): one row everywhere."""
    from gpuwatch import store

    frames = _frames()
    pods = frames["pods"]
    pod = pods[(pods["owner_kind"] == "Notebook") & (pods["gpu_count"] == 1)].sort_values("pod").iloc[[0]]
    samples = frames["samples"]
    mine = samples[(samples["namespace"] == pod["namespace"].iloc[0]) & (samples["pod"] == pod["pod"].iloc[0])]
    gpus = set(mine["gpu_uuid"])
    frames = {"pods": pod, "samples": mine, "prices": frames["prices"],
              "devices": frames["devices"][frames["devices"]["gpu_uuid"].isin(gpus)]}
    con = store.connect(str(path))
    store.load(con, frames, source="one pod")
    con.close()
    return path


def add_audit_rows(path: Path, rows: list[dict]) -> None:
    """Append reclaim_audit rows the way the reclaim controller would (a plain INSERT)."""
    import pandas as pd

    from gpuwatch import store

    con = store.connect(str(path))
    con.register("new_rows", pd.DataFrame(rows))
    con.execute("INSERT INTO reclaim_audit BY NAME SELECT * FROM new_rows")
    con.close()


def audit_row(**overrides) -> dict:
    row = {"ts": dt.datetime(2026, 11, 15, 12, 0), "run_id": "run-1", "decision": "would_act",
           "action": "stop_notebook", "dry_run": True, "namespace": "research-notebooks", "pod": "alice-nb1-0",
           "owner_kind": "Notebook", "owner_name": "alice-nb1", "team": "research", "reason": "idle 6h",
           "idle_since": dt.datetime(2026, 11, 15, 6, 0), "gpu_count": 1.0, "usd_per_hour": 4.1,
           "recommendation_id": "rec-1", "result": "dry_run", "detail": ""}
    return {**row, **overrides}


def topology_frames() -> dict:
    """Hand-built topology_placement, schedulable_capacity and blocked_demand frames with exactly the
    contract's columns (docs/architecture.md#topology), for the view and report tests: two misplaced
    jobs, a spread job, a well-placed one and one of unknown topology; an H100 pool that fragments (8+
    GPUs free, no 8-GPU NVLink block) in some buckets, and an L40S PCIe pool; two blocked pods and an
    'insufficient capacity' one."""
    import pandas as pd

    t0 = dt.datetime(2026, 11, 10, 8, 0)
    matrix = '{"0-1": "NV18", "0-4": "SYS", "1-4": "SYS"}'
    placement = pd.DataFrame([
        _placement("pod", "ml", "train-a-0", "train-a", "research", "h100-1", 3, "SYS", "NV18", "5,6,7",
                   "misplaced", "crosses sockets (SYS) while GPUs 5,6,7 (NV18) were free", 0.31, 40.0, 164.0, 50.84,
                   matrix, t0),
        _placement("pod", "ads", "rank-1", "rank", "ads", "l40s-1", 2, "SYS", "PIX", "0,1", "misplaced",
                   "crosses sockets (SYS) while GPUs 0,1 (PIX) were free", 0.12, 10.0, 18.0, 2.16,
                   '{"2-6": "SYS"}', t0),
        _placement("job", "ml", None, "big-job", "research", "h100-1,h100-2", 8, "NV18", None, None, "spread",
                   "2 nodes where 1 had 8 GPUs free", 0.08, 64.0, 262.4, 20.99, '{"0-1": "NV18"}', t0),
        _placement("pod", "ml", "ok-0", "ok", "research", "h100-2", 4, "NV18", None, None, "well_placed",
                   "the best block free at its start", 0.0, 20.0, 82.0, 0.0, '{"0-1": "NV18"}', t0),
        _placement("pod", "nlp", "lost-0", "lost", "nlp", "a100-9", 2, None, None, None, "topology unknown",
                   "no topology rows for a100-9", None, 5.0, 14.0, None, None, t0),
    ])
    buckets = [t0 + dt.timedelta(minutes=5 * i) for i in range(6)]
    # H100 pool, 2 nodes x 8: free GPUs per bucket and whether an 8 / 4 NVLink block was free
    h100 = [(9, 1, 1, 0, 8), (8, 0, 0, 2, 4), (10, 0, 0, 2, 5), (3, 0, 0, 0, 3), (8, 1, 1, 2, 8), (12, 0, 0, 2, 6)]
    rows = [_capacity(ts, "NVIDIA H100 80GB HBM3", 2, 16, free, j8, nv8, nv4, largest, known=16)
            for ts, (free, j8, nv8, nv4, largest) in zip(buckets, h100, strict=True)]
    rows += [_capacity(ts, "NVIDIA L40S", 1, 8, 8, 1, 0, 0, 1, known=8) for ts in buckets]
    blocked = pd.DataFrame([
        _blocked("ml", "gang-0", "gang", "research", "NVIDIA H100 80GB HBM3", 8, t0, 3.0, 2.5, 12, 5, "blocked",
                 "h100-1 had 5 free (largest NVLink block 4), h100-2 had 7", 82.0, "h100-2", "ml/small-1", 1.0),
        _blocked("ads", "pair-0", None, "ads", None, 4, t0, 1.0, 0.75, 6, 3, "blocked",
                 "l40s-1 had 3 free, l40s-2 had 3", 6.15, None, None, None),
        _blocked("ml", "huge-0", "huge", "research", "NVIDIA H100 80GB HBM3", 16, t0, 5.0, 0.0, 12, 8,
                 "insufficient capacity", "at most 12 GPUs free", 0.0, None, None, None),
    ])
    return {"topology_placement": placement, "schedulable_capacity": pd.DataFrame(rows), "blocked_demand": blocked}


def _placement(scope, ns, pod, job, team, nodes, gpus, worst, better, better_gpus, verdict, reason, share, hours,
               cost, penalty, matrix, start) -> dict:
    spanned = nodes.count(",") + 1
    return {"scope": scope, "namespace": ns, "pod": pod, "job": job, "team": team, "nodes": nodes,
            "gpu_model": "NVIDIA L40S" if nodes.startswith("l40s") else "NVIDIA H100 80GB HBM3", "gpus": gpus,
            "start_ts": start, "end_ts": start + dt.timedelta(hours=hours / gpus), "worst_link": worst,
            "numa_nodes": 2 if worst == "SYS" else 1, "nodes_spanned": spanned, "min_nodes": 1,
            "better_link": better, "better_gpus": better_gpus, "nvlink_bytes_per_second": None, "verdict": verdict,
            "reason": reason, "penalty_share": share, "gpu_hours": hours, "cost_usd": cost, "penalty_usd": penalty,
            "link_matrix": matrix}


def _capacity(ts, model, nodes, gpus, free, jobs_8, nvlink_8, nvlink_4, largest, *, known) -> dict:
    return {"bucket_ts": ts, "gpu_model": model, "nodes": nodes, "gpus": gpus, "free_gpus": free,
            "largest_nvlink_block": largest, "largest_numa_block": min(free, 4), "largest_pcie_switch_block": 2,
            "jobs_1": free, "jobs_2": free // 2, "jobs_4": max(free // 4 - 1, 0) + (free >= 4), "jobs_8": jobs_8,
            "nvlink_jobs_1": free, "nvlink_jobs_2": nvlink_4 * 2, "nvlink_jobs_4": nvlink_4, "nvlink_jobs_8": nvlink_8,
            "topology_known_gpus": known}


def _blocked(ns, pod, job, team, model, gpus, start, wait, blocked, free, block, verdict, why, usd, node, pods,
             moved) -> dict:
    return {"namespace": ns, "pod": pod, "job": job, "team": team, "gpu_model": model, "gpus_requested": gpus,
            "pending_from": start, "pending_until": start + dt.timedelta(hours=wait), "wait_hours": wait,
            "blocked_hours": blocked, "max_free_gpus": free, "max_free_block": block, "verdict": verdict, "why": why,
            "opportunity_usd": usd, "defrag_node": node, "defrag_pods": pods, "defrag_gpus_moved": moved}


TOPO_DAY = dt.datetime(2026, 11, 10)
H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"


def _uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def _layout(node: str, model: str) -> tuple[list[dict], list[dict]]:
    """Devices and topology rows of one 8-GPU node, from documented layouts (not a capture): an HGX H100
    board (NVSwitch: every pair NV18) or an 8x L40S PCIe server (PIX within a switch pair, PXB within a
    socket, SYS across); GPUs 0-3 on NUMA node 0, 4-7 on 1."""
    devices = [{"node": node, "gpu_uuid": _uuid(node, i), "gpu_index": i, "gpu_model": model,
                "fb_total_bytes": 85520809984 if model == H100 else 48305799168, "driver_version": "550.127.08",
                "cuda_driver_version": "12.4", "numa_node": i // 4} for i in range(8)]
    links = []
    for a in range(8):
        for b in range(a + 1, 8):
            if model == H100:
                link, nvlinks = "NV", 18
            else:
                link, nvlinks = ("PIX" if a // 2 == b // 2 else "PXB" if a // 4 == b // 4 else "SYS"), None
            links.append({"node": node, "gpu_uuid": _uuid(node, a), "peer_gpu_uuid": _uuid(node, b), "link": link,
                          "nvlinks": nvlinks})
    return devices, links


def topology_bundle() -> dict:
    """A hand-built day (2026-11-10, 5-minute samples) with topology: two HGX H100 nodes with four 1-GPU pods
    each on alternate GPUs (8 GPUs free, no 8-GPU block anywhere), an 8-GPU gang pending all day for H100s
    (blocked), a 2-GPU pod on the L40S node across sockets (GPUs 0 and 4, SYS) while PIX pairs were free
    (misplaced), and a 2-GPU pod on a PIX pair (well placed)."""
    import pandas as pd

    devices, links = [], []
    for node, model in (("h100-1", H100), ("h100-2", H100), ("l40s-1", L40S)):
        d, t = _layout(node, model)
        devices += d
        links += t
    pods = [_pod("ads", f"small-{n}", "ads", "h100-1" if n <= 4 else "h100-2", [(2 * (n - 1)) % 8 + (n > 4)])
            for n in range(1, 9)]
    pods += [_pod("ml", "train-a-0", "research", "l40s-1", [0, 4]), _pod("ml", "ok-0", "research", "l40s-1", [6, 7])]
    samples = [{"ts": TOPO_DAY + dt.timedelta(minutes=5 * i), "node": p["node"], "gpu_uuid": u, "namespace": p["namespace"],
                "pod": p["pod"], "container": "main", "gpu_util": 0.9, "sm_active": 0.6, "fb_used_bytes": 2e10,
                "power_watts": 300.0}
               for i in range(288) for p in pods for u in p["device_ids"].split(",")]
    status = [{"ts": TOPO_DAY, "namespace": "ml", "pod": f"gang-{i}", "container": "main", "phase": "Pending",
               "restarts": 0, "job": "gang", "gpu_request": 8.0, "created_ts": TOPO_DAY, "unschedulable": 1,
               "gpu_resource": "nvidia.com/gpu", "node_selector": '{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}'}
              for i in range(1)]
    nodes = [{"node": n, "labels": json.dumps({"nvidia.com/gpu.product": m.replace(" ", "-")})}
             for n, m in (("h100-1", H100), ("h100-2", H100), ("l40s-1", L40S))]
    return {"devices": pd.DataFrame(devices), "topology": pd.DataFrame(links), "pods": pd.DataFrame(pods),
            "samples": pd.DataFrame(samples), "pod_status": pd.DataFrame(status), "nodes": pd.DataFrame(nodes),
            "prices": pd.DataFrame([{"gpu_model": H100, "usd_per_gpu_hour": 4.1},
                                    {"gpu_model": L40S, "usd_per_gpu_hour": 1.2}]),
            "teams": pd.DataFrame([{"namespace": "ads", "team": "ads"}, {"namespace": "ml", "team": "research"}]),
            }


def _pod(ns: str, pod: str, team: str, node: str, gpus: list[int]) -> dict:
    return {"namespace": ns, "pod": pod, "pod_uid": f"uid-{pod}", "node": node, "owner_kind": "Job", "owner_name": pod,
            "team": team, "start_ts": TOPO_DAY, "end_ts": None, "gpu_resource": "nvidia.com/gpu",
            "gpu_count": float(len(gpus)), "device_ids": ",".join(_uuid(node, g) for g in gpus), "labels": "{}"}


def load_topology(path: Path) -> Path:
    """``topology_bundle`` loaded into a fresh store at ``path``."""
    from gpuwatch import store

    frames = topology_bundle()
    con = store.connect(str(path))
    store.load(con, frames, source="topology")
    con.close()
    return path


def load_without_topology(path: Path) -> Path:
    """sample_data without its topology file (and the devices' NUMA nodes and cliques): a store whose
    GPU links are unknown, as from an exporter that serves no gpuwatch_gpu_link_info."""
    from gpuwatch import store

    frames = _frames()
    frames.pop("topology", None)
    frames["devices"] = frames["devices"].drop(columns=["numa_node", "nvlink_clique"], errors="ignore")
    con = store.connect(str(path))
    store.load(con, frames, source="no topology")
    con.close()
    return path
