"""Altair charts for the report, rendered offline to inline SVG with vl-convert (no JS, no assets)."""

from __future__ import annotations

import pandas as pd

PART_COLORS = {"productive": "#2e7d32", "false-util": "#8e24aa", "idle": "#f9a825",
               "unallocated": "#9e9e9e", "stranded": "#e53935"}
# Room around the plot: vl-convert measures text with its own fonts, a reader's browser draws it with
# theirs (often wider), so labels and legends get slack instead of being cut at the SVG's edge.
PADDING = {"left": 60, "right": 40, "top": 10, "bottom": 10}
LABEL_LIMIT = 240  # px: longer names are cut with an ellipsis (the tables below show them whole)


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
        x=alt.X("sum(usd):Q", title="USD", axis=alt.Axis(format="$,.0f")),
        y=alt.Y(f"{by}:N", sort="-x", title=None, axis=alt.Axis(labelLimit=LABEL_LIMIT)),
        color=alt.Color("part:N", sort=order, title=None, legend=alt.Legend(orient="top", direction="horizontal"),
                        scale=alt.Scale(domain=order, range=[PART_COLORS[p] for p in order])),
        order=alt.Order("part_order:Q"),
    ).transform_calculate(part_order=f"indexof({order!r}, datum.part)").properties(
        width=680, height=max(22 * parts[by].nunique(), 60), title=title, padding=PADDING)
    return to_svg(chart)


def daily_cost(series: pd.DataFrame) -> str:
    """Cost per day, stacked by busy / idle / unallocated / not sampled (fleet_timeseries, daily buckets):
    the bars add up to the fleet cost."""
    import altair as alt

    names = {"busy_cost_usd": "allocated, busy", "idle_cost_usd": "allocated, idle",
             "unallocated_cost_usd": "unallocated", "not_sampled_cost_usd": "not sampled"}
    long = series.melt(id_vars=["bucket_start"], value_vars=list(names), var_name="part", value_name="usd")
    long["part"] = long["part"].map(names)
    long["day"] = pd.to_datetime(long["bucket_start"]).dt.strftime("%a %m-%d")
    colors = ["#2e7d32", "#f9a825", "#9e9e9e", "#cfd8dc"]
    chart = alt.Chart(long).mark_bar().encode(
        x=alt.X("day:O", sort=None, title=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("sum(usd):Q", title="USD", axis=alt.Axis(format="$,.0f")),
        color=alt.Color("part:N", sort=list(names.values()), title=None,
                        legend=alt.Legend(orient="top", direction="horizontal"),
                        scale=alt.Scale(domain=list(names.values()), range=colors)),
    ).properties(width=680, height=220, title="Cost per day (UTC)", padding=PADDING)
    return to_svg(chart)
