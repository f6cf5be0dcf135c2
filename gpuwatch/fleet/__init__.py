"""Deterministic synthetic GPU fleet: devices, pods with known behaviour, and their signals.

``build_fleet(failures=True)`` also plants five failure modes (orphaned memory, driver drift, gang
stalls, MIG size mismatches, unhealthy GPUs) with their ground truth, on time the fleet leaves
unallocated; ``gpuwatch simulate`` does by default, the live exporter does not.
``build_fleet(topology=True)`` gives every node its GPU interconnect layout (gpuwatch.fleet.layouts) and
appends topology nodes (8x L40S PCIe, HGX H100, a GB200 NVL72 rack) with misplaced, spread and pending
workloads, judged into truth's ``topology`` column (gpuwatch.fleet.topology_plant); ``gpuwatch simulate``
does by default too.

One generator feeds ``gpuwatch simulate`` (bundles), the exporter's ``simulate`` source, the demo,
tests and benchmarks, so all of them exercise the same workloads. Signals are a pure function of
(seed, segment, timestamp): a counter-based hash gives the noise, so a live exporter reading "now"
and a bundle written for a week agree sample for sample.
"""

from gpuwatch.fleet.builder import build_fleet
from gpuwatch.fleet.catalog import (
    DEFAULT_START,
    DRIFT_DRIVER,
    DRIVER,
    FAILURE_COLUMNS,
    GPU_PRODUCT_LABEL,
    GPU_SPECS,
    INSTANCE_TYPES,
    MIG_LAYOUTS,
    MIG_PROFILES,
    NODE_ROLES,
    PCI_BUSES,
    PRICES_USD_PER_GPU_HOUR,
    SIGNALS,
    TEAMS,
    Fleet,
    Segment,
    gpu_product,
    notebooks_namespace,
)
from gpuwatch.fleet.readings import iter_samples, readings_at, signals

__all__ = ["DEFAULT_START", "DRIFT_DRIVER", "DRIVER", "FAILURE_COLUMNS", "GPU_PRODUCT_LABEL", "GPU_SPECS", "INSTANCE_TYPES", "MIG_LAYOUTS", "MIG_PROFILES", "NODE_ROLES", "PCI_BUSES",
           "PRICES_USD_PER_GPU_HOUR", "SIGNALS", "TEAMS", "Fleet", "Segment", "build_fleet", "gpu_product", "iter_samples",
           "notebooks_namespace", "readings_at", "signals"]
