"""What the synthetic fleet is made of: GPU models and list prices, MIG layouts, node roles and
teams, and the Segment/Fleet records the builder fills."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gpuwatch import mig
from gpuwatch.model import Device, Pod
from gpuwatch.units import MIB

# Per model, as nvidia-smi -q reports it: SM and memory clocks (idle, max) in MHz, and (die C, HBM C)
# pairs the memory temperature is interpolated through (absent: no memory sensor, as on GDDR boards).
# H100: the idle and gpu-burn captures in shared/data/real/nvidia_smi_captures (driver 590). A100:
# public nvidia-smi -q captures of A100-SXM4-80GB nodes (driver 555: idle 210/1593 MHz, max 1410,
# idle die 25 C / HBM 43 C), and for load NVIDIA's dcgm-exporter doc scrape of a busy A100 40GB
# (die 61 C / HBM 69 C). ``nvlinks``: NVLinks per GPU (NVIDIA's datasheets; 0: PCIe only, no NVLink traffic).
# The models below appear only with build_fleet(topology=True) (gpuwatch.fleet.topology_plant):
# L40S: the capture in shared/data/real/nvidia_smi_captures (driver 595: 46068 MiB, 350 W limit, idle
# 210 MHz SM / 405 MHz memory and ~37 W once settled, max 2520 / 9001 MHz; memory temperature N/A: GDDR6,
# no sensor); 142 SMs, no MIG. GB200: public nvidia-smi tables of GB200 NVL72 trays (189471 MiB, 1200 W
# cap, ~160 W idle at P0), 152 SMs at up to 2062 MHz; its idle SM clock and HBM3e memory clock were not
# captured (assumed: H100's idle 345 MHz, 3996 MHz memory), nor its memory temperature (none simulated);
# MIG-capable, but the simulator never partitions it.
GPU_SPECS: dict[str, dict] = {
    "NVIDIA H100 80GB HBM3": {"fb": 81559 * MIB, "sms": 132, "idle_w": 70.0, "tdp_w": 700.0, "mig": "10gb",
                              "sm_clock_mhz": (345, 1980), "mem_clock_mhz": (2619, 2619),
                              "hbm_temp_c": ((41, 48), (63, 58)), "nvlinks": 18},
    "NVIDIA A100-SXM4-80GB": {"fb": 81920 * MIB, "sms": 108, "idle_w": 55.0, "tdp_w": 400.0, "mig": "10gb",
                              "sm_clock_mhz": (210, 1410), "mem_clock_mhz": (1593, 1593),
                              "hbm_temp_c": ((25, 43), (61, 69)), "nvlinks": 12},
    "NVIDIA L40S": {"fb": 46068 * MIB, "sms": 142, "idle_w": 37.0, "tdp_w": 350.0, "mig": None,
                    "sm_clock_mhz": (210, 2520), "mem_clock_mhz": (405, 9001), "nvlinks": 0},
    "NVIDIA GB200": {"fb": 189471 * MIB, "sms": 152, "idle_w": 160.0, "tdp_w": 1200.0, "mig": None,
                     "sm_clock_mhz": (345, 2062), "mem_clock_mhz": (3996, 3996), "nvlinks": 18},
}


# On-demand list prices per GPU-hour. L40S: CoreWeave's 8x L40S node at $18.00/h (2025; AWS g6e.xlarge,
# one L40S, lists $1.861/h in us-east-1); GB200: CoreWeave's GB200 NVL72 instance at $42.00/h for its
# 4 GPUs (2025). Plausible figures for a simulation, not quotes.
PRICES_USD_PER_GPU_HOUR = {"NVIDIA H100 80GB HBM3": 4.10, "NVIDIA A100-SXM4-80GB": 2.20, "NVIDIA L40S": 2.25,
                           "NVIDIA GB200": 10.50}
# Node labels as kube-state-metrics names them: each model's cloud instance type; every simulated node
# is on-demand capacity (a spot price would not apply to any). g6e.48xlarge: 8x L40S; p6e-gb200.36xlarge:
# one 4-GPU tray of a GB200 NVL72 UltraServer.
INSTANCE_TYPES = {"NVIDIA H100 80GB HBM3": "p5.48xlarge", "NVIDIA A100-SXM4-80GB": "p4de.24xlarge",
                  "NVIDIA L40S": "g6e.48xlarge", "NVIDIA GB200": "p6e-gb200.36xlarge"}
# The node label GPU Feature Discovery sets to the GPU's product name (nvidia.com/gpu.product), and
# pending pods select on, as kube-state-metrics names it (kube_node_labels, kube_pod_nodeselectors):
# the bundle's nodes and node_selector keys are KSM's, like every other node label the simulator writes.
GPU_PRODUCT_LABEL = "nvidia_com_gpu_product"


def gpu_product(model: str) -> str:
    """GPU Feature Discovery's product label value: the model name with spaces replaced by "-"
    ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3")."""
    return model.replace(" ", "-")


# MIG profile id -> (name on the simulated 80 GB GPUs, compute slices, memory slices); the slice
# counts come from the one placement table (gpuwatch.mig, gpuwatch/mig.py), only the names live here.
_MIG_NAMES_80GB = {19: "1g.10gb", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb", 0: "7g.80gb"}


MIG_PROFILES = {pid: (name, mig.PROFILES[pid].compute_slices, mig.PROFILES[pid].size)
                for pid, name in _MIG_NAMES_80GB.items()}


# Layouts as (profile id, placement start); some deliberately strand memory slices.
MIG_LAYOUTS = (
    ((19, 0), (19, 1), (14, 2), (9, 4)),          # all-balanced: uses every slice
    ((19, 0), (19, 1), (19, 5)),                  # 1g left at 5 blocks any 3g at 4
    ((9, 0), (9, 4)),
    tuple((19, s) for s in range(7)),             # seven 1g: slice 7 stranded
    ((5, 0), (9, 4)),
    ((9, 0), (19, 4)),                            # 3g + one 1g: 5..7 only fit 1g/2g
)


NODE_ROLES = ("mixed", "train", "mig", "mixed", "shared", "train", "mixed", "mixed", "train", "mixed")


TEAMS = {"nlp": ("nlp-train", "nlp-serving"), "vision": ("vision",), "recsys": ("recsys-prod", "recsys-exp"),
         "research": ("research-notebooks",), "platform": ("ml-platform",)}


# Every pod carries its team's cost center (a pod label): nlp and research share one, so grouping by
# cost center differs from grouping by team.
COST_CENTERS = {"nlp": "cc-100", "research": "cc-100", "vision": "cc-200", "recsys": "cc-300", "platform": "cc-900"}


def notebooks_namespace(team: str) -> str:
    """Where a team's notebooks run (research's only namespace is its notebooks one)."""
    return "research-notebooks" if team == "research" else f"{team}-notebooks"


PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


SIGNALS = ("gpu_util", "gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
           "fb_used_bytes", "power_watts", "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")


DEFAULT_START = 1_794_182_400.0  # 2026-11-09T00:00:00Z, a Monday (ISO week 2026-W46)


# (NVIDIA driver, the CUDA version it supports) every simulated node runs; the driver is the one the
# simulate source claims (gpuwatch.sources.simulate.DRIVER_VERSION), CUDA 12.4 is what 550.x supports.
DRIVER = ("550.127.08", "12.4")
# What the driver_drift failure mode puts on some nodes of one pool: an older branch (CUDA 12.2), on
# which images built for CUDA 12.4 fail at start.
DRIFT_DRIVER = ("535.183.01", "12.2")


# Memory an empty device holds, in MiB: nvidia-smi on H100s (driver 590,
# shared/data/real/nvidia_smi_captures): an idle whole GPU 0 MiB; MIG instances 9 (1g.10gb),
# 17 (2g.20gb), 26 (3g.40gb) MiB, keyed here by memory slices (4g/7g were not captured: as 3g).
# (Before, a fleet without injected failures gave an empty device 0.6% of its framebuffer: above the
# orphaned-memory baselines, so every empty MIG instance looked orphaned.)
EMPTY_FB_MIB = {None: 0, 1: 9, 2: 17, 4: 26, 8: 26}


# failures.csv (beside truth.csv): one row per planted instance of a failure-mode finding, in that
# finding's key (sample_data/README.md says what each finding must find).
FAILURE_COLUMNS = ("finding", "node", "gpu_uuid", "mig_gi_id", "namespace", "pod", "job", "cause")


def uid(*parts: object) -> str:
    """A UUID-shaped id, a hash of ``parts``: the same parts always give the same id."""
    h = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass(frozen=True)
class Segment:
    """One device's occupant over ``[start, end)``: a pod (index into ``Fleet.pods``) or nobody."""

    device: int
    pod: int | None
    start: float
    end: float
    behavior: str  # productive | hoarder | false_util | unallocated
    kind: str  # training | inference | notebook | stalled | idle | ramp (memory grows) | lagging (straggler)
    share: float = 1.0  # time-sliced replica share of the GPU
    fb_frac: float = 0.0  # memory the occupant holds, as a fraction of the device's framebuffer
    profiling: bool = True  # DCGM/GPM profiling fields available on this node
    multi_gpu: bool = False
    fb_bytes: float | None = None  # memory held, when set (overrides fb_frac): an empty baseline, or orphaned


@dataclass(frozen=True)
class Fleet:
    seed: int
    start: float
    end: float
    devices: tuple[Device, ...]
    pods: tuple[Pod, ...]
    segments: tuple[Segment, ...]
    truth: tuple[dict, ...]
    # pod (container) state changes, model.BUNDLE_COLUMNS["pod_status"] (ts in epoch seconds)
    pod_status: tuple[dict, ...] = ()
    # GPU health events, model.BUNDLE_COLUMNS["health"]
    health: tuple[dict, ...] = ()
    # ground truth of the planted failure modes, FAILURE_COLUMNS
    failures: tuple[dict, ...] = ()
    # GPU-to-GPU links, model.BUNDLE_COLUMNS["topology"] (one row per unordered pair)
    topology: tuple[dict, ...] = ()
    # GPU compute processes and their pods, model.BUNDLE_COLUMNS["processes"] (only where a failure mode
    # plants them: the simulator does not model every process of every pod)
    processes: tuple[dict, ...] = ()

    def nodes(self) -> list[str]:
        return sorted({d.node for d in self.devices})
