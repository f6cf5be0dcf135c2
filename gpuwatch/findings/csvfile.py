"""CSV files people open in spreadsheets: every text cell that a spreadsheet would run as a formula
(starting with = + - @, a tab or a carriage return) is neutralised with a leading single quote, as
OWASP's CSV-injection advice says. Numbers are never touched; pod, namespace and team names come
from the cluster, so any of them can carry such a prefix. One function for every CSV gpuwatch
writes (analyze --out, the weekly report's chargeback.csv, the app's downloads)."""

from __future__ import annotations

from typing import Any

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe(frame: Any) -> Any:
    """A copy of ``frame`` whose text cells cannot start a spreadsheet formula."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or str(out[column].dtype) in ("string", "str"):
            out[column] = out[column].map(_cell)
    return out


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
