"""Prometheus HTTP API replies: the ``data`` of a reply, and a ``matrix`` as arrays.

Everything a real Prometheus would never send is a ``PrometheusError`` naming the query (and never a
traceback later): a body that is not JSON or not an API reply, a series that is not an object,
labels that are not text, points that are not [timestamp, value] pairs, a value that is null, a
boolean or not a number, a timestamp outside the queried range. NaN and ±Inf values are kept as NaN
(missing readings).
"""

from __future__ import annotations

import json

import numpy as np

from gpuwatch import units

_NUMBER_TYPES = frozenset({int, float, str})  # what a reply's timestamps and values may be in JSON ("1.5", 1.5, 1)
_TS_SLACK = 0.002  # a reply's timestamps lie on the queried grid: start and end are sent with 3 decimals
_YEARS = (946_684_800.0, 4_102_444_800.0)  # 2000-01-01 .. 2100-01-01: where a timestamp is plausible at all


class PrometheusError(units.DataError):
    """Prometheus could not answer: HTTP failure, ``status: error``, or a malformed reply."""


def parse_reply(status: int, body: bytes, *, what: str):
    """The ``data`` of a Prometheus API reply; ``PrometheusError`` for anything else."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise PrometheusError(f"{what}: HTTP {status}, truncated or invalid JSON ({len(body)} bytes): {exc}") from exc
    if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
        raise PrometheusError(f"{what}: HTTP {status}, not a Prometheus API reply: {body[:200]!r}")
    if doc["status"] == "error" or status >= 400:
        hint = " (lower --chunk or nodes_per_query)" if "too many samples" in str(doc.get("error")) else ""
        raise PrometheusError(f"{what}: HTTP {status}, {doc.get('errorType', 'error')}: {doc.get('error')}{hint}")
    if "data" not in doc:
        raise PrometheusError(f"{what}: reply has no 'data'")
    return doc["data"]


def parse_matrix(data, *, query: str = "", bounds: tuple[float, float] | None = None) -> list[tuple[dict, np.ndarray, np.ndarray]]:
    """(labels, ts, values) per series of a ``matrix`` reply; NaN/±Inf values kept as NaN. A reply
    Prometheus would not send is a ``PrometheusError`` naming the query: a series that is not an
    object, labels that are not text, points that are not [timestamp, value] pairs, a value that is
    null or not a number, a timestamp outside ``bounds`` (the queried [start, end]) or not finite."""
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise PrometheusError(f"{query}: expected a matrix result, got {str(data)[:200]}")
    return [_series(item, query=query, bounds=bounds) for item in data["result"]]


def _series(item, *, query: str, bounds: tuple[float, float] | None) -> tuple[dict, np.ndarray, np.ndarray]:
    def malformed(why: str) -> PrometheusError:
        return PrometheusError(f"{query}: malformed series {str(item)[:200]}: {why}")

    if not isinstance(item, dict) or not isinstance(item.get("values"), list):
        raise malformed("expected an object with a 'values' list")
    labels = item.get("metric", {})
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise malformed("'metric' is not an object of text labels")
    try:
        points = np.array(item["values"], dtype=object)
        points = points.reshape(-1, 2) if points.size == 0 else points
        if points.ndim != 2 or points.shape[1] != 2:
            raise ValueError("points are not [timestamp, value] pairs")
        for column in (points[:, 0], points[:, 1]):
            if not set(map(type, column)) <= _NUMBER_TYPES:
                raise ValueError("a timestamp or value is not a number (null, true, a list?)")
        ts, values = points[:, 0].astype(float), points[:, 1].astype(float)
    except (TypeError, ValueError, OverflowError) as exc:
        raise malformed(str(exc)) from None
    lo, hi = (bounds[0] - _TS_SLACK, bounds[1] + _TS_SLACK) if bounds else _YEARS
    outside = ~np.isfinite(ts) | (ts < lo) | (ts > hi)
    if outside.any():
        raise malformed(f"timestamp {float(ts[outside][0])!r} is outside the query's range"
                        + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else ""))
    values[~np.isfinite(values)] = np.nan
    return dict(labels), ts, values
