"""The Topology page's pictures, drawn from what the analyses return (no Streamlit calls, no SQL).

``cells`` turns one node of ``schedulable_capacity.node_blocks`` (or a job's link matrix) into one row
per GPU pair: off the diagonal the link class, on it who holds the GPU, and whether the pair lies in
the node's largest free NVLink block (outlined). ``link_map`` and ``capacity_chart`` draw them.
"""

from __future__ import annotations

import json
import math
import re

import altair as alt
import pandas as pd

import gpuwatch.topology as topology

UNKNOWN_LINK = "unknown"
LINK_ORDER = [*topology.LINKS, UNKNOWN_LINK]  # best to worst, then unknown (never guessed)
LINK_COLORS = ["#1b5e20", "#7cb342", "#d4e157", "#ffb300", "#fb8c00", "#d32f2f", "#bdbdbd"]
FREE = "free"
HOLDER_COLORS = ["#1565c0", "#8e24aa", "#00838f", "#6d4c41", "#c2185b", "#3949ab", "#5d4037", "#455a64"]
CELL_PX = 34
# the holder legend names the pod without its namespace (the tooltip and the GPU table carry both)
POD_ONLY = "indexof(datum.label, '/') >= 0 ? substring(datum.label, indexof(datum.label, '/') + 1) : datum.label"
LABEL_PX = 140  # room for "GPU 7 · NUMA 1" and for pod names in the legend


def plot_px(gpus: int) -> int:
    """The map's side: CELL_PX per GPU, at least the height of the link legend beside it."""
    return max(CELL_PX * gpus, 240)  # Streamlit's theme spaces legend entries ~30 px apart


def map_width(gpus: int) -> int:
    """The element width a link map needs: Streamlit fits the chart into it, so it is the square plot plus
    the row labels on the left and the link legend on the right (then the cells stay square)."""
    return plot_px(gpus) + 200


def map_height(gpus: int, holders: int) -> int:
    """The element height: the plot, the title and column labels on top and, for ``holders`` > 0, the
    holder legend below (two columns)."""
    return plot_px(gpus) + 100 + (40 + 30 * math.ceil(holders / 2) if holders else 0)


def plain(text: object) -> str:
    """Data (node, pod names, reasons) as literal text inside Streamlit markdown: every markdown and LaTeX
    sign escaped, so a name can neither format, link nor typeset."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~$:])", r"\\\1", str(text))


def link_class(label: str | None) -> str:
    """"NV18" -> "NV"; a PCIe class as is; None (an unknown pair) -> "unknown"."""
    return UNKNOWN_LINK if label is None else topology.parse_label(label)[0]


def _pairs(links: str | dict | None) -> dict[tuple[str, str], str | None]:
    """{"0-1": "NV18"} (JSON text or dict) -> {("0", "1"): "NV18", ("1", "0"): "NV18"}."""
    matrix = json.loads(links) if isinstance(links, str) else (links or {})
    out = {}
    for key, label in matrix.items():
        a, b = key.split("-", 1)
        out[(a, b)] = out[(b, a)] = label
    return out


def node_gpus(node: dict) -> list[dict]:
    """A node's GPUs as the map labels them: index, label ("GPU 3 · NUMA 1"), holder or "free"."""
    out = []
    for g in node["gpus"]:
        numa = g.get("numa_node")
        numa_text = "" if numa is None or numa != numa else f" · NUMA {int(numa)}"
        out.append({"index": str(g["gpu_index"]), "label": f"GPU {g['gpu_index']}{numa_text}",
                    "short": f"GPU {g['gpu_index']}", "holder": g.get("allocated_to") or FREE})
    return out


def cells(gpus: list[dict], links: str | dict | None, block: str = "") -> pd.DataFrame:
    """One row per ordered GPU pair (row, col): ``kind`` link|gpu, ``link`` label, ``link_class``,
    ``holder`` (diagonal), ``in_block`` (both GPUs in the comma-separated ``block``), ``text``."""
    pairs = _pairs(links)
    members = {m.strip() for m in (block or "").split(",") if m.strip()}
    rows = []
    for a in gpus:
        for b in gpus:
            same = a["index"] == b["index"]
            label = None if same else pairs.get((a["index"], b["index"]))
            rows.append({"row": a["label"], "col": b.get("short", b["label"]), "kind": "gpu" if same else "link",
                         "link": label,
                         "link_class": None if same else link_class(label), "holder": a["holder"] if same else None,
                         "in_block": a["index"] in members and b["index"] in members,
                         "text": _short(a["holder"]) if same else (label or "?")})
    return pd.DataFrame(rows)


def _short(holder: str) -> str:
    """A pod name short enough for a cell (the tooltip and table carry it whole)."""
    name = holder.split("/", 1)[-1]
    return name if len(name) <= 9 else name[:8] + "…"


def link_map(frame: pd.DataFrame, *, title: str, holder_legend: bool = True) -> alt.LayerChart:
    """GPU-by-GPU heat map: links coloured by class, the diagonal by holder, the free block outlined
    (``holder_legend`` False: the diagonal's own text says it all, e.g. one job's matrix)."""
    order, columns = list(dict.fromkeys(frame["row"])), list(dict.fromkeys(frame["col"]))
    holders = map_holders(frame)
    base = alt.Chart(frame).encode(
        x=alt.X("col:N", sort=columns, title=None,
                axis=alt.Axis(labelAngle=-45, labelOverlap=False, labelLimit=LABEL_PX, orient="top")),
        y=alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=LABEL_PX)),
        tooltip=[alt.Tooltip("row:N", title="GPU"), alt.Tooltip("col:N", title="peer"),
                 alt.Tooltip("link:N", title="link"), alt.Tooltip("holder:N", title="held by"),
                 alt.Tooltip("in_block:N", title="in free NVLink block")])
    links = base.transform_filter(alt.datum.kind == "link").mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color("link_class:N", title="link", scale=alt.Scale(domain=LINK_ORDER, range=LINK_COLORS),
                        legend=alt.Legend(orient="right")))
    palette = ["#eceff1", *HOLDER_COLORS]  # free GPUs pale; more holders than colours: Vega's own scheme
    scale = (alt.Scale(domain=holders, range=palette[:len(holders)]) if len(holders) <= len(palette)
             else alt.Scale(domain=holders))
    gpus = base.transform_filter(alt.datum.kind == "gpu").mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color("holder:N", title="held by", scale=scale,
                        legend=alt.Legend(orient="bottom", columns=2, labelLimit=LABEL_PX, labelExpr=POD_ONLY)
                        if holder_legend else None))
    outline = base.transform_filter(alt.datum.in_block).mark_rect(
        fillOpacity=0, stroke="#000000", strokeWidth=2.5, strokeDash=[5, 2])
    text = base.mark_text(fontSize=9).encode(
        text="text:N", color=alt.condition(alt.datum.holder == FREE, alt.value("#263238"), alt.value("#ffffff")))
    size = plot_px(len(order))
    return alt.layer(links, gpus, outline, text).resolve_scale(color="independent").properties(
        title=title, width=size, height=size)


def map_holders(frame: pd.DataFrame) -> list[str]:
    """The holder legend's entries: free first, then the pods holding the map's GPUs."""
    return [FREE, *sorted({h for h in frame["holder"].dropna() if h != FREE})]


def capacity_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One pool's schedulable_capacity rows in long form: bucket_ts, k, placement ("any link" =
    k free on one node, "NVLink block" = fully NVLink-connected), jobs (k-GPU jobs that could start)."""
    parts = []
    for k in topology.BLOCK_SIZES:
        for column, placement in ((f"jobs_{k}", "any link"), (f"nvlink_jobs_{k}", "NVLink block")):
            part = frame[["bucket_ts", column]].rename(columns={column: "jobs"}).dropna(subset=["jobs"])
            parts.append(part.assign(k=f"{k}-GPU", placement=placement))
    return pd.concat(parts, ignore_index=True).astype({"jobs": float})


def capacity_chart(frame: pd.DataFrame, *, title: str) -> alt.VConcatChart:
    """Free GPUs per bucket (bars) over the k-GPU jobs that could start (solid: on NVLink blocks,
    dashed: on any GPUs of one node), sharing the time axis."""
    x = alt.X("bucket_ts:T", title="time (UTC)")
    free = alt.Chart(frame).mark_bar(color="#90a4ae").encode(
        x=x, y=alt.Y("free_gpus:Q", title="free GPUs", axis=alt.Axis(tickMinStep=1)),
        tooltip=[alt.Tooltip("bucket_ts:T", title="bucket"), "free_gpus:Q", "largest_nvlink_block:Q"]
    ).properties(title=title, height=150, width="container")
    jobs = alt.Chart(capacity_frame(frame)).mark_line(interpolate="step-after").encode(
        x=x, y=alt.Y("jobs:Q", title="k-GPU jobs that could start", axis=alt.Axis(tickMinStep=1)),
        color=alt.Color("k:N", title="job size", sort=[f"{k}-GPU" for k in topology.BLOCK_SIZES],
                        legend=alt.Legend(orient="bottom")),
        strokeDash=alt.StrokeDash("placement:N", title="placement", sort=["NVLink block", "any link"],
                                  legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("bucket_ts:T", title="bucket"), "k:N", "placement:N", "jobs:Q"]
    ).properties(height=220, width="container")
    return alt.vconcat(free, jobs)
