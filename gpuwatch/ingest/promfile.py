"""A saved ``/metrics`` page (dcgm-exporter's or gpuwatch's, any label generation) -> bundle frames.

``read_file`` does the I/O; ``parse`` is pure. The text is parsed by prometheus_client's parser
(``text_string_to_metric_families``), not by hand. Sample time: the page's own timestamps where a
line has one, else ``at``, else the file's modification time. Units and labels are converted by
``promframes`` (GPU_UTIL % -> ratio, FB MiB -> bytes; ``Hostname``/``hostname``, ``exported_pod``…).
Bad input is an error naming the file and line: a line the parser rejects, a duplicate series, or
a HELP text whose unit differs from the one that name's dcgm-exporter generation declares (e.g.
FB_USED "in MB" instead of "in MiB", or a ``*_RATIO`` field whose HELP says "in %").
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from gpuwatch import units
from gpuwatch.ingest import promframes, promframes_topology

_HELP_UNIT = re.compile(r"\(in ([^)]+)\)")


_YEARS = (946_684_800.0, 4_102_444_800.0)  # 2000-01-01 .. 2100-01-01, epoch seconds


class PromFileError(units.DataError, ValueError):
    """A /metrics file that cannot be read faithfully; the message names file and line."""


def read_file(path: str | Path, *, at: float | datetime | str | None = None) -> dict:
    """Bundle frames (``devices``, ``samples``, ``pods``) from the /metrics text at ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromFileError(f"{path}: cannot read: {exc}") from exc
    when = _epoch(at) if at is not None else path.stat().st_mtime
    return parse(text, at=when, source=str(path))


def parse(text: str, *, at: float, source: str = "<text>") -> dict:
    """Bundle frames from /metrics ``text``; samples without a timestamp are taken at ``at``."""
    if not text.strip():
        raise PromFileError(f"{source}: empty file: no metrics to load")
    series = to_series(text, at=at, source=source)
    gpu_names = set(promframes.SAMPLE_FIELDS) | set(promframes.DEVICE_FIELDS) | set(promframes_topology.INFO_NAMES)
    gpu_series = [s for s in series if s.name in gpu_names]
    if not gpu_series:
        raise PromFileError(f"{source}: no GPU series (DCGM_FI_* or gpuwatch_*): not an exporter's /metrics page")
    try:
        return promframes.build(series, promframes.Context())  # a snapshot: every pod on it is running
    except promframes_topology.TopologySeriesError as exc:
        raise PromFileError(f"{source}: {exc}") from exc


def to_series(text: str, *, at: float, source: str = "<text>") -> list[promframes.Series]:
    """Every sample of the page as a one-point ``Series`` (names as served)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises bare ValueError/IndexError with no position
        line, content = _bad_line(text)
        raise PromFileError(f"{source}:{line}: unparseable line {content!r} ({exc or type(exc).__name__})") from exc
    seen: dict[tuple, int] = {}
    out = []
    for family in families:
        _check_unit(family, text, source)
        for sample in family.samples:
            name = sample.name
            key = (name, tuple(sorted(sample.labels.items())), sample.timestamp)
            if key in seen:
                line = _line_of(text, sample.name, sample.labels, nth=2)
                raise PromFileError(f"{source}:{line}: duplicate series {sample.name}{sample.labels}")
            seen[key] = 1
            ts = float(sample.timestamp) if sample.timestamp is not None else at
            if sample.timestamp is not None and not _YEARS[0] <= ts < _YEARS[1]:  # NaN too; epoch milliseconds
                line = _line_of(text, sample.name, sample.labels, nth=1)
                raise PromFileError(f"{source}:{line}: timestamp {ts * 1000:.16g} ms is outside 2000-01-01 .. 2100-01-01 "
                                    "(a page's timestamps are epoch milliseconds)")
            out.append(promframes.Series(name, dict(sample.labels), np.array([ts]), np.array([float(sample.value)])))
    return out


def _check_unit(family, text: str, source: str) -> None:
    expected = promframes.HELP_UNITS.get(family.name)
    match = _HELP_UNIT.search(family.documentation or "")
    if expected and match and _unit(match[1]) != _unit(expected):
        line = next((i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(f"# HELP {family.name} ")), 0)
        raise PromFileError(f"{source}:{line}: {family.name} is in {match[1]!r}, expected {expected!r} "
                            "(dcgm-exporter's unit); refusing to guess a conversion")


# Spellings of one unit in HELP texts; any other spelling is a unit of its own.
_UNIT_SPELLINGS = {"bytes": "B", "byte": "B", "hertz": "Hz", "joules": "J", "joule": "J", "watts": "W",
                   "watt": "W", "celsius": "C", "°c": "C", "percent": "%", "fraction": "ratio",
                   "bytes/s": "B/s", "bytes per second": "B/s"}


def _unit(text: str) -> str:
    text = text.strip()
    return _UNIT_SPELLINGS.get(text.lower(), text)


def _bad_line(text: str) -> tuple[int, str]:
    """The first line prometheus_client's parser rejects on its own (1-based), for the error."""
    from prometheus_client.parser import text_string_to_metric_families

    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except Exception:
            return number, line
    return 0, ""


def _line_of(text: str, name: str, labels: dict, *, nth: int) -> int:
    """Line number of the ``nth`` sample line of ``name`` carrying exactly ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    count = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith(name) or line.startswith("#"):
            continue
        for family in text_string_to_metric_families(line + "\n"):
            if any(s.name == name and s.labels == labels for s in family.samples):
                count += 1
        if count >= nth:
            return number
    return 0


def _epoch(at: float | datetime | str) -> float:
    if isinstance(at, str):
        at = units.parse_utc(at, what="--at")
    if isinstance(at, datetime):  # naive = UTC, as everywhere in gpuwatch
        return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
    return float(at)
