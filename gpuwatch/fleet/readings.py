"""The synthetic fleet's signals: a pure function of (seed, segment, timestamp) per behaviour, so a
live exporter reading "now" and a bundle written for a week agree sample for sample."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gpuwatch.fleet.catalog import EMPTY_FB_MIB, GPU_SPECS, SIGNALS, Fleet, Segment
from gpuwatch.model import Device, Pod
from gpuwatch.units import MIB

_M64 = (1 << 64) - 1


def signals(fleet: Fleet, segment: Segment, ts: np.ndarray) -> dict[str, np.ndarray]:
    """Base-unit signal columns for ``segment`` at timestamps ``ts`` (all inside the segment)."""
    device = fleet.devices[segment.device]
    spec = GPU_SPECS[device.gpu_model]
    stream = _stream(fleet.seed, segment.device, segment.pod)
    u = [_uniform(stream + i, ts) for i in range(6)]
    ones = np.ones(len(ts))
    cols = _BEHAVIOURS[segment.kind](segment, ts, u)
    held = _held_bytes(device, segment, share=cols.pop("fb_share", None))
    cols["fb_used_bytes"] = np.round(held * (0.985 + 0.015 * u[5]) / MIB) * MIB
    activity = np.nan_to_num(cols["sm_active"], nan=cols["gpu_util"].mean() if len(ts) else 0.0)
    cols["power_watts"] = spec["idle_w"] + (spec["tdp_w"] - spec["idle_w"]) * np.minimum(activity, 1.0) * 0.85
    talks = segment.multi_gpu and spec["nvlinks"] > 0  # PCIe-only boards (L40S) carry no NVLink traffic
    link = 2.0e10 * (0.5 + 0.5 * u[4]) * (cols["sm_active"] > 0.2) if talks else 0.0 * ones
    cols["nvlink_tx_bytes_per_second"] = link
    cols["nvlink_rx_bytes_per_second"] = link
    return _finish(cols, device=device, segment=segment)


def _held_bytes(device: Device, segment: Segment, *, share: np.ndarray | None):
    """Memory the occupant holds before noise: explicit bytes, else a share the behaviour grows, else
    the segment's fixed share; an empty device, what nvidia-smi shows one holding (catalog.EMPTY_FB_MIB)."""
    if segment.fb_bytes is not None:
        return segment.fb_bytes
    if share is None and segment.pod is None:
        return EMPTY_FB_MIB[device.mig_placement_size] * MIB
    return device.fb_total_bytes * (segment.fb_frac if share is None else share)


def iter_samples(fleet: Fleet, ts: np.ndarray) -> Iterator[tuple[Segment, np.ndarray, dict[str, np.ndarray]]]:
    """For each segment, the grid timestamps that fall in it and their signals."""
    for segment in fleet.segments:
        lo, hi = np.searchsorted(ts, [segment.start, segment.end], side="left")
        if hi > lo:
            part = ts[lo:hi]
            yield segment, part, signals(fleet, segment, part)


def readings_at(fleet: Fleet, t: float, *, node: str | None = None) -> list[tuple[Device, Pod | None, dict[str, float]]]:
    """Every occupant's signals at instant ``t`` (optionally one node's), for the live exporter."""
    out = []
    ts = np.array([float(t)])
    for segment in fleet.segments:
        device = fleet.devices[segment.device]
        if segment.start <= t < segment.end and (node is None or device.node == node):
            values = {k: float(v[0]) for k, v in signals(fleet, segment, ts).items()}
            out.append((device, None if segment.pod is None else fleet.pods[segment.pod], values))
    return out


def _training(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    util = 0.9 + 0.1 * u[0]
    sm = 0.5 + 0.35 * u[1]
    return {"gpu_util": util, "gr_engine_active": util * (0.97 + 0.03 * u[2]), "sm_active": sm,
            "sm_occupancy": sm * (0.35 + 0.3 * u[3]), "tensor_active": 0.2 + 0.5 * u[2],
            "dram_active": 0.25 + 0.4 * u[3]}


def _inference(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    phase = (seg.pod or 0) * 3217.0
    load = np.clip(0.4 + 0.25 * np.sin(2 * np.pi * (ts - phase) / 86400.0) + 0.1 * (u[0] - 0.5), 0.15, 0.95)
    sm = 0.6 * load + 0.05 + 0.05 * u[1]
    return {"gpu_util": load, "gr_engine_active": load * 0.98, "sm_active": sm, "sm_occupancy": sm * 0.4,
            "tensor_active": 0.5 * sm * u[2], "dram_active": 0.3 * load + 0.05 * u[3]}


def _notebook(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    warm = ts < seg.start + 0.03 * (seg.end - seg.start)
    blip = u[0] < 0.01
    util = np.where(warm, 0.3 + 0.3 * u[1], np.where(blip, 0.1 + 0.2 * u[1], 0.0))
    sm = np.where(warm | blip, 0.6 * util, 0.0005 * u[2])
    return {"gpu_util": util, "gr_engine_active": np.where(util > 0, util * 0.98, 0.001 * u[3]),
            "sm_active": sm, "sm_occupancy": sm * 0.3, "tensor_active": sm * 0.2 * u[3],
            "dram_active": sm * 0.3}


def _stalled(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Busy-looking but doing nothing: spin kernels, NCCL waits (after a short real warm-up)."""
    warm = ts < seg.start + 0.05 * (seg.end - seg.start)
    base = _training(seg, ts, u)
    stalled = {"gpu_util": 0.97 + 0.03 * u[0], "gr_engine_active": 0.95 + 0.05 * u[2],
               "sm_active": 0.01 + 0.1 * u[1], "sm_occupancy": 0.002 + 0.01 * u[3],
               "tensor_active": 0.0 * u[0], "dram_active": 0.005 * u[3]}
    return {k: np.where(warm, base[k], stalled[k]) for k in stalled}


def _ramp(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Training whose memory grows until its device is full (it then crashes): from 30% to 99% of
    the device over the first 70% of the run."""
    cols = _training(seg, ts, u)
    progress = (ts - seg.start) / max(seg.end - seg.start, 1.0)
    cols["fb_share"] = 0.3 + 0.69 * np.minimum(1.0, progress / 0.7)
    return cols


def _lagging(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The straggler of a synchronous job: underfed, its SMs mostly wait while its peers compute."""
    util = 0.25 + 0.2 * u[0]
    sm = 0.1 + 0.1 * u[1]
    return {"gpu_util": util, "gr_engine_active": util * 0.97, "sm_active": sm, "sm_occupancy": sm * 0.3,
            "tensor_active": 0.05 * u[2], "dram_active": 0.05 + 0.1 * u[3]}


def _idle(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    zero = 0.0 * u[0]
    return {"gpu_util": zero, "gr_engine_active": zero, "sm_active": zero, "sm_occupancy": zero,
            "tensor_active": zero, "dram_active": 0.0002 * u[1]}


_BEHAVIOURS = {"training": _training, "inference": _inference, "notebook": _notebook,
               "stalled": _stalled, "idle": _idle, "ramp": _ramp, "lagging": _lagging}


def _finish(cols: dict[str, np.ndarray], *, device: Device, segment: Segment) -> dict[str, np.ndarray]:
    """Apply what the hardware can't report: no GPU_UTIL on MIG, no per-pod profiling when shared."""
    nan = np.full(len(cols["gpu_util"]), np.nan)
    if segment.share < 1.0:  # per-process utilisation only; profiling fields are device-wide
        busy = cols["gpu_util"] > 0
        cols["gpu_util"] = np.where(busy, 0.1 + 0.4 * cols["gpu_util"], 0.0)
        for name in ("gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"):
            cols[name] = nan
    if device.is_mig:  # GPU_UTIL does not exist on MIG; power is GPU-wide, not per instance
        cols["gpu_util"] = nan
        cols["power_watts"] = nan
    if not segment.profiling:
        for name in ("gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"):
            cols[name] = nan
    for name in ("gpu_util", "gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"):
        cols[name] = np.round(cols[name], 4)
    cols["power_watts"] = np.round(cols["power_watts"], 1)
    return {name: np.asarray(cols[name], dtype=float) for name in SIGNALS}


def _stream(seed: int, device: int, pod: int | None) -> int:
    return ((seed * 1_000_003 + device) * 1_000_033 + (pod if pod is not None else 999_983)) * 16 & _M64


def _uniform(stream: int, ts: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) from splitmix64 of (stream, whole second): same t, same value, always."""
    x = np.asarray(ts, dtype=np.float64).astype(np.int64).astype(np.uint64)
    x = x + np.uint64((stream * 0x9E3779B97F4A7C15) & _M64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
