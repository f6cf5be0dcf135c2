"""Every series the exporter serves, as one declarative table (kube-state-metrics style).

Raw DCGM fields keep dcgm-exporter's exact names, TYPE and HELP and are keyed by numeric DCGM
field id; they come from the one field table (gpuwatch/fields.py). ``fmt`` is DCGM's field type:
``i`` (int64, rendered ``%d``) or ``d`` (double, rendered ``%f``), as dcgm-exporter renders them.
gpuwatch's own series use the ``gpuwatch_`` prefix and base units.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch import fields

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


# The DCGM series: derived from the field table, in dcgm-exporter's default-counters.csv order.
RAW_METRICS: tuple[Spec, ...] = tuple(Spec(f.name, f.type, f.help, RAW_LABELS, f.id, f.fmt, profiling=f.profiling)
                                      for f in fields.SERIES)

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
