"""Altair charts for the report, rendered offline to inline SVG with vl-convert (no JS, no assets)."""

from __future__ import annotations

import pandas as pd

PART_COLORS = {"productive": "#2e7d32", "false-util": "#8e24aa", "idle": "#f9a825",
               "unallocated": "#9e9e9e", "stranded": "#e53935"}


def to_svg(chart) -> str:
    """Vega-Lite -> SVG string; vl-convert embeds text as SVG text nodes (escaped), no scripts."""
    import vl_convert

    # validate=False: the specs are fixed code (tests render them); schema validation costs ~60 ms a chart
    return vl_convert.vegalite_to_svg(chart.to_dict(validate=False))


def waste_bars(parts: pd.DataFrame, *, by: str, title: str) -> str:
    """Stacked horizontal bars: one per ``by`` value, split into parts (long frame: by, part, usd)."""
    import altair as alt

    order = [p for p in PART_COLORS if p in set(parts["part"])]
    chart = alt.Chart(parts).mark_bar().encode(
        x=alt.X("sum(usd):Q", title="USD"),
        y=alt.Y(f"{by}:N", sort="-x", title=None),
        color=alt.Color("part:N", sort=order, scale=alt.Scale(domain=order, range=[PART_COLORS[p] for p in order])),
        order=alt.Order("part_order:Q"),
    ).transform_calculate(part_order=f"indexof({order!r}, datum.part)").properties(
        width=760, height=max(24 * parts[by].nunique(), 60), title=title)
    return to_svg(chart)


def daily_cost(series: pd.DataFrame) -> str:
    """Cost per day, stacked by busy / idle / unallocated (from fleet_timeseries with daily buckets)."""
    import altair as alt

    names = {"busy_cost_usd": "busy", "idle_cost_usd": "idle", "unallocated_cost_usd": "unallocated"}
    long = series.melt(id_vars=["bucket_start"], value_vars=list(names), var_name="part", value_name="usd")
    long["part"] = long["part"].map(names)
    long["day"] = pd.to_datetime(long["bucket_start"]).dt.strftime("%a %m-%d")
    colors = ["#2e7d32", "#f9a825", "#9e9e9e"]
    chart = alt.Chart(long).mark_bar().encode(
        x=alt.X("day:O", sort=None, title=None), y=alt.Y("sum(usd):Q", title="USD"),
        color=alt.Color("part:N", sort=list(names.values()), scale=alt.Scale(domain=list(names.values()), range=colors)),
    ).properties(width=760, height=220, title="Cost per day (UTC)")
    return to_svg(chart)
