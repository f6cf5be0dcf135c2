"""Exporter series -> the bundle's ``health`` frame: one row per GPU health event (model.HEALTH_KINDS).

Per physical GPU (node, gpu_uuid): dcgm-exporter repeats these GPU-wide fields on every MIG instance,
and labels DCGM_FI_DEV_XID_ERRORS with ``err_code``/``err_msg`` (a new series per XID), so all of a
GPU's series of one field are merged first, one value per timestamp (the largest: MIG copies are
equal, and where an XID's series starts as the previous one ends, the new XID wins). NaN and
negative values are missing, never 0. Names of every dcgm-exporter generation (fields.NAMES):

- ``xid`` (DCGM_FI_DEV_XID_ERRORS, 4.9 DCGM_FI_DEV_XID_ERROR; code = the XID): the gauge holds the
  last XID, so an event is a change to a non-zero value. The first sample's non-zero value is an
  event at that sample: it happened at or before it (when is unknown), and reading the same window
  again gives the same row. The same XID twice in a row cannot be told from the gauge.
- ``ecc_dbe`` (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, volatile double-bit ECC errors, off in dcgm-exporter's
  default counters; code = errors in the event): an increase between samples. A drop is a counter
  reset (driver reload), not an event; the value it restarts from is new errors, as Prometheus'
  ``increase()`` counts them. The first sample is the baseline.
- ``row_remap_failure`` (DCGM_FI_DEV_ROW_REMAP_FAILURE, 4.9 DCGM_FI_DEV_ROW_REMAP_FAILED): 0 -> 1,
  or 1 on the first sample (as for XIDs).
- ``lost`` (gpuwatch_gpu_lost, served only while a GPU is off the bus): 0 -> 1, the first sample, or
  1 again after more than one step (``Context.step``) without the series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from gpuwatch import fields
from gpuwatch.ingest.series import Context, Series, device_of, nones
from gpuwatch.model import BUNDLE_COLUMNS

Events = tuple[np.ndarray, np.ndarray]  # (ts, code: NaN where the kind has none)


def _names(field: str) -> list[str]:
    """Every served name of DCGM ``field`` (all generations)."""
    return [n.name for n in fields.NAMES.values() if n.field.id == fields.fid(field)]


# served name -> event kind; a reader must fetch these step by step (the last value in each step)
KINDS: dict[str, str] = {
    **dict.fromkeys(_names("DCGM_FI_DEV_XID_ERRORS"), "xid"),
    **dict.fromkeys(_names("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), "ecc_dbe"),
    **dict.fromkeys(_names("DCGM_FI_DEV_ROW_REMAP_FAILURE"), "row_remap_failure"),
    "gpuwatch_gpu_lost": "lost",
}


def health_frame(series: Iterable[Series], ctx: Context):
    """The ``health`` frame (model.BUNDLE_COLUMNS, ``ts`` in epoch seconds) from exporter ``series``."""
    import pandas as pd

    parts: dict[tuple[str, str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    for s in series:
        kind = KINDS.get(s.name)
        if kind is not None and (device := device_of(s.labels)) is not None:
            ok = np.isfinite(s.values) & (s.values >= 0)
            parts.setdefault((device[0], device[1], kind), []).append((s.ts[ok], s.values[ok]))
    rows = []
    for (node, uuid, kind), found in sorted(parts.items()):
        ts, values = _merged(found)
        at, codes = EVENTS[kind](ts, values, ctx.step) if len(ts) else (ts, values)
        rows += [(t, node, uuid, kind, None if np.isnan(c) else int(c)) for t, c in zip(at.tolist(), codes.tolist(), strict=True)]
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["health"])).astype({"ts": float, "code": "Int64"})
    return nones(frame.sort_values(["ts", "node", "gpu_uuid", "kind"]).reset_index(drop=True), "node", "gpu_uuid", "kind")


def _merged(found: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One value per timestamp over a GPU's series of one field (the largest), ts ascending."""
    ts, inverse = np.unique(np.concatenate([t for t, _ in found]), return_inverse=True)
    values = np.full(len(ts), -np.inf)
    np.maximum.at(values, inverse, np.concatenate([v for _, v in found]))
    return ts, values


def _before(values: np.ndarray) -> np.ndarray:
    """Each sample's predecessor, 0 before the first (no event known before the window)."""
    return np.concatenate([[0.0], values[:-1]])


def _xid(ts: np.ndarray, values: np.ndarray, step: float | None) -> Events:
    hit = (values != _before(values)) & (values != 0)
    return ts[hit], values[hit]


def _ecc(ts: np.ndarray, values: np.ndarray, step: float | None) -> Events:
    rise = np.diff(values)
    added = np.where(rise >= 0, rise, values[1:])  # a drop: reset to 0, then ``values`` new errors
    return ts[1:][added > 0], added[added > 0]


def _rising(ts: np.ndarray, values: np.ndarray, step: float | None) -> Events:
    hit = (values >= 1) & (_before(values) < 1)
    return ts[hit], np.full(hit.sum(), np.nan)


def _lost(ts: np.ndarray, values: np.ndarray, step: float | None) -> Events:
    gap = np.concatenate([[True], np.diff(ts) > 1.5 * step if step else np.zeros(len(ts) - 1, bool)])
    hit = (values >= 1) & ((_before(values) < 1) | gap)
    return ts[hit], np.full(hit.sum(), np.nan)


EVENTS: dict[str, Callable[[np.ndarray, np.ndarray, float | None], Events]] = {
    "xid": _xid, "ecc_dbe": _ecc, "row_remap_failure": _rising, "lost": _lost}
