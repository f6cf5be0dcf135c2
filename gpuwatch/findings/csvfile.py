"""CSV files people open in spreadsheets: every text cell that a spreadsheet would run as a formula
(starting with = + - @, a tab or a carriage return) is neutralised with a leading single quote, as
OWASP's CSV-injection advice says. Numbers are never touched; pod, namespace and team names come
from the cluster, so any of them can carry such a prefix. One function writes every CSV
gpuwatch writes (analyze --out, the weekly report's chargeback.csv, the app's downloads), so the
same input gives the same bytes everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe(frame: Any) -> Any:
    """A copy of ``frame`` whose text cells cannot start a spreadsheet formula."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or str(out[column].dtype) in ("string", "str"):
            out[column] = out[column].map(_cell)
    return out


def to_csv(frame: Any, path: Path | None = None) -> str | None:
    """``frame`` as CSV, written to ``path`` (else returned as text): text cells ``safe``, timestamps
    ISO-8601 UTC, floats to 12 significant digits (beyond any cent or second, and the same bytes
    whatever order DuckDB's threads summed in: parallel sums differ in the 16th digit)."""
    return safe(frame).to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%SZ", float_format="%.12g")


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
