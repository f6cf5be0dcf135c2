"""Every series the exporter serves, as one declarative table (kube-state-metrics style).

Raw DCGM fields keep dcgm-exporter's exact names, TYPE and HELP (etc/default-counters.csv, plus
SM_ACTIVE/SM_OCCUPANCY/NVLINK_TX/RX which gpuwatch enables) and are keyed by numeric DCGM field
id, because DCGM 4.6 renamed the Python constants but kept the ids. ``fmt`` is DCGM's field type:
``i`` (int64, rendered ``%d``) or ``d`` (double, rendered ``%f``), as dcgm-exporter renders them.
gpuwatch's own series use the ``gpuwatch_`` prefix and base units.
"""

from __future__ import annotations

from dataclasses import dataclass

# Label groups, in dcgm-exporter's order: device, [MIG], hostname, [attribution].
DEVICE_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName")
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
POD_LABELS = ("pod", "namespace", "container")
RAW_LABELS = (*DEVICE_LABELS, *MIG_LABELS, "hostname", "DCGM_FI_DRIVER_VERSION", *POD_LABELS, "vgpu")
# Labels present only sometimes (docs table): MIG instance, driver version known, attributed, shared.
OPTIONAL = frozenset({*MIG_LABELS, "DCGM_FI_DRIVER_VERSION", *POD_LABELS, "vgpu"})
# ... except in these families, where they are always there (vgpu "" when the GPU is not shared).
ALWAYS = {"gpuwatch_mig_instance_info": MIG_LABELS, "gpuwatch_gpu_allocation_info": (*POD_LABELS, "vgpu")}


@dataclass(frozen=True)
class Spec:
    """One metric family: name, Prometheus type, help text, labels (in order), DCGM field id."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = RAW_LABELS
    field_id: int | None = None
    fmt: str = "g"  # i: DCGM int64 (%d) | d: DCGM double (%f) | g: Prometheus float (repr)
    profiling: bool = False  # a DCP (DCGM_FI_PROF_*) field: off with --no-profiling


def _raw(field_id: int, name: str, type_: str, help_: str, fmt: str = "i") -> Spec:
    return Spec(name, type_, help_, RAW_LABELS, field_id, fmt, profiling=name.startswith("DCGM_FI_PROF_"))


# Order = dcgm-exporter's default-counters.csv order (it renders families in CSV order).
RAW_METRICS: tuple[Spec, ...] = (
    _raw(100, "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    _raw(101, "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    _raw(140, "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    _raw(150, "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    _raw(155, "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "d"),
    _raw(156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    _raw(202, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    _raw(203, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    _raw(204, "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    _raw(206, "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    _raw(207, "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    _raw(230, "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    _raw(251, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    _raw(252, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    _raw(253, "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    _raw(449, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    _raw(526, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    _raw(393, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    _raw(394, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    _raw(395, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    _raw(1001, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "d"),
    _raw(1002, "DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "d"),
    _raw(1003, "DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.", "d"),
    _raw(1004, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "d"),
    _raw(1005, "DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
         "Ratio of cycles the device memory interface is active sending or receiving data.", "d"),
    _raw(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including "
         "both protocol headers and data payloads - in bytes per second."),
    _raw(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including "
         "both protocol headers and data payloads - in bytes per second."),
    _raw(1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
         "The number of bytes of active NvLink tx (transmit) data including both header and payload."),
    _raw(1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge",
         "The number of bytes of active NvLink rx (read) data including both header and payload."),
)

# DCGM field ids the sources also read but that are labels or inputs, not series.
FI_DRIVER_VERSION, FI_DEV_NAME, FI_FB_TOTAL = 1, 50, 250

GPU_LABELS = ("gpu", "UUID", "device", "modelName", "hostname")
OWN_METRICS: tuple[Spec, ...] = (
    Spec("gpuwatch_build_info", "gauge", "gpuwatch build; always 1.", ("version",)),
    Spec("gpuwatch_gpus", "gauge", "Number of GPUs the source sees on this node (MIG instances not counted).", ()),
    Spec("gpuwatch_gpu_up", "gauge", "1 if the GPU (or MIG instance) was read in the last refresh, 0 if reading it failed.",
         (*DEVICE_LABELS, *MIG_LABELS, "hostname")),
    Spec("gpuwatch_gpu_lost", "gauge", "1 for a GPU that fell off the bus (seen earlier or reported lost, not readable now).",
         ("UUID", "hostname")),
    Spec("gpuwatch_gpu_memory_total_bytes", "gauge", "Framebuffer size of the GPU or MIG instance (bytes).",
         (*DEVICE_LABELS, *MIG_LABELS, "hostname")),
    Spec("gpuwatch_mig_instance_info", "gauge", "MIG GPU instance: profile id and placement in memory slices; always 1.",
         (*GPU_LABELS[:4], "hostname", *MIG_LABELS, "mig_uuid", "profile_id", "placement_start", "placement_size")),
    Spec("gpuwatch_gpu_allocation_info", "gauge",
         "A container's allocation of a GPU or MIG instance per the kubelet; one series per sharing pod; always 1.",
         (*GPU_LABELS, *MIG_LABELS, *POD_LABELS, "resource", "vgpu")),
    Spec("gpuwatch_process_gpu_utilization_ratio", "gauge",
         "Per-process SM utilization on a (time-sliced) GPU from NVML, ratio 0-1.",
         (*DEVICE_LABELS, "hostname", "pid")),
    Spec("gpuwatch_source_up", "gauge", "1 if the last read of the source succeeded (source = dcgm|nvml|simulate|kubelet).",
         ("source",)),
    Spec("gpuwatch_source_duration_seconds", "gauge", "Duration of the last read of the source (seconds).", ("source",)),
    Spec("gpuwatch_attribution_error_info", "gauge",
         "1 while pod attribution fails (reason = socket_missing|timeout|unavailable|error); series then carry no pod labels.",
         ("reason",)),
)

METRICS: tuple[Spec, ...] = RAW_METRICS + OWN_METRICS
BY_NAME: dict[str, Spec] = {m.name: m for m in METRICS}


def markdown_table() -> str:
    """The README's Metrics table, generated from METRICS (a test keeps the README in step).
    Labels in [brackets] appear only on some series (MIG instances, attributed or shared devices)."""
    rows = ["| metric | type | DCGM field id | labels | help |", "|---|---|---|---|---|"]
    for m in METRICS:
        always = ALWAYS.get(m.name, ())
        labels = ", ".join(f"[{n}]" if n in OPTIONAL and n not in always else n for n in m.labels)
        field = "" if m.field_id is None else str(m.field_id)
        rows.append(f"| `{m.name}` | {m.type} | {field} | {labels} | {m.help.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
