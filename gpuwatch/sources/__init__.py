"""GPU telemetry sources for the node exporter, and the records they hand it.

A source reads one node's GPUs (whole GPUs and MIG GPU instances) and returns a ``Snapshot``:
one ``DeviceReading`` per device with values keyed by **DCGM field id in DCGM units** (GPU_UTIL
in %, FB in MiB, PROF_* as ratios, power in W) — the exporter renders them under dcgm-exporter's
names, so every source speaks the same dialect. Sources are an explicit registry (``SOURCES``);
each module is imported only when chosen, and imports its heavy client lazily.

Every source module exposes ``open_source(options: SourceOptions) -> Source`` and
``probe(options) -> str | None`` (``None`` = usable, else why not; used by ``--source auto``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpuwatch.model import Device

# name -> module. Adding a source is adding a module and a line here (auto tries them in order).
SOURCES: dict[str, str] = {
    "dcgm": "gpuwatch.sources.dcgm",
    "nvml": "gpuwatch.sources.nvml",
    "simulate": "gpuwatch.sources.simulate",
}
AUTO_ORDER: tuple[str, ...] = ("dcgm", "nvml")

Value = int | float


@dataclass(frozen=True)
class ProcessReading:
    """One process on a device (time-sliced sharing): its pid, and its pod when the source knows it."""

    pid: int
    values: Mapping[int, Value]
    namespace: str | None = None
    pod: str | None = None


@dataclass(frozen=True)
class DeviceReading:
    """One device's latest values (DCGM field id -> value in DCGM units; absent = not available).

    ``error`` is set when this device could not be read; the exporter then renders no values for
    it but keeps scraping the rest and says why on /healthz.
    """

    device: Device
    values: Mapping[int, Value] = field(default_factory=dict)
    processes: tuple[ProcessReading, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """What one read of a source returned. ``lost`` = UUIDs of GPUs that fell off the bus;
    ``driver_version`` / ``cuda_driver_version`` the node's ("550.127.08", "12.4"; None = unknown)."""

    source: str
    readings: tuple[DeviceReading, ...]
    lost: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None


@dataclass(frozen=True)
class SourceOptions:
    """Everything a source may need; each source uses only its own fields."""

    node: str
    interval_s: float = 1.0
    profiling: bool = True
    dcgm_bindings: str | None = None
    dcgm_host: str | None = None
    extra_field_ids: tuple[int, ...] = ()  # DCGM fields to watch beyond fields.FIELDS (a counters file's)
    simulate_gpus: int = 64
    simulate_seed: int = 0
    simulate_node: str = "all"
    simulate_start: float | None = None
    simulate_days: float = 7.0


class Source(Protocol):
    name: str

    def read(self, now: float) -> Snapshot:
        """Read every device once. May raise: the exporter reports the source as down."""

    def close(self) -> None:
        """Release handles (NVML shutdown, DCGM disconnect)."""


class NoSourceError(RuntimeError):
    """No usable source: the message names each one tried and why it was not usable."""


def open_source(name: str, options: SourceOptions) -> Source:
    """Open source ``name`` (a key of SOURCES, or ``auto``: dcgm if importable, else nvml)."""
    if name == "auto":
        usable, reasons = _probe(options)
        if usable is None:  # serve, saying why: /healthz 503 as --source nvml does, never a crash loop
            return AwaitingSource(options, reasons)
        name = usable
    if name not in SOURCES:
        raise NoSourceError(f"unknown source {name!r}; choose one of {', '.join(SOURCES)} or auto")
    return importlib.import_module(SOURCES[name]).open_source(options)


def _probe(options: SourceOptions) -> tuple[str | None, list[str]]:
    """The first usable source of AUTO_ORDER, and why each one before it is not."""
    reasons = []
    for candidate in AUTO_ORDER:
        why = importlib.import_module(SOURCES[candidate]).probe(options)
        if why is None:
            return candidate, reasons
        reasons.append(f"{candidate}: {why}")
    return None, reasons


class AwaitingSource:
    """``--source auto`` on a node where no source is usable yet (no driver, no bindings): every read
    fails saying why, so the exporter serves ``gpuwatch_source_up 0`` and ``/healthz`` 503 with the
    reason, as ``--source nvml`` does, instead of exiting (a DaemonSet would crash-loop); each read
    probes again and a source that becomes usable (a driver loaded late) is opened and read from then on."""

    name = "auto"

    def __init__(self, options: SourceOptions, reasons: list[str]):
        self.options, self.reasons = options, reasons
        self.source: Source | None = None

    def read(self, now: float) -> Snapshot:
        if self.source is None:
            usable, self.reasons = _probe(self.options)
            if usable is None:
                raise NoSourceError("no GPU source usable (--source auto): " + "; ".join(self.reasons))
            self.source = importlib.import_module(SOURCES[usable]).open_source(self.options)
        return self.source.read(now)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
