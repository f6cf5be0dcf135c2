"""The weekly report's Topology section: misplaced jobs, blocked demand, schedulable capacity (pure).

Built from the topology_placement, blocked_demand and schedulable_capacity frames as the analyses
return them (docs/architecture.md#topology). A placement penalty is an estimate and a blocked pod's
figure an opportunity cost; neither is spend, so neither is added to any total the report bills.
Where the store holds no topology the section says so ("topology unknown"), never a zero.
"""

from __future__ import annotations

from typing import Any

UNKNOWN = ("topology unknown — the exporter's gpuwatch_gpu_link_info series or a topology bundle file "
           "is needed")
FLAGGED = ("misplaced", "spread")
BLOCK_SIZES = (4, 8)  # the block sizes the capacity summary reports (the alert's)


def section(frames: dict, *, team: str | None) -> dict:
    """What the template shows: ``known`` (any GPU links at all), the team's (or every) misplaced and
    spread jobs with their estimated penalty (without links: the spread ones only; ``unjudged`` counts the
    jobs judged 'topology unknown'), blocked pending pods with their opportunity cost, and on
    the fleet page the schedulable-capacity summary per pool."""
    placement, blocked = frames.get("topology_placement"), frames.get("blocked_demand")
    capacity = frames.get("schedulable_capacity")
    known = topology_known(placement, capacity)
    misplaced = placement_rows(placement, team=team)  # without links only 'spread' (nodes) can be judged
    waiting = blocked_rows(blocked, team=team)
    mine = placement if placement is None or team is None else placement[placement["team"] == team]
    unjudged = int((mine["verdict"] == "topology unknown").sum()) if mine is not None and len(mine) else 0
    return {"known": known, "unknown_text": UNKNOWN, "misplaced": misplaced, "blocked": waiting, "unjudged": unjudged,
            "penalty_usd": _total(misplaced, "penalty_usd"), "opportunity_usd": _total(waiting, "opportunity_usd"),
            "capacity": capacity_rows(capacity) if team is None and known else []}


def topology_known(placement: Any, capacity: Any) -> bool:
    """Whether the window has any GPU links: a pod whose worst link is known, or capacity rows whose pool
    had GPUs with a known layout. (Nodes spanned are known without links: 'spread' needs none, and a job
    across nodes has a worst link whatever the links inside them.)"""
    if placement is not None and len(placement):
        pods = placement[placement["scope"] == "pod"]
        if pods["worst_link"].notna().any():
            return True
    return bool(capacity is not None and len(capacity) and (capacity["topology_known_gpus"].fillna(0) > 0).any())


def placement_rows(frame: Any, *, team: str | None) -> list[dict]:
    """Misplaced and spread pods and jobs (the team's, or all), largest estimated penalty first."""
    if frame is None or not len(frame):
        return []
    rows = frame[frame["verdict"].isin(FLAGGED)]
    if team is not None:
        rows = rows[rows["team"] == team]
    out = [{"subject": f"{r['namespace']}/{r['pod'] if _text(r['pod']) else r['job']}",
            "scope": r["scope"], "team": r["team"], "verdict": r["verdict"], "nodes": r["nodes"], "gpus": r["gpus"],
            "gpu_model": r["gpu_model"], "worst_link": _text(r["worst_link"]) or "unknown",
            "better_link": _text(r["better_link"]), "better_gpus": _text(r["better_gpus"]),
            "reason": r["reason"], "penalty_share": r["penalty_share"], "penalty_usd": r["penalty_usd"],
            "cost_usd": r["cost_usd"]} for r in rows.to_dict("records")]
    return sorted(out, key=lambda r: (-_money(r["penalty_usd"]), r["subject"]))


def blocked_rows(frame: Any, *, team: str | None) -> list[dict]:
    """Pending pods blocked by fragmentation (verdict 'blocked': enough GPUs were free, no block fit), the
    team's or all, largest opportunity cost first, each with the cheapest defragmentation move."""
    if frame is None or not len(frame):
        return []
    rows = frame[frame["verdict"] == "blocked"]
    if team is not None:
        rows = rows[rows["team"] == team]
    out = [{"subject": f"{r['namespace']}/{r['pod']}", "team": r["team"], "job": _text(r["job"]),
            "gpus_requested": r["gpus_requested"], "gpu_model": _text(r["gpu_model"]) or "any",
            "wait_hours": r["wait_hours"], "blocked_hours": r["blocked_hours"],
            "max_free_gpus": r["max_free_gpus"], "max_free_block": r["max_free_block"], "why": r["why"],
            "opportunity_usd": r["opportunity_usd"], "move": defrag_move(r)} for r in rows.to_dict("records")]
    return sorted(out, key=lambda r: (-_money(r["opportunity_usd"]), r["subject"]))


def defrag_move(row: dict) -> str:
    """The cheapest defragmentation move in words ('' when the analysis found none)."""
    pods, node = _text(row.get("defrag_pods")), _text(row.get("defrag_node"))
    if not pods or not node:
        return ""
    moved = row.get("defrag_gpus_moved")
    gpus = f" ({int(moved)} GPU{'s' if int(moved) != 1 else ''})" if not _missing(moved) else ""
    return f"move {pods.replace(',', ', ')}{gpus} off {node}"


def capacity_rows(frame: Any) -> list[dict]:
    """Per pool (GPU model): its size and, for k = 4 and 8, the share of the window's buckets in which no
    k-GPU job could start although k or more GPUs were free — on one node at all (``split_k``), and as a
    fully NVLink-connected block (``nvlink_k``). ``largest_nvlink_block``: the largest free NVLink block
    seen; where no NVLink pair was ever free (a PCIe pool, or topology unknown) ``nvlink_k`` is None,
    since the share would only restate that the pool shows no NVLink."""
    if frame is None or not len(frame):
        return []
    out = []
    for model, pool in frame.groupby("gpu_model", sort=True):
        row = {"gpu_model": model, "gpus": int(pool["gpus"].max()), "nodes": int(pool["nodes"].max()),
               "buckets": len(pool), "mean_free_gpus": float(pool["free_gpus"].mean()),
               "known": bool((pool["topology_known_gpus"].fillna(0) > 0).any())}
        largest = pool["largest_nvlink_block"].max() if row["known"] else None
        row["largest_nvlink_block"] = None if _missing(largest) else int(largest)
        nvlink = row["largest_nvlink_block"] is not None and row["largest_nvlink_block"] >= 2
        for k in BLOCK_SIZES:
            free = pool[pool["free_gpus"] >= k]
            row[f"free_{k}"] = len(free)
            row[f"split_{k}"] = float((free[f"jobs_{k}"] == 0).mean()) if len(free) else None
            judged = free[f"nvlink_jobs_{k}"].dropna()  # buckets whose layout is known
            row[f"nvlink_{k}"] = float((judged == 0).mean()) if len(judged) and nvlink else None
        out.append(row)
    return out


def _total(rows: list[dict], column: str) -> float:
    return round(sum(_money(r[column]) for r in rows), 2)


def _missing(value: Any) -> bool:
    return value is None or value != value  # None, NaN, NaT


def _text(value: Any) -> str:
    return "" if _missing(value) else str(value)


def _money(value: Any) -> float:
    return 0.0 if _missing(value) else float(value)
