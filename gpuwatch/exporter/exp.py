"""dcgm-exporter's computed ``DCGM_EXP_*`` metrics that gpuwatch can compute from what sources read.

dcgm-exporter (internal/pkg/collector/expcollector.go, clock_events_collector.go, xid_collector.go,
counters/const.go; flags in pkg/cmd/app.go) serves, when its counters CSV lists them:

- ``DCGM_EXP_CLOCK_EVENTS_COUNT{clock_event, window_size_in_ms}``: per GPU, for each clock event
  reason, how many DCGM samples of field 112 (DCGM_FI_DEV_CLOCKS_EVENT_REASONS, formerly
  DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, a bitmask) within the last window had that reason's bit set.
  Window: ``--clock-events-count-window-size`` ms, default 300000.
- ``DCGM_EXP_XID_ERRORS_COUNT{xid, window_size_in_ms}``: per GPU, how many XID errors (samples of
  field 230, DCGM_FI_DEV_XID_ERRORS, whose value is the XID) within the last window, per XID.
  Window: ``--xid-count-window-size`` ms, default 300000.

A GPU with nothing in the window gets one sample of value 0 carrying only ``window_size_in_ms``.
TYPE and HELP come from the counters file row (dcgm-exporter's commented-out defaults below).

gpuwatch sees one latest value per field per refresh, not DCGM's stored samples, so:

- a clock event reason counts once per refresh in which it was active (dcgm-exporter: once per DCGM
  sample, i.e. per its collect interval) — same meaning, scaled by gpuwatch's ``--interval``;
- an XID counts when field 230's value changes to a non-zero XID. ``DeviceReading`` carries no
  per-value timestamps, so a repeat of the *same* XID (value unchanged) is not seen, and the value
  found at the first refresh is the baseline, not an event (it may predate gpuwatch).

``DCGM_EXP_GPU_HEALTH_STATUS`` (DCGM health watches) and ``DCGM_EXP_P2P_STATUS`` (DCGM's
GPU-pair NVLink P2P matrix, ``dcgmGetNvLinkP2PStatus``) need DCGM APIs no source reads: not computed.

Pure: ``update(now, readings)`` is fed each refresh with the refresh's clock; no I/O, no own clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuwatch import fields
from gpuwatch.sources import DeviceReading

if TYPE_CHECKING:
    from gpuwatch.exporter.counters import Counter

FI_CLOCKS_EVENT_REASONS = fields.fid("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
FI_XID_ERRORS = fields.fid("DCGM_FI_DEV_XID_ERRORS")
DEFAULT_WINDOW_S = 300.0  # dcgm-exporter's default for both window flags (300000 ms)
WINDOW_LABEL = "window_size_in_ms"

# DCGM_CLOCKS_EVENT_REASON_* bits (dcgm_fields.py) -> dcgm-exporter's clock_event label values.
CLOCK_EVENTS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "clocks_setting",
    0x004: "power_cap",  # DCGM's SW_POWER_CAP
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "hw_power_brake",
    0x100: "display_clocks",
}


@dataclass(frozen=True)
class ExpSpec:
    """One computed metric: the DCGM field it is derived from, its extra label, default TYPE/HELP."""

    name: str
    field_id: int
    label: str
    type: str
    help: str
    window_flag: str  # dcgm-exporter's flag for its window (ms)


EXP: dict[str, ExpSpec] = {s.name: s for s in (
    ExpSpec("DCGM_EXP_CLOCK_EVENTS_COUNT", FI_CLOCKS_EVENT_REASONS, "clock_event", "counter",
            "reported clock events", "clock-events-count-window-size"),
    ExpSpec("DCGM_EXP_XID_ERRORS_COUNT", FI_XID_ERRORS, "xid", "counter",
            "reported XIDs during last window", "xid-count-window-size"),
)}
# dcgm-exporter metrics gpuwatch knows but does not compute, and why (said when a counters file asks).
NOT_COMPUTED: dict[str, str] = {
    "DCGM_EXP_GPU_HEALTH_STATUS": "it needs DCGM health watches, which no gpuwatch source runs",
    "DCGM_EXP_P2P_STATUS": "it needs DCGM's GPU-pair NVLink P2P status (dcgmGetNvLinkP2PStatus), "
                           "which no gpuwatch source reads",
}


@dataclass(frozen=True)
class ExpSample:
    """One sample: the device it belongs to (``Device.key``), the labels it adds to that device's
    labels (sorted by name, as dcgm-exporter renders them), and its value."""

    device_key: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class ExpFamily:
    """One computed metric as served: name, TYPE and HELP (from the counters file), its samples."""

    name: str
    type: str
    help: str
    samples: tuple[ExpSample, ...]


def clock_events(mask: int) -> list[str]:
    """The clock_event names of the reasons set in a DCGM_FI_DEV_CLOCKS_EVENT_REASONS bitmask
    (bits DCGM does not name are ignored, as dcgm-exporter does)."""
    return [name for bit, name in CLOCK_EVENTS.items() if int(mask) & bit]


class ExpMetrics:
    """Windowed counts of clock events and XIDs per device, fed one refresh at a time."""

    def __init__(self, names: Sequence[str | Counter], window_s: float = DEFAULT_WINDOW_S, *,
                 windows: Mapping[str, float] | None = None):
        """``names``: the DCGM_EXP_* metrics to compute, as names (dcgm-exporter's default TYPE
        and HELP) or counters-file rows (their TYPE and HELP). ``window_s`` applies to each unless
        ``windows`` gives that name its own (``--xid-count-window-size`` and
        ``--clock-events-count-window-size`` are separate flags). KeyError on a name not in EXP."""
        windows = windows or {}
        self._rows: list[tuple[ExpSpec, str, str, float]] = []
        for item in names:
            name = item if isinstance(item, str) else item.name
            if any(spec.name == name for spec, *_ in self._rows):
                continue  # one set of counts per metric
            spec = EXP[name]
            kind, text = (spec.type, spec.help) if isinstance(item, str) else (item.type, item.help)
            self._rows.append((spec, kind, text, float(windows.get(name, window_s))))
        self._events: dict[tuple[str, str], deque[tuple[float, str]]] = {}  # (metric, device) -> events
        self._last_xid: dict[str, int | None] = {}
        self._devices: tuple[str, ...] = ()

    @property
    def field_ids(self) -> tuple[int, ...]:
        """The DCGM fields these metrics are computed from (the source must watch them)."""
        return tuple(dict.fromkeys(spec.field_id for spec, *_ in self._rows))

    def update(self, now: float, readings: Sequence[DeviceReading]) -> None:
        """Take one refresh's readings at time ``now`` (seconds, non-decreasing)."""
        readable = [r for r in readings if r.error is None]
        for spec, _, _, window in self._rows:
            for reading in readable:
                events = self._events.setdefault((spec.name, reading.device.key), deque())
                events.extend((now, label) for label in self._new_events(spec, reading))
                while events and events[0][0] < now - window:
                    events.popleft()
        present = {r.device.key for r in readings}
        self._events = {k: v for k, v in self._events.items() if k[1] in present}
        self._last_xid = {k: v for k, v in self._last_xid.items() if k in present}
        self._devices = tuple(r.device.key for r in readable)

    def _new_events(self, spec: ExpSpec, reading: DeviceReading) -> list[str]:
        value = reading.values.get(spec.field_id)
        if spec.field_id == FI_CLOCKS_EVENT_REASONS:
            return clock_events(value) if value is not None else []
        key = reading.device.key
        if key not in self._last_xid:  # first refresh: the baseline, which may predate gpuwatch
            self._last_xid[key] = None if value is None else int(value)
            return []
        if value is None or int(value) == self._last_xid[key]:
            return []
        self._last_xid[key] = int(value)
        return [str(int(value))] if int(value) != 0 else []

    def samples(self) -> list[ExpFamily]:
        """Each metric's family as of the last update: per device read then, one sample per label
        value seen in the window (its count), or one 0 sample when the window holds none."""
        out = []
        for spec, kind, text, window in self._rows:
            window_label = {WINDOW_LABEL: str(round(window * 1000))}
            samples = []
            for key in self._devices:
                counts: dict[str, int] = {}
                for _, label in self._events.get((spec.name, key), ()):
                    counts[label] = counts.get(label, 0) + 1
                if not counts:
                    samples.append(ExpSample(key, window_label, 0.0))
                for label, count in counts.items():
                    samples.append(ExpSample(key, dict(sorted((window_label | {spec.label: label}).items())),
                                             float(count)))
            out.append(ExpFamily(spec.name, kind, text, tuple(samples)))
        return out
