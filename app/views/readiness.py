"""Readiness: which signals the store holds per GPU node in the window, which findings each missing one
blinds, and the exact config that enables it (the same verdicts as `gpuwatch doctor --db` and analyze)."""

from __future__ import annotations

import pandas as pd
import streamlit as st
import ui

import gpuwatch.signals as signals
from gpuwatch.findings import NEEDS, judgement

ctx = ui.current()
st.title("Readiness")
ui.window_caption(ctx)
st.caption("A finding judges only with the signals it has: without one it is **not judged** (unknown, never $0) or "
           "judged on less evidence. `gpuwatch doctor --from prometheus://…` asks Prometheus the same before ingesting.")
coverage = ui.analysis(ctx, "signal_coverage")
verdict = ui.judgement(ctx)

STATE_ICON = {"not judged": "✖ not judged", "partly judged": "◐ partly judged", "unverified": "? unverified",
              "judged": "✔ judged"}
cols = st.columns(4)
for col, state in zip(cols, ("not judged", "partly judged", "unverified", "judged"), strict=True):
    col.metric(STATE_ICON[state].split(" ", 1)[1].capitalize(), f"{int((verdict['state'] == state).sum())} findings")

blind = verdict[verdict["state"] == "not judged"]
for row in blind.itertuples():  # the blind spots in words first: no figure of these findings means anything
    st.markdown(f"✖ **{row.finding}** is not judged: {row.reason}.")
st.subheader("Findings")
shown = verdict.assign(state=verdict["state"].map(STATE_ICON))[["finding", "state", "reason"]]
order = {s: i for i, s in enumerate(("✖ not judged", "◐ partly judged", "? unverified", "✔ judged"))}
shown = shown.sort_values("state", key=lambda s: s.map(order), kind="stable")
ui.table(shown, "readiness_findings", empty="No findings.",
         columns={"finding": "Finding", "state": "State", "reason": "Why"})


def cell(row) -> str:
    """One signal on one node, in words."""
    if pd.isna(row["present"]):
        return "? not recorded"
    if pd.notna(row["expected"]) and int(row["expected"]) == 0:
        return "– nothing to check"
    if not bool(row["present"]):
        return "✖ missing"
    if pd.notna(row["expected"]) and int(row["observed"]) < int(row["expected"]):
        return f"◐ {int(row['observed'])} of {int(row['expected'])}"
    return "✔ present"


st.subheader("Signals")
labels = {name: s.label for name, s in signals.SIGNALS.items()}
per_node = coverage[coverage["node"].notna()]


def across(name: str) -> str:
    """One per-node signal over the GPU nodes, in words."""
    rows = per_node[per_node["signal"] == name]
    states = rows.apply(cell, axis=1) if len(rows) else pd.Series(dtype=str)
    missing = sorted(rows.loc[states == "✖ missing", "node"])
    unknown = int((states == "? not recorded").sum())
    if missing:
        if len(missing) == len(rows):
            return f"✖ missing on all {len(rows)} node(s)"
        return f"✖ missing on {len(missing)} of {len(rows)} node(s): " + ", ".join(missing[:5]) + (
            " …" if len(missing) > 5 else "")
    if unknown:
        return f"? not recorded on {unknown} node(s) (gpuwatch doctor asks Prometheus)"
    return f"✔ on all {len(rows)} node(s)" if len(rows) else "– no GPU nodes"


def blinded(name: str, required: bool) -> str:
    return ", ".join(f for f in verdict["finding"] if judgement_needs(f).get(name) is required)


def judgement_needs(finding: str) -> dict:
    return judgement.signal_needs(NEEDS, finding)


summary = pd.DataFrame([{"signal": labels[name], "state": across(name), "not_judged_without": blinded(name, True),
                         "less_evidence_without": blinded(name, False)}
                        for name, s in signals.SIGNALS.items() if s.per_node])
ui.table(summary, "readiness_signals", empty="No signals.",
         columns={"signal": "Signal", "state": "On the GPU nodes", "not_judged_without": "Not judged without it",
                  "less_evidence_without": "Less evidence without it"})
with st.expander("Per node"):
    if per_node.empty:
        st.info("No GPU nodes in the store.")
    else:
        grid = (per_node.assign(value=per_node.apply(cell, axis=1), signal=per_node["signal"].map(labels))
                .pivot(index="signal", columns="node", values="value").reset_index())
        ui.table(grid, "readiness_nodes", empty="No GPU nodes in the store.", columns={"signal": "Signal"})
cluster = coverage[coverage["node"].isna()]
st.subheader("Cluster-wide")
ui.table(cluster.assign(value=cluster.apply(cell, axis=1), signal=cluster["signal"].map(labels))[["signal", "value"]],
         "readiness_cluster", empty="Nothing cluster-wide.", columns={"signal": "Signal", "value": "In the store"})

missing = [name for name in signals.SIGNALS
           if (rows := coverage[(coverage["signal"] == name) & (coverage["expected"].isna() | (coverage["expected"] > 0))])
           .shape[0] and rows["present"].eq(False).any()]
if missing:
    st.subheader("To enable")
    st.caption("Each config once; a missing signal blinds the findings listed above.")
    for block in signals.enable(*missing):
        where, _, config = block.partition(":\n")
        st.markdown(f"**{where}**")
        st.code("\n".join(line[2:] for line in config.splitlines()), language="yaml")
else:
    st.success("Every signal gpuwatch reads is in the store for this window.")
