"""Compatibility profiles (``gpuwatch export --compat``): which exporter's conventions /metrics follows.

A dcgm-exporter profile is keyed by the releases it reproduces, as NVIDIA published them (release tags
``<DCGM>-<dcgm-exporter>``); its hostname label is derived from them. A profile fixes what a
consumer's queries depend on:

- ``naming``: the DCGM series' names and units (fields.py): ``4.8`` = dcgm-exporter's names up to
  4.8.4 (``DCGM_FI_DEV_GPU_UTIL`` in %, FB in MiB), ``4.9`` = dcgm-exporter 4.9.0 with DCGM 4.7 (renamed
  fields, base units; fields.py's evidence column says which names are confirmed upstream);
- the hostname label: ``Hostname`` up to 4.5.3-4.8.2, ``hostname`` from 4.6.0-4.8.3 on (the rename,
  dcgm-exporter #655, shipped in 4.6.0-4.8.3 per its release notes); ``hostname`` in ``gpuwatch``;
- ``shared_gpus``: how a GPU held by several pods (time-slicing, MPS) is served.
  ``one-pod``: dcgm-exporter's default — one series per device, labelled with the pod the kubelet
  listed last for it (dcgm-exporter fills a device -> pod map in the kubelet's List order, so the last
  entry wins). ``per-pod``: the device's series for every field, and for the fields a source
  measures per process (GPU_UTIL, FB_USED) the pods' own shares as extra series labelled with each
  pod, the device-level series then carrying only the unattributed remainder (dcgm-exporter's
  ``--kubernetes-virtual-gpus`` instead repeats every device-wide value once per pod, which
  multiplies power and memory sums by the number of sharers; gpuwatch never does that);
- ``device_wide``: how a MIG GPU's device-wide fields (fields.DEVICE_WIDE: power, energy, clocks,
  temperatures, ...) are served. ``per-instance``: dcgm-exporter's shape — on every GPU-instance
  series, each with the board's value, so ``sum`` counts a board once per instance and gpuwatch's own
  sums use ``sum(max by (UUID) (...))``. ``per-gpu``: once per GPU, on a series with the GPU's labels
  and no GPU_I_* labels, the instance series keeping only the instance's own fields; ``sum`` and
  ``sum by (UUID)`` are then the boards' values.

Every pod holding a device, shared or not, is listed in ``gpuwatch_gpu_allocation_info`` in every
profile. ``dcgm-exporter-4.8.2`` is the default: it is what dashboards, alerts and OpenCost's queries
written for dcgm-exporter read (README "Compatibility profiles").
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch import fields
from gpuwatch.exporter.families import Options

SHARED_MODES = ("one-pod", "per-pod")
DEVICE_WIDE_MODES = ("per-instance", "per-gpu")
HOSTNAME_RENAMED_IN = "4.6.0-4.8.3"  # dcgm-exporter #655 (Hostname -> hostname), per that release's notes


def exporter_version(tag: str) -> tuple[int, ...]:
    """dcgm-exporter's own version in a release tag ``<DCGM>-<exporter>``: "4.6.0-4.8.3" -> (4, 8, 3)."""
    return tuple(int(p) for p in tag.rsplit("-", 1)[1].split("."))


@dataclass(frozen=True)
class Profile:
    naming: str
    shared_gpus: str
    device_wide: str
    summary: str
    releases: tuple[str, str] | None = None  # first and last dcgm-exporter release reproduced; None: gpuwatch's own

    @property
    def hostname_label(self) -> str:
        """``Hostname`` for releases before dcgm-exporter's #655 rename, else ``hostname``."""
        if self.releases is None:
            return "hostname"
        return "Hostname" if exporter_version(self.releases[0]) < exporter_version(HOSTNAME_RENAMED_IN) else "hostname"

    @property
    def covers(self) -> str:
        """The releases this profile reproduces, as their tags."""
        if self.releases is None:
            return "gpuwatch's own conventions"
        first, last = self.releases
        return f"dcgm-exporter {first}" if first == last else f"dcgm-exporter {first} to {last}"


PROFILES: dict[str, Profile] = {
    "dcgm-exporter-4.8.2": Profile("4.8", "one-pod", "per-instance",
                                   "names and units (%, MiB, MHz, mJ) and Hostname; one series per GPU (per MIG "
                                   "instance) labelled with the last pod the kubelet lists",
                                   ("4.2.3-4.1.1", "4.5.3-4.8.2")),
    "dcgm-exporter-4.8.4": Profile("4.8", "one-pod", "per-instance",
                                   "the same names and units, hostname (#655); one series per GPU (per MIG "
                                   "instance) labelled with the last pod listed",
                                   ("4.6.0-4.8.3", "4.6.1-4.8.4")),
    "dcgm-exporter-4.9": Profile("4.9", "one-pod", "per-instance",
                                 "the renamed fields in base units (ratio, bytes, Hz, J, B/s) and "
                                 "DCGM_FI_DEV_FB_CAPACITY_BYTES, hostname; one series per GPU labelled with the last "
                                 "pod listed", ("4.7.0-4.9.0", "4.7.0-4.9.0")),
    "gpuwatch": Profile("4.8", "per-pod", "per-gpu",
                        "dcgm-exporter 4.8 names and units, hostname, each sharing pod's own GPU_UTIL and FB_USED "
                        "beside the device's series, a MIG GPU's device-wide fields once per GPU; this changes what "
                        "averages over GPU_UTIL and {container!=\"\"} joins of peers' queries mean (README)"),
}
# Earlier names still accepted: dcgm-exporter-4.8 was the profile of 4.5.3-4.8.2 and older.
ALIASES: dict[str, str] = {"dcgm-exporter-4.8": "dcgm-exporter-4.8.2"}
DEFAULT = "dcgm-exporter-4.8.2"


def resolve(profile: str) -> str:
    """The profile's key (an alias resolved); ValueError names the choices."""
    key = ALIASES.get(profile, profile)
    if key not in PROFILES:
        raise ValueError(f"unknown compatibility profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return key


def describe(name: str) -> str:
    """One profile for ``--help`` and the README: the releases it covers, what it serves, and the
    names or units it serves that no upstream source confirms (fields.py's evidence)."""
    p = PROFILES[name]
    guessed = fields.unverified(p.naming)
    return f"{name}: {p.covers}: {p.summary}" + (
        f" (UNVERIFIED, no upstream source found: {', '.join(n.name for n in guessed)})" if guessed else "")


def options(profile: str = DEFAULT, *, hostname_label: str | None = None, virtual_gpus: bool = False,
            profiling: bool = True) -> Options:
    """The exporter's options for ``profile``; ``hostname_label`` overrides the profile's label name,
    ``virtual_gpus`` (``--kubernetes-virtual-gpus``) serves shared GPUs per pod in any profile."""
    p = PROFILES[resolve(profile)]
    return Options(hostname_label=hostname_label or p.hostname_label, profiling=profiling, naming=p.naming,
                   shared_gpus="per-pod" if virtual_gpus else p.shared_gpus, device_wide=p.device_wide)
