"""How a table's cells and headers read in the app: a header from each column name, "—" for a
missing value (the grid draws a null as "None"), the format a column's config gives its numbers."""

from __future__ import annotations

import pandas as pd
import streamlit as st

# words a column name spells in lower case that a header spells otherwise
WORDS = {"gpu": "GPU", "gpus": "GPUs", "sm": "SM", "fb": "FB", "mig": "MIG", "uuid": "UUID", "id": "ID", "xid": "XID",
         "ecc": "ECC", "numa": "NUMA", "nvlink": "NVLink", "pcie": "PCIe", "gib": "GiB", "ts": "time", "usd": "",
         "h": "(h)", "k8s": "Kubernetes", "util": "utilization", "fgd": "FGD", "p95": "p95"}
LONG_TEXT = ("action", "evidence", "basis", "reason", "why", "pods", "detail", "recommendation", "instances", "teams")


def header(column: str) -> str:
    """A header from a column name: ``idle_cost_usd`` -> "Idle cost", ``max_fb_used_gib_idle`` -> "Max FB used GiB
    idle", ``observed_h`` -> "Observed (h)" (dollars and percentages are in the cells' format)."""
    words = [WORDS.get(w, w) for w in column.split("_")]
    text = " ".join(w for w in words if w) or column
    return text[:1].upper() + text[1:]


def missing_as_dash(frame: pd.DataFrame, config: dict) -> pd.DataFrame:
    """Missing cells as "—" (the grid draws a null as "None"): text columns directly; a number or time
    column with a gap becomes its display text, formatted as ``config`` would draw it and right-aligned
    (the CSV download keeps the numbers)."""
    out = frame.copy()
    numbers = [c for c in out.columns if (pd.api.types.is_numeric_dtype(out[c]) and not pd.api.types.is_bool_dtype(out[c]))
               or pd.api.types.is_datetime64_any_dtype(out[c])]
    for col in out.columns:
        if not out[col].isna().any():
            continue
        if col in numbers:
            shown = _formatter(config.get(col), out[col])
            out[col] = [shown(v) if pd.notna(v) else "—" for v in out[col]]
            config[col] = st.column_config.TextColumn(alignment="right")
        else:  # text, flags, categories
            out[col] = out[col].astype(object).where(out[col].notna(), "—")
    return out


def _formatter(column_config, values: pd.Series):
    """The display text of one column's values, as its column config would draw them."""
    kind = (column_config or {}).get("type_config", {}).get("format")
    if pd.api.types.is_datetime64_any_dtype(values):
        return lambda v: f"{v:%Y-%m-%d %H:%M:%S}"
    if kind == "dollar":
        return "${:,.2f}".format
    if kind == "percent":
        return lambda v: f"{v * 100:,.2f}%"
    if kind in ("%.1f GiB", "%.1f"):
        return lambda v: kind % v
    return lambda v: f"{int(v):,}" if float(v).is_integer() else f"{v:,.4g}"
