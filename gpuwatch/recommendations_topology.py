"""Recommendations from the topology findings (pure; same rules as gpuwatch/recommendations.py).

Kinds (docs/architecture.md#topology), both at stake, not counted as savings:

- ``fix_placement`` (topology_placement, verdict misplaced or spread), one per (pool, namespace): the
  estimated penalty of its misplaced pods and spread jobs (a job row covers its pods), with the jobs
  affected; the action is the kubelet Topology Manager policy ``single-numa-node`` and NVLink-aware
  scheduling for the pool (and packing multi-pod jobs onto the fewest nodes where they were spread).
  The penalty is a model estimate (``placement_comm_share``), so it is never claimed as a saving.
- ``defragment`` (blocked_demand, verdict blocked), one per pending pod: the pods to move and the
  node they free; the waste is the opportunity cost of the blocked wait (GPUs x price x blocked hours),
  not spend.
"""

from __future__ import annotations

from collections import defaultdict

from gpuwatch.recommendations import RunRate, number, present, records, row, who

NOT_COUNTED = ("fix_placement", "defragment")
SHOWN = 5  # jobs named in the evidence


def rows(*, rate: RunRate, topology_placement=None, blocked_demand=None) -> list[dict]:
    """Every topology recommendation (any frame may be None or empty)."""
    return _fix_placement(topology_placement, rate) + _defragment(blocked_demand, rate)


def _charged(frame) -> list[dict]:
    """Misplaced/spread rows, a pod left out where a misplaced/spread row of its job covers it."""
    bad = [r for r in records(frame) if r.get("verdict") in ("misplaced", "spread")]
    jobs = {(r.get("namespace"), r.get("job")) for r in bad if r.get("scope") == "job"}
    return [r for r in bad if r.get("scope") == "job" or (r.get("namespace"), r.get("job")) not in jobs
            or not present(r.get("job"))]


def _fix_placement(frame, rate: RunRate) -> list[dict]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in _charged(frame):
        groups[(str(r.get("gpu_model")), r.get("namespace"))].append(r)
    out = []
    for (model, namespace), group in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        waste = sum(number(r.get("penalty_usd")) for r in group)
        spread = [r for r in group if r.get("verdict") == "spread"]
        names = [_name(r) for r in sorted(group, key=lambda r: -number(r.get("penalty_usd")))]
        links = sorted({str(r.get("worst_link")) for r in group if present(r.get("worst_link"))})
        evidence = (f"{len(group) - len(spread)} misplaced (a better-connected block was free on their node when they "
                    f"started), {len(spread)} spread over more nodes than needed; worst links {', '.join(links) or 'unknown'}; "
                    f"jobs: {', '.join(names[:SHOWN])}{f' and {len(names) - SHOWN} more' if len(names) > SHOWN else ''}")
        action = (f"On the {model} pool, set the kubelet Topology Manager policy to single-numa-node and schedule "
                  f"multi-GPU pods NVLink-aware (a topology-aware scheduler) for namespace {namespace}"
                  + ("; pack multi-pod jobs onto the fewest nodes (gang/bin-packing scheduling)" if spread else ""))
        nodes = sorted({n for r in group for n in str(r.get("nodes") or "").split(",") if n})
        team = next((r.get("team") for r in group if present(r.get("team"))), None)
        out.append(row("fix_placement", {"namespace": namespace, "pod": None, "team": team, "node": ",".join(nodes)},
                       evidence=evidence, waste=rate.monthly(waste), share=0.0, not_counted=NOT_COUNTED,
                       basis=rate.basis("estimated placement penalty", waste)
                       + "; an estimate (link-bandwidth model, placement_comm_share), not counted as savings",
                       action=action, subject=f"{model}", target="single-numa-node"))
    return out


def _name(r: dict) -> str:
    return str(r.get("job") if r.get("scope") == "job" else r.get("pod"))


def _defragment(frame, rate: RunRate) -> list[dict]:
    out = []
    for r in records(frame):
        if r.get("verdict") != "blocked":
            continue
        waste = number(r.get("opportunity_usd"))
        k = number(r.get("gpus_requested"))
        evidence = (f"waited {number(r.get('wait_hours')):.1f} h, {number(r.get('blocked_hours')):.1f} h of it blocked "
                    f"while up to {number(r.get('max_free_gpus')):.0f} GPUs were free in its pool; {r.get('why')}")
        if present(r.get("defrag_pods")):
            action = (f"Move {r['defrag_pods']} off {r.get('defrag_node')} ({number(r.get('defrag_gpus_moved')):.0f} GPUs) "
                      f"to open {k:g} GPUs there for {who(r)}")
        else:
            action = (f"Defragment the pool of {who(r)}: no move of running pods opens {k:g} GPUs on one node; "
                      "drain a node or bin-pack new pods")
        out.append(row("defragment", {**r, "node": r.get("defrag_node")}, evidence=evidence, waste=rate.monthly(waste),
                       share=0.0, not_counted=NOT_COUNTED,
                       basis=rate.basis("opportunity cost of the blocked wait (requested GPUs x price x blocked hours)",
                                        waste) + "; an opportunity cost, not spend, not counted as savings",
                       action=action, target=r.get("defrag_node") if present(r.get("defrag_node")) else None))
    return out
