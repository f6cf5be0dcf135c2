"""A real H100 (tests/fixtures/real/h100-sxm-580, taken by bench/real_gpu.py; its README says how),
replayed without a GPU: what NVML/GPM returned under four loads, what gpuwatch's exporter served, and
what NVML says about MIG and topology, checked against what gpuwatch assumes.

- The loads read as their hardware did: the spin kernel is "100 % utilized" with one SM in 132 active.
- parse -> exporter output -> golden (tests/golden/exporter/real/), and the same series as the real
  exporter served in the same second.
- The false-utilization analysis on the four-load trace (the real scrapes, read by gpuwatch's .prom
  reader) flags the spin kernel and nothing else.
- MIG: the profile ids, slice counts, placements and instance counts NVML reports are gpuwatch's table;
  the instance memory and SM counts are not slice fractions, and gpuwatch's captured table holds them.
- Topology of a one-GPU VM: NVML and ``nvidia-smi topo -m`` agree (NUMA 0, CPUs 0-15, no NVLink).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from functools import cache

import pandas as pd
import pytest

from gpuwatch import analyses, mig, store
from gpuwatch.analyses.params import params
from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exposition import render
from gpuwatch.fields import fid
from gpuwatch.ingest import promfile, topo
from gpuwatch.sources import nvml_parse, nvml_topology
from gpuwatch.units import MIB
from tests.conftest import FIXTURES

CAPTURE = FIXTURES / "real" / "h100-sxm-580"
LOADS = ("idle", "matmul", "memcopy", "spin")
NODE = "real-gpu"  # the capture's --node-name
GPU_SMS = 132
F = {name: fid(f"DCGM_FI_{name}") for name in (
    "DEV_GPU_UTIL", "PROF_SM_ACTIVE", "PROF_SM_OCCUPANCY", "PROF_PIPE_TENSOR_ACTIVE", "PROF_DRAM_ACTIVE",
    "DEV_FB_USED", "DEV_POWER_USAGE", "DEV_CLOCKS_EVENT_REASONS")}


@cache
def raw_reads() -> tuple[dict, ...]:
    with gzip.open(CAPTURE / "raw.jsonl.gz", "rt") as f:
        return tuple(json.loads(line) for line in f)


@cache
def scrapes() -> tuple[dict, ...]:
    with gzip.open(CAPTURE / "scrapes-gpm.jsonl.gz", "rt") as f:
        return tuple(json.loads(line) for line in f)


def facts() -> dict:
    return json.loads((CAPTURE / "facts.json").read_text())


def steady(load: str) -> list[dict]:
    """The reads taken while ``load`` ran (after its warm-up), without the first: GPM's value is the
    mean since the previous read, which may straddle the load's start."""
    return [r for r in raw_reads() if r["load"] == load][1:]


def middle(load: str) -> dict:
    reads = steady(load)
    return reads[len(reads) // 2]


def values(read: dict) -> dict:
    return nvml_parse.parse(read["raw"], node=NODE).readings[0].values


def medians(load: str) -> dict:
    per_read = [values(r) for r in steady(load)]
    return {name: statistics.median(v[field] for v in per_read) for name, field in F.items()}


def test_each_load_reads_as_its_hardware_did():
    table = {load: medians(load) for load in LOADS}
    print(pd.DataFrame(table).T.to_string())
    idle, matmul, memcopy, spin = (table[load] for load in LOADS)
    assert idle["DEV_GPU_UTIL"] == 0 and idle["PROF_SM_ACTIVE"] < 0.01 and idle["DEV_FB_USED"] == 0
    assert matmul["PROF_PIPE_TENSOR_ACTIVE"] > 0.8 and matmul["PROF_SM_ACTIVE"] > 0.9
    assert matmul["PROF_SM_OCCUPANCY"] < 0.25, "tensor-core GEMMs run few warps per SM: occupancy is no measure of work"
    assert memcopy["PROF_DRAM_ACTIVE"] > 0.8 and memcopy["PROF_PIPE_TENSOR_ACTIVE"] < 0.01
    # the spin kernel: the GPU counts as 100 % utilized while one SM of 132 works
    assert spin["DEV_GPU_UTIL"] >= 99
    assert spin["PROF_SM_ACTIVE"] == pytest.approx(1 / GPU_SMS, rel=0.1)
    assert spin["PROF_PIPE_TENSOR_ACTIVE"] == 0 and spin["PROF_DRAM_ACTIVE"] < 0.01
    # clock event reasons as NVML's bitmask: 0x1 GPU idle, 0x4 SW power cap (matmul at its 700 W limit)
    assert idle["DEV_CLOCKS_EVENT_REASONS"] == 0x1 and matmul["DEV_CLOCKS_EVENT_REASONS"] == 0x4
    assert matmul["DEV_POWER_USAGE"] == pytest.approx(700, rel=0.05)


def test_every_read_succeeded_and_profiling_came_from_the_second_read_on():
    reads = raw_reads()
    assert all("raw" in r and not r["raw"]["gpus"][0].get("error") for r in reads)
    assert reads[0]["raw"]["gpus"][0]["gpm"] is None, "GPM needs two samples"
    assert all(r["raw"]["gpus"][0]["gpm"] for r in reads[1:])
    calls = json.loads((CAPTURE / "calls.json").read_text())
    failed = {name: outcomes for name, outcomes in calls.items() if set(outcomes) - {"ok"}}
    # the only errors a real H100 gave: no process samples while idle, and no XID event pending
    assert failed == {"nvmlDeviceGetProcessUtilization": {"NVML_ERROR_NOT_FOUND": 61, "ok": 78},
                      "nvmlEventSetWait_v2": {"NVML_ERROR_TIMEOUT": 138}}


class Replay:
    """A source that answers with one recorded nvml payload (the exporter's input at the capture)."""

    name = "nvml"

    def __init__(self, raw: dict):
        self.raw = raw

    def read(self, now: float):
        return nvml_parse.parse(self.raw, node=NODE)

    def close(self) -> None:
        pass


def exposition(read: dict) -> str:
    topology = nvml_topology.parse(json.loads((CAPTURE / "topology_raw.json").read_text()))
    collector = ExporterCollector(Replay(read["raw"]), clock=lambda: read["t"], timer=lambda: 0.0,
                                  topology=lambda: topology, options=compat.options())  # export's default profile
    return render(collector.collect()).decode()


@pytest.mark.parametrize("load", LOADS)
def test_golden_exposition_per_load(golden, load):
    golden(f"exporter/real/h100-{load}.prom", exposition(middle(load)))


def _series(text: str) -> dict[str, float]:
    """'name{labels}' -> value for every sample line (gpuwatch's own timing series left out)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "_duration_seconds" not in line:
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


@pytest.mark.parametrize("load", LOADS)
def test_the_replayed_payload_serves_what_the_real_exporter_served(load):
    read = middle(load)
    served = min((s for s in scrapes() if s["load"] == load), key=lambda s: abs(s["t"] - read["t"]))
    ours, real = _series(exposition(read)), _series(served["body"])
    assert ours.keys() == real.keys()
    for key, value in real.items():
        name = key.split("{", 1)[0]
        if name in ("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_MEM_CLOCK") or name.startswith("gpuwatch_gpu"):
            assert ours[key] == value, key
    util = 'DCGM_FI_DEV_GPU_UTIL{gpu="0"'
    assert [v for k, v in ours.items() if k.startswith(util)] == pytest.approx(
        [v for k, v in real.items() if k.startswith(util)], abs=2)


def trace_frames() -> dict[str, pd.DataFrame]:
    """The real exporter's pages during the four loads, read by gpuwatch's .prom reader, each load's
    samples attributed to a pod of its name (what the kubelet would have said, had each load run as
    a pod), and the pods' allocations as the loads ran (phases.json)."""
    phases = {p["load"]: p for p in json.loads((CAPTURE / "phases.json").read_text())}
    parts = []
    for s in scrapes():
        if s["load"] in LOADS:
            part = promfile.parse(s["body"], at=s["t"])
            parts.append(part["samples"].assign(namespace="gpu-lab", pod=s["load"]))
            devices = part["devices"]
    pods = [{"namespace": "gpu-lab", "pod": load, "node": NODE, "team": "lab", "gpu_resource": "nvidia.com/gpu",
             "gpu_count": 1.0, "device_ids": devices.at[0, "gpu_uuid"],
             "start_ts": pd.Timestamp(p["t_ready"], unit="s"), "end_ts": pd.Timestamp(p["t_end"], unit="s")}
            for load, p in phases.items()]
    return {"samples": pd.concat(parts, ignore_index=True), "devices": devices, "pods": pd.DataFrame(pods),
            "prices": pd.DataFrame([{"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": 4.0}])}


def test_false_utilization_on_the_four_load_trace_flags_the_spin_kernel_and_nothing_else():
    frames = trace_frames()
    start, end = frames["samples"]["ts"].min(), frames["samples"]["ts"].max() + pd.Timedelta(seconds=1)
    con = store.connect(None)
    try:
        store.load(con, frames, source="real-h100")
        window = params(start.tz_localize(None).to_pydatetime(), end.tz_localize(None).to_pydatetime())
        found = analyses.run(con, "false_utilization", **window).set_index("pod")
    finally:
        con.close()
    print(found[["false_share", "mean_reported", "mean_effective", "offender"]].to_string())
    assert set(found.index) == set(LOADS) and found["effective_known"].all()
    assert set(found.index[found["offender"]]) == {"spin"}
    assert found.at["spin", "false_share"] > 0.9  # a scrape at the kernel's start averages GPM over the warm-up
    assert found.at["spin", "mean_effective"] == pytest.approx(1 / GPU_SMS, rel=0.15)
    assert found.loc[["idle", "matmul", "memcopy"], "false_share"].eq(0).all()


# --- MIG: what NVML reports for this GPU's profiles -------------------------------------------------

def profiles() -> dict[int, dict]:
    """NVML profile id -> its GPU-instance profile info and possible placements (MIG mode off: NVML
    answers these queries regardless)."""
    out = {}
    for entry in facts()["gpus"][0]["mig_profiles"]:
        if "value" in entry["info"]:
            info = entry["info"]["value"]
            out[info["id"]] = info | {"placements": entry["placements"]["value"]}
    return out


def test_mig_profiles_are_gpuwatch_table():
    real = profiles()
    assert set(real) == set(mig.PROFILES)
    for profile_id, info in real.items():
        p = mig.PROFILES[profile_id]
        assert info["sliceCount"] == p.compute_slices and info["instanceCount"] == p.max_count, profile_id
        assert info["placements"] == [[start, p.size] for start in p.starts], profile_id
        name = info["name"].removeprefix("MIG ")
        assert mig.parse_profile(name, gpu_memory_bytes=facts()["gpus"][0]["memory_v2"]["value"]["total"]) == profile_id


def test_nvidia_smi_lists_the_same_profiles_and_placements_as_nvml():
    lgipp = (CAPTURE / "cmd" / "nvidia-smi-mig-lgipp.txt").read_text()
    placements = {int(pid): [[int(s), int(size)] for s in starts.split(",")]
                  for pid, starts, size in re.findall(r"Profile ID\s+(\d+) Placements?\s*: \{([\d,]+)\}:(\d+)", lgipp)}
    assert placements == {pid: info["placements"] for pid, info in profiles().items()}
    lgip = (CAPTURE / "cmd" / "nvidia-smi-mig-lgip.txt").read_text()
    rows = {int(pid): (name, int(sms)) for name, pid, sms in re.findall(
        r"MIG (\S+)\s+(\d+)\s+\d+/\d+\s+[\d.]+\s+\w+\s+(\d+)", lgip)}
    assert rows == {pid: (info["name"].removeprefix("MIG "), info["multiprocessorCount"])
                    for pid, info in profiles().items()}


def test_mig_instance_memory_and_sms_are_not_slice_fractions():
    """The differences gpuwatch had to learn from the hardware: an instance holds less memory than its
    memory slices' share of the GPU (the rest is MIG's own overhead) and its SMs are not its compute
    slices' share (1g.20gb has 26 SMs, 3g 60 and 4g 64 of 132). gpuwatch's captured table (mig.py)
    holds what this GPU reported, and rightsizing fits pods against it, not against fractions."""
    total = facts()["gpus"][0]["memory_v2"]["value"]["total"]
    captured = mig.captured_profiles(total)
    assert captured is not None
    for profile_id, info in profiles().items():
        p = mig.PROFILES[profile_id]
        assert info["memorySizeMB"] < total / MIB * p.size / mig.MEMORY_SLICES, profile_id
        assert captured.instance_mib(profile_id) == info["memorySizeMB"]
        assert captured.sms[profile_id] == info["multiprocessorCount"]
    assert captured.gpu_sms == GPU_SMS
    shares = {pid: info["multiprocessorCount"] / GPU_SMS for pid, info in profiles().items()}
    assert shares[19] < 1 / 7 < shares[15] and shares[5] < 4 / 7


# --- topology of a one-GPU VM -------------------------------------------------------------------------

def test_topology_nvml_and_nvidia_smi_agree():
    gpu = facts()["gpus"][0]
    uuid = gpu["uuid"]["value"]
    nvml = nvml_topology.parse(json.loads((CAPTURE / "topology_raw.json").read_text()))
    smi = topo.parse((CAPTURE / "cmd" / "nvidia-smi-topo-m.txt").read_text())
    assert nvml.ok and nvml.gpus == {uuid: 0} and nvml.links == () and nvml.fabric == {}
    assert [(g.index, g.cpu_affinity, g.numa_node) for g in smi.gpus] == [(0, "0-15", 0)] and smi.links == ()
    assert nvml.numa == {uuid: 0} and nvml.cpu_affinity == {uuid: "0-15"}
    # what the driver said to get there: NUMA from memory affinity (sysfs has none in this VM, and
    # nvmlDeviceGetNumaNodeId is not supported on a discrete H100), no NVLink exposed to the VM,
    # fabric info answered with state 0 (not supported) and a zero cluster UUID
    assert gpu["memory_affinity"]["value"][0] == 1 and gpu["numa_node_id"] == {"error": "NVML_ERROR_NOT_SUPPORTED"}
    assert json.loads((CAPTURE / "topology_raw.json").read_text())["gpus"][0]["sysfs_numa_node"] is None
    assert {json.dumps(link["state"]) for link in gpu["nvlinks"]} == {'{"error": "NVML_ERROR_NOT_SUPPORTED"}'}
    assert gpu["fabric"]["nvmlDeviceGetGpuFabricInfoV"]["value"]["state"] == 0
    assert gpu["pairs"][0]["common_ancestor"] == {"error": "NVML_ERROR_NOT_SUPPORTED"}


def test_the_simulated_h100_is_this_one():
    """The simulator's H100 (fleet.GPU_SPECS) against the real one: memory, SMs, power limit, clocks."""
    from gpuwatch.fleet import GPU_SPECS

    spec, gpu = GPU_SPECS["NVIDIA H100 80GB HBM3"], facts()["gpus"][0]
    idle = values(middle("idle"))
    assert spec["fb"] == gpu["memory_v2"]["value"]["total"] // MIB * MIB
    assert spec["sms"] == GPU_SMS == profiles()[0]["multiprocessorCount"]
    assert spec["tdp_w"] * 1000 == gpu["power_limit_mw"]["value"]
    assert spec["sm_clock_mhz"] == (idle[fid("DCGM_FI_DEV_SM_CLOCK")], gpu["max_sm_clock_mhz"]["value"])
    assert spec["mem_clock_mhz"][1] == idle[fid("DCGM_FI_DEV_MEM_CLOCK")]
    assert spec["idle_w"] == pytest.approx(idle[F["DEV_POWER_USAGE"]], rel=0.05)


# --- two processes time-sharing the GPU (share.jsonl.gz) ----------------------------------------------

@cache
def shared_reads() -> tuple[dict, ...]:
    """Per pair, the reads after the first (GPM's first sample; per-process samples since the pair began)."""
    with gzip.open(CAPTURE / "share.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    firsts = {tuple(r["pair"]): r["t"] for r in reversed(rows)}
    return tuple(r for r in rows if r["t"] != firsts[tuple(r["pair"])])


def _sharers(read: dict) -> list[float | None]:
    by_pid = {p["pid"]: p["sm_util"] for p in read["raw"]["gpus"][0]["processes"]}
    return [by_pid.get(pid) for pid in read["pids"]]


def test_time_sliced_processes_read_their_time_share_not_their_work():
    """NVML's per-process utilization on a time-sliced GPU is each process's share of the time (adding
    up to the device's 100 %), not its SM work: the one-SM spin kernel reads 20-80 % beside a matmul."""
    reads = [r for r in shared_reads() if None not in _sharers(r)]
    assert len(reads) >= 50
    for r in reads:
        assert sum(_sharers(r)) == pytest.approx(r["raw"]["gpus"][0]["utilization"]["gpu"], abs=5)
    spin = [_sharers(r)[1] for r in reads if r["pair"] == ["matmul", "spin"]]
    device_sm = {r["raw"]["gpus"][0]["gpm"]["sm_util"] for r in reads if r["pair"] == ["matmul", "spin"]}
    assert 20 <= statistics.mean(spin) <= 80 and all(39 < sm < 42 for sm in device_sm)


def test_false_utilization_judges_no_time_sliced_sharer_by_its_neighbours_work():
    """Where two pods time-share a GPU, each pod's own GPU_UTIL (gpuwatch's per-process series) is its
    time share, and SM activity is the device's, both pods' work together (NVML has no per-process SM
    activity): ingest leaves it unknown on the sharers' rows (ingest/promframes_shared.py), so no sharer
    is judged false or fine by its neighbour's work — the spin kernel beside a matmul would read the
    matmul's 0.405 — and each is reported as not judged (effective_known false)."""
    rows = []
    for r in shared_reads():
        gpu = r["raw"]["gpus"][0]
        for n, (load, util) in enumerate(zip(r["pair"], _sharers(r), strict=True)):
            if util is not None:
                rows.append({"ts": pd.Timestamp(r["t"], unit="s").floor("s"), "node": NODE, "gpu_uuid": gpu["uuid"],
                             "namespace": "gpu-lab", "pod": f"{'+'.join(r['pair'])}/{n}-{load}",
                             "gpu_util": util / 100, "sm_active": None})  # as ingest folds a shared device
    samples = pd.DataFrame(rows).drop_duplicates(["ts", "pod"])
    pods = pd.DataFrame([{"namespace": "gpu-lab", "pod": pod, "node": NODE, "gpu_resource": "nvidia.com/gpu",
                          "gpu_count": 0.5, "device_ids": samples["gpu_uuid"].iat[0], "start_ts": samples["ts"].min()}
                         for pod in samples["pod"].unique()])
    con = store.connect(None)
    try:
        store.load(con, {"samples": samples, "pods": pods, "devices": pd.DataFrame(
            [{"node": NODE, "gpu_uuid": samples["gpu_uuid"].iat[0], "gpu_model": "NVIDIA H100 80GB HBM3"}])},
            source="real-h100-share")
        start, end = samples["ts"].min(), samples["ts"].max() + pd.Timedelta(seconds=1)
        found = analyses.run(con, "false_utilization", **params(start.to_pydatetime(), end.to_pydatetime()))
    finally:
        con.close()
    assert len(found) == 6 and not found["effective_known"].any() and not found["offender"].any()
    assert found["false_share"].isna().all() and found["judged_gpu_hours"].eq(0).all()
