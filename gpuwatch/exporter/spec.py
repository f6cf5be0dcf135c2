"""A metric family's declaration (name, type, help, labels in order) and dcgm-exporter's label groups."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Label groups, in dcgm-exporter's order: device, [MIG], hostname, [attribution].
DEVICE_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName")
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
POD_LABELS = ("pod", "namespace", "container")
# pod_uid and the pod's own labels (sanitized names) follow with --kubernetes-enable-pod-uid/-labels.
RAW_LABELS = (*DEVICE_LABELS, *MIG_LABELS, "hostname", "DCGM_FI_DRIVER_VERSION", *POD_LABELS, "pod_uid")
# Labels present only sometimes (docs table): MIG instance, driver version known, attributed, shared.
OPTIONAL = frozenset({*MIG_LABELS, "DCGM_FI_DRIVER_VERSION", *POD_LABELS, "vgpu", "pod_uid", "driver_version",
                      "cuda_driver_version"})
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
    # gpuwatch's own families: scrape -> (label name -> value, sample value); None = label absent
    samples: Callable[[Any], Iterable[tuple[Mapping[str, str | None], float]]] | None = None

GPU_LABELS = ("gpu", "UUID", "device", "modelName", "hostname")
