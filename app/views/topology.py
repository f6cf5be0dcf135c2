"""Topology: which GPUs jobs got, and which are left (docs/architecture.md#topology).

A GPU-by-GPU link map per node at a chosen time (links by class, GPUs by the pod holding them, the
largest free NVLink block outlined), schedulable capacity over time per pool, misplaced jobs with
their estimated penalty and blocked pending demand with its opportunity cost. Everything comes from
the topology analyses; where the store holds no topology the page says so instead of drawing zeros.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st
import topology_map
import ui

import gpuwatch.report.topology as summary

ctx = ui.current()
st.title("Topology")
ui.window_caption(ctx)
st.caption("A multi-GPU job on GPUs that cross PCIe switches or sockets loses throughput with no error; free GPUs "
           "split over many nodes cannot start a job that needs them together. Penalties are estimates (the "
           "collective share of a step slowed by the link's bandwidth ratio); blocked demand is an opportunity "
           "cost (work that waited), not spend.")

placement_all = ui.finding(ctx, "topology_placement")
capacity = ui.finding(ctx, "schedulable_capacity")
known = summary.topology_known(placement_all, capacity)
placement = ui.for_teams(ctx, placement_all)
flagged = placement[placement["verdict"].isin(summary.FLAGGED)].sort_values("penalty_usd", ascending=False)
demand = ui.for_teams(ctx, ui.finding(ctx, "blocked_demand")).sort_values("opportunity_usd", ascending=False)
blocked = demand[demand["verdict"] == "blocked"]
UNKNOWN = summary.UNKNOWN[:1].upper() + summary.UNKNOWN[1:] + "."

if not known:
    st.warning(UNKNOWN)
cols = st.columns(4)
cols[0].metric("Misplaced or spread jobs", f"{len(flagged)}" if known else "unknown",
               help="Multi-GPU pods and jobs on worse links, or more nodes, than a block free when they started.")
cols[1].metric("Placement penalty (estimate)", ui.money(flagged["penalty_usd"].sum()) if known else "unknown",
               help="Estimated GPU time lost to the slower links: a model, not a measurement.")
cols[2].metric("Blocked pending pods", f"{len(blocked)}",
               help="Pods that waited although enough GPUs were free, because no free block fit them.")
cols[3].metric("Opportunity cost (blocked)", ui.money(blocked["opportunity_usd"].sum()),
               help="Requested GPUs × price × hours blocked: work that waited, not money spent.")

tabs = st.tabs(["Link map", "Schedulable capacity", "Misplaced jobs", "Blocked demand"])


def link_map_tab() -> None:
    if ctx.scope is not None:
        st.info("The link map shows every team's pods: it is fleet-wide, not part of a team view.")
        return
    if not known or capacity.empty:
        st.info(UNKNOWN)
        return
    buckets = sorted(pd.to_datetime(capacity["bucket_ts"].unique()))
    at = st.select_slider("Time (UTC, bucket start)", options=buckets, value=buckets[-1], key="topo_at",
                          format_func=lambda ts: f"{ts:%Y-%m-%d %H:%M}")
    nodes = ui.node_blocks(ctx, pd.Timestamp(at).to_pydatetime())
    pools = sorted({n["gpu_model"] for n in nodes if n["gpu_model"]})
    if not pools:
        st.info("No node with whole GPUs at this time.")
        return
    pool = st.selectbox("Pool (GPU model)", pools, index=pools.index(problem_pool(pools)), key="topo_pool",
                        help="Opens on the pool with the most misplaced or spread jobs and blocked pods.")
    troubled = problem_nodes()
    in_pool = sorted((n for n in nodes if n["gpu_model"] == pool),
                     key=lambda n: (-troubled.get(n["node"], 0), -(n["free_gpus"] or 0), n["node"]))
    names = [n["node"] for n in in_pool]
    picked = st.multiselect("Nodes", names, default=names[:4], key=f"topo_nodes_{pool}",
                            help="Nodes of misplaced jobs and defragmentation moves first, then the most free GPUs.")
    st.caption("Cells: the link between two GPUs (NV = NVLink, then PCIe classes best to worst: PIX one switch, "
               "PXB several, PHB host bridge, NODE within a NUMA node, SYS across sockets). Diagonal: the pod "
               "holding the GPU. Dashed outline: the largest free, fully NVLink-connected block.")
    chosen = [n for n in in_pool if n["node"] in picked]
    for node in chosen:
        draw_node(node)
    rows = [{"node": n["node"], **g, "allocated_to": g["allocated_to"] or topology_map.FREE,
             "in_free_nvlink_block": str(g["gpu_index"]) in _members(n)}
            for n in chosen for g in n["gpus"]]
    ui.table(pd.DataFrame(rows), "node_gpus", empty="No node picked.",
             columns={"node": "node", "gpu_index": "GPU", "numa_node": "NUMA node", "allocated_to": "held by",
                      "in_free_nvlink_block": "in free NVLink block"})


def _members(node: dict) -> set[str]:
    return {m for m in (node["free_blocks"].get("nvlink") or "").split(",") if m}


def draw_node(node: dict) -> None:
    """One node: its link map, and beside it what is free (one row per node: the map needs the width)."""
    gpus = topology_map.node_gpus(node)
    blocks = node["free_blocks"]
    free = "unknown" if node["free_gpus"] is None else f"{node['free_gpus']}"
    if not node["topology_known"]:
        st.markdown(f"**{topology_map.plain(node['node'])}** · {free} GPUs free")
        st.info(f"{topology_map.plain(node['node'])}: {summary.UNKNOWN} (some GPU pair has no link).")
        return
    block = blocks.get("nvlink") or ""
    chart, text = st.columns([3, 2])
    cells = topology_map.cells(gpus, node["links"], block)
    chart.altair_chart(topology_map.link_map(cells, title=node["node"]), width=topology_map.map_width(len(gpus)),
                       height=topology_map.map_height(len(gpus), len(topology_map.map_holders(cells))))
    text.markdown(f"**{topology_map.plain(node['node'])}** · {free} GPUs free")
    text.caption(f"Largest free NVLink block: {_gpus(block)} · within one NUMA node: {_gpus(blocks.get('numa'))} · "
                 f"within one PCIe switch: {_gpus(blocks.get('pcie_switch'))}")


def _gpus(block: str | None) -> str:
    members = [m for m in (block or "").split(",") if m]
    return f"{len(members)} (GPUs {', '.join(members)})" if members else "none"


def capacity_tab() -> None:
    if capacity.empty:
        st.info(UNKNOWN)
        return
    if ctx.scope is not None:
        st.caption("Schedulable capacity is fleet-wide (free GPUs of every team's pools).")
    rows = pd.DataFrame(summary.capacity_rows(capacity))
    shares = {f"{kind}_{k}": f"no_{'node' if kind == 'split' else 'nvlink'}_{k}_share"
              for k in summary.BLOCK_SIZES for kind in ("split", "nvlink")}
    st.caption("Of the time buckets in which k or more GPUs were free (k+ free): the share in which no node had k "
               "of them (split), and the share with no free, fully NVLink-connected k-block (blank: no NVLink pair "
               "was free in the window, e.g. a PCIe pool, or topology unknown).")
    ui.table(rows.rename(columns=shares).drop(columns=["known", "buckets", *(f"free_{k}" for k in summary.BLOCK_SIZES)]),
             "schedulable_capacity_summary", empty="No pools.",
             columns={"gpu_model": "pool", "nodes": "nodes", "gpus": "GPUs", "mean_free_gpus": "mean free",
                      "largest_nvlink_block": "largest NVLink block free",
                      **{v: f"{v.split('_')[2]}+ free: {'split' if 'node' in v else 'no NVLink block'}"
                         for v in shares.values()}})
    pools = sorted(capacity["gpu_model"].dropna().unique())
    pool = st.selectbox("Pool", pools, index=pools.index(problem_pool(pools)), key="topo_capacity_pool")
    frame = capacity[capacity["gpu_model"] == pool].sort_values("bucket_ts")
    if int(frame["topology_known_gpus"].fillna(0).max()) == 0:
        st.info(f"{topology_map.plain(pool)}: {summary.UNKNOWN} (free GPUs and plain k-GPU counts are shown; "
                "NVLink blocks are not).")
    st.altair_chart(topology_map.capacity_chart(frame, title=f"{pool}: free GPUs and the k-GPU jobs that could start"),
                    width="stretch", height=460)


def misplaced_tab() -> None:
    if not known:  # nodes spanned are known without links: spread jobs are still listed
        st.info(UNKNOWN)
    unjudged = int((placement["verdict"] == "topology unknown").sum())
    st.caption("Multi-GPU pods (and multi-pod jobs) whose GPUs cross worse links, or more nodes, than a block "
               "that was free when they started. Penalty = an estimate, never charged where no better block "
               "was free." + (f" {unjudged} job(s) could not be judged: topology unknown." if unjudged else ""))
    ui.table(flagged.drop(columns=["link_matrix"]), "topology_placement",
             empty="No misplaced or spread multi-GPU job in this window.",
             columns={"namespace": "namespace", "pod": "pod", "team": "team", "verdict": "verdict",
                      "penalty_usd": "penalty (estimate)", "worst_link": "worst link", "better_link": "better link free",
                      "better_gpus": "better block (GPUs)", "gpus": "GPUs", "nodes": "nodes", "cost_usd": "cost",
                      "penalty_share": "penalty share (estimate)", "reason": "why", "job": "job"})
    evidence = flagged[flagged["link_matrix"].fillna("") != ""]
    if evidence.empty:
        return
    labels = [f"{r.namespace}/{r.pod if isinstance(r.pod, str) else r.job} ({r.verdict})"
              for r in evidence.itertuples(index=False)]
    pick = evidence.iloc[st.selectbox("Evidence: the job's link matrix", range(len(labels)),
                                      format_func=labels.__getitem__, key="topo_job")]
    gpus = [{"index": i, "label": f"GPU {i}", "holder": "this job"} for i in _matrix_gpus(pick["link_matrix"])]
    st.altair_chart(topology_map.link_map(topology_map.cells(gpus, pick["link_matrix"]), holder_legend=False,
                                          title=f"{pick['nodes']}: links between its GPUs"),
                    width=topology_map.map_width(len(gpus)), height=topology_map.map_height(len(gpus), 0))
    st.caption(topology_map.plain(pick["reason"]))


def problem_pool(pools: list[str]) -> str:
    """The pool to open on: the one with the most misplaced or spread jobs and blocked pods (ties and no
    problems: the first by name), so the page does not open on a pool with nothing to see."""
    counts = pd.concat([flagged["gpu_model"], blocked["gpu_model"]]).value_counts()
    return max(pools, key=lambda p: (int(counts.get(p, 0)), -pools.index(p)))


def problem_nodes() -> dict[str, int]:
    """node -> how many flagged jobs ran on it or blocked pods would defragment it."""
    names = [n.strip() for cell in flagged["nodes"].dropna() for n in str(cell).split(",")]
    names += [str(n) for n in blocked["defrag_node"].dropna()]
    return pd.Series(names, dtype=object).value_counts().to_dict() if names else {}


def _matrix_gpus(matrix: str) -> list[str]:
    """The GPU indices a link matrix ({"0-1": "NV18", ...}) names, in numeric order."""
    indices = {part for key in json.loads(matrix) for part in key.split("-", 1)}
    return sorted(indices, key=lambda i: (len(i), i))


def blocked_tab() -> None:
    st.caption("Pending pods with a GPU request that waited while their pool had enough GPUs free, but no node "
               "had a block that fit. Opportunity cost = requested GPUs × price × hours blocked (work that "
               "waited, not money spent); the defragmentation move is the fewest running pods to move to open "
               "a block that fits." + ("" if known else " Topology unknown: NVLink blocks cannot be judged."))
    ui.table(demand, "blocked_demand", empty="No pending pod waited for a block in this window.",
             columns={"namespace": "namespace", "pod": "pod", "team": "team", "verdict": "verdict",
                      "gpus_requested": "GPUs requested", "opportunity_usd": "opportunity cost",
                      "blocked_hours": "blocked (h)", "defrag_pods": "pods to move", "defrag_node": "defragment node",
                      "defrag_gpus_moved": "GPUs moved", "why": "why", "wait_hours": "waited (h)",
                      "max_free_gpus": "most free GPUs", "max_free_block": "largest free block", "gpu_model": "pool"})


with tabs[0]:
    link_map_tab()
with tabs[1]:
    capacity_tab()
with tabs[2]:
    misplaced_tab()
with tabs[3]:
    blocked_tab()
