"""Compatibility profiles (``gpuwatch export --compat``): which exporter's conventions /metrics follows.

A profile fixes three things a consumer's queries depend on:

- ``naming``: the DCGM series' names and units (fields.py): ``4.8`` = dcgm-exporter 2.x-4.5.3-4.8.2
  (``DCGM_FI_DEV_GPU_UTIL`` in %, FB in MiB), ``4.9`` = dcgm-exporter 4.9 with DCGM 4.7
  (``DCGM_FI_DEV_GPU_UTIL_RATIO``, bytes, Hz, J, B/s; driver label ``DCGM_FI_SYSTEM_DRIVER_VERSION``);
- ``hostname_label``: ``Hostname`` (every released dcgm-exporter up to 4.5.3-4.8.2) or ``hostname``
  (dcgm-exporter after its #655 rename, 4.9; gpuwatch);
- ``shared_gpus``: how a GPU held by several pods (time-slicing, MPS) is served.
  ``one-pod``: dcgm-exporter's default — one series per device, labelled with the pod the kubelet
  listed last for it (dcgm-exporter fills a device -> pod map in the kubelet's List order, so the last
  entry wins). ``per-pod``: one device-level series for every field, and for the fields a source
  measures per process (GPU_UTIL, FB_USED) the pods' own shares as extra series labelled with each
  pod, the device-level series then carrying only the unattributed remainder — so ``sum`` over a
  field and ``sum by (UUID)`` are the device's value in both modes (dcgm-exporter's
  ``--kubernetes-virtual-gpus`` instead repeats every device-wide value once per pod, which
  multiplies power and memory sums by the number of sharers; gpuwatch never does that).

Every pod holding a device, shared or not, is listed in ``gpuwatch_gpu_allocation_info`` in every
profile. ``dcgm-exporter-4.8`` is the default: it is what dashboards, alerts and OpenCost's queries
written for today's dcgm-exporter read (README "Compatibility profiles").
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch.exporter.families import Options

SHARED_MODES = ("one-pod", "per-pod")


@dataclass(frozen=True)
class Profile:
    naming: str
    hostname_label: str
    shared_gpus: str
    summary: str


PROFILES: dict[str, Profile] = {
    "dcgm-exporter-4.8": Profile("4.8", "Hostname", "one-pod",
                                 "dcgm-exporter 2.x-4.5.3-4.8.2: its names and units (%, MiB, MHz, mJ), Hostname, "
                                 "one series per GPU labelled with the last pod the kubelet lists"),
    "dcgm-exporter-4.9": Profile("4.9", "hostname", "one-pod",
                                 "dcgm-exporter 4.9 (DCGM 4.7): the renamed fields in base units (ratio, bytes, Hz, "
                                 "J, B/s), hostname, one series per GPU labelled with the last pod listed"),
    "gpuwatch": Profile("4.8", "hostname", "per-pod",
                        "dcgm-exporter 4.8 names and units, hostname, and each sharing pod's own GPU_UTIL and "
                        "FB_USED beside the device's series"),
}
DEFAULT = "dcgm-exporter-4.8"


def options(profile: str = DEFAULT, *, hostname_label: str | None = None, virtual_gpus: bool = False,
            profiling: bool = True) -> Options:
    """The exporter's options for ``profile``; ``hostname_label`` overrides the profile's label name,
    ``virtual_gpus`` (``--kubernetes-virtual-gpus``) serves shared GPUs per pod in any profile."""
    if profile not in PROFILES:
        raise ValueError(f"unknown compatibility profile {profile!r}; choose one of {', '.join(PROFILES)}")
    p = PROFILES[profile]
    return Options(hostname_label=hostname_label or p.hostname_label, profiling=profiling, naming=p.naming,
                   shared_gpus="per-pod" if virtual_gpus else p.shared_gpus)
