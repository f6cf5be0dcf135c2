"""Prometheus text format 0.0.4, rendered the way dcgm-exporter renders it.

prometheus_client's ``generate_latest`` would rename counter families to ``<name>_total`` in the
TYPE line and print doubles as Go floats; dcgm-exporter prints ``# TYPE DCGM_FI_DEV_TOTAL_ENERGY_
CONSUMPTION counter`` and values as ``%d`` (int64 fields) or ``%f`` (double fields), and
dashboards/parsers written against it expect exactly that. So the collector's families (built on a
private CollectorRegistry) are rendered here. A label dict shared by many samples is escaped once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpuwatch.exporter.metrics import BY_NAME

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(families: Iterable, *, openmetrics: bool = False) -> bytes:
    """Text exposition of prometheus_client ``Metric`` families (formats per metrics.METRICS).

    Samples carrying a timestamp get one (ms in text format). ``openmetrics=True`` writes
    OpenMetrics for ``promtool tsdb create-blocks-from openmetrics``: timestamps in seconds,
    counters typed ``unknown`` (OpenMetrics would demand a ``_total`` suffix dcgm-exporter never
    used, which would rename the series) and a final ``# EOF``.
    """
    out: list[str] = []
    label_cache: dict[int, str] = {}
    keep_alive: list[dict] = []  # ids in label_cache stay valid while their dicts are alive
    for family in families:
        if not family.samples:
            continue
        spec = BY_NAME.get(family.name)
        fmt = spec.fmt if spec else "g"
        typ = "unknown" if openmetrics and family.type == "counter" else family.type
        out.append(f"# HELP {family.name} {_escape_help(family.documentation)}\n# TYPE {family.name} {typ}\n")
        for sample in family.samples:
            labels = sample.labels
            text = label_cache.get(id(labels))
            if text is None:
                text = label_cache[id(labels)] = _labels(labels)
                keep_alive.append(labels)
            ts = "" if sample.timestamp is None else _timestamp(sample.timestamp, openmetrics)
            out.append(f"{sample.name}{text} {format_value(sample.value, fmt)}{ts}\n")
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()


def _timestamp(seconds: float, openmetrics: bool) -> str:
    return f" {seconds:.3f}" if openmetrics else f" {round(seconds * 1000)}"


def format_value(value: float, fmt: str) -> str:
    """``%d`` for DCGM int64 fields, ``%f`` for DCGM doubles, Go-style float otherwise."""
    if fmt == "i":
        return f"{int(value):d}"
    if fmt == "d":
        return f"{value:f}"
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):d}"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
