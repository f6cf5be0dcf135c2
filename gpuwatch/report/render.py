"""Render a report view with Jinja2 (autoescaped: every string from the data is HTML-escaped)."""

from __future__ import annotations

from functools import cache
from typing import Any

TEMPLATE = "weekly.html.j2"


def _missing(value: Any) -> bool:
    """None, NaN, NaT and pandas.NA are all 'missing' (shown blank, never as 0)."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN/NaT compare unequal to themselves
    except TypeError:  # pandas.NA refuses bool()
        return True


def usd(value: Any) -> str:
    return "" if _missing(value) else f"${float(value):,.2f}"


def pct(value: Any) -> str:
    return "" if _missing(value) else f"{100 * float(value):.1f} %"


def signed_pct(value: Any) -> str:
    return "n/a" if _missing(value) else f"{100 * float(value):+.1f} %"


def num(value: Any) -> str:
    return "" if _missing(value) else f"{float(value):,.1f}"


def int_or_blank(value: Any) -> str:
    return "" if _missing(value) else str(int(value))


def gib(value: Any) -> str:
    return "" if _missing(value) else f"{float(value) / 2**30:,.1f} GiB"


def duration(value: Any) -> str:
    if _missing(value):
        return ""
    seconds = float(value)
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.0f} min"


def ts(value: Any) -> str:
    return "" if _missing(value) else str(value)[:16]


def cell(value: Any, column: str) -> str:
    """Format a generic table cell by its column's unit suffix."""
    if column.endswith("_usd"):
        return usd(value)
    if column.endswith("_hours"):
        return num(value)
    if column.endswith("_seconds"):
        return duration(value)
    if column.endswith("_bytes"):
        return gib(value)
    if isinstance(value, float):
        return "" if _missing(value) else f"{value:.3f}"
    return "" if value is None else str(value)


@cache
def environment(unpriced: bool = False):
    """The Jinja2 environment, built once per process and mode (compiling the template costs ~0.2 s).
    ``unpriced``: no GPU in the store has a price, so every dollar is unknown and says "unpriced" (a sum
    of nothing priced is not $0.00); a separate environment, so the other one's filters stay as they are."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("gpuwatch.report", "."), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=False, keep_trailing_newline=True)
    env.filters.update(usd=usd, pct=pct, signed_pct=signed_pct, num=num, int_or_blank=int_or_blank, gib=gib,
                       duration=duration, ts=ts, cell=cell)
    if unpriced:
        env.filters.update(usd=lambda value: "unpriced",
                           cell=lambda value, column: "unpriced" if column.endswith("_usd") else cell(value, column))
    return env


def page(context: dict, *, version: str, unpriced: bool = False) -> str:
    """The HTML page for one view (fleet or team); ``unpriced``: see ``environment``."""
    return environment(unpriced).get_template(TEMPLATE).render(version=version, **context)  # compiled once, cached
