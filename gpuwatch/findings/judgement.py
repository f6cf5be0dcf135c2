"""Which findings the store's evidence can judge: one row per finding, from ``NEEDS`` and signal coverage.

A finding judges only with the signals it has (docs/architecture.md#what-is-judged). For each signal
a finding needs (``signal:`` in ``findings.NEEDS``) or is better with (``partial:``), the coverage
(analyses/signal_coverage.sql) says per GPU node whether the evidence is there. Nodes that could not
carry it (no samples, no pods there) do not count either way. A finding is

- ``not judged`` when a needed signal is absent on every node that could carry it: its numbers are
  unknown, never 0, and every consumer says so with the config that enables the signal;
- ``partly judged`` when a needed signal is absent on some nodes, or a ``partial:`` one is missing:
  judged on less evidence, said with what is missing;
- ``unverified`` when the store cannot tell absence from "nothing happened" (health events, GPU
  processes): ``gpuwatch doctor`` asks Prometheus;
- ``judged`` otherwise.
"""

from __future__ import annotations

from typing import Any

from gpuwatch import signals

STATES = ("judged", "unverified", "partly judged", "not judged")  # best to worst
COLUMNS = ("finding", "state", "judged", "missing", "reason", "enable")


def signal_needs(needs: dict[str, dict[str, str]], finding: str) -> dict[str, bool]:
    """signal -> True if ``finding`` needs it (``signal:``), False if it is only better with it (``partial:``)."""
    out: dict[str, bool] = {}
    for source in needs.get(finding, {}).values():
        kind, _, name = source.partition(":")
        if name and kind in ("signal", "partial"):
            out[name] = out.get(name, False) or kind == "signal"
    return out


def judge(coverage: Any, needs: dict[str, dict[str, str]], findings: tuple[str, ...]):
    """One row per finding that needs a signal (COLUMNS): its state, whether it is judged (False: not
    judged; its figures are unknown), the missing signals, one line of reason, and the config that
    enables each missing one."""
    import pandas as pd

    rows = []
    for finding in findings:
        wanted = signal_needs(needs, finding)
        if not wanted:
            continue
        states, reasons, missing = [], [], []
        for name, required in wanted.items():
            state, why = _signal_state(coverage, name, required)
            states.append(state)
            if state != "judged":
                missing.append(name)
                reasons.append(why)
        state = max(states, key=STATES.index) if states else "judged"
        rows.append({"finding": finding, "state": state, "judged": state != "not judged",
                     "missing": ",".join(missing), "reason": "; ".join(reasons),
                     "enable": "\n".join(signals.enable(*missing))})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _signal_state(coverage: Any, name: str, required: bool) -> tuple[str, str]:
    """(state, reason) of one signal over the coverage rows."""
    signal = signals.SIGNALS[name]
    rows = coverage[coverage["signal"] == name] if coverage is not None and len(coverage) else coverage
    if rows is None or not len(rows):
        return ("not judged" if required else "partly judged"), f"{signal.label}: no data in the window"
    if rows["present"].isna().all():
        notes = rows["note"].dropna() if "note" in rows else ()
        return "unverified", f"{signal.label}: " + (notes.iloc[0] if len(notes) else "not known")
    could = rows[rows["expected"].isna() | (rows["expected"] > 0)]
    if not len(could):
        return "judged", ""
    have = could[could["present"].fillna(False).astype(bool)]
    lacking = could[could["present"].eq(False)]
    if not signal.per_node:
        row = could.iloc[0]
        if not bool(row["present"]):
            return ("not judged" if required else "partly judged"), f"{signal.label} missing"
        if pd_int(row["expected"]) and pd_int(row["observed"]) < pd_int(row["expected"]):
            return "partly judged", f"{signal.label}: on {pd_int(row['observed'])} of {pd_int(row['expected'])}"
        return "judged", ""
    if not len(lacking):
        return "judged", ""
    nodes = ", ".join(sorted(map(str, lacking["node"])))
    if not len(have):
        return ("not judged" if required else "partly judged"), (
            f"{signal.label} missing on all {len(could)} GPU node(s)")
    return "partly judged", f"{signal.label} missing on {len(lacking)} of {len(could)} GPU node(s): {nodes}"


def pd_int(value: Any) -> int:
    """A count cell as int (NULL: 0)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def line(judgement: Any, finding: str) -> str | None:
    """``finding``'s "not judged/partly judged: <reason>; enable: <config>" for a consumer's one-line
    text, or None when it is judged (or not in ``judgement``)."""
    row = state_of(judgement, finding)
    if row is None or row["state"] == "judged":
        return None
    names = [n for n in row["missing"].split(",") if n]
    enable = " | ".join(" ".join(block.split()) for block in signals.enable(*names)) if names else ""
    return f"{row['state']}: {row['reason']}" + (f"; enable: {enable}" if enable and row["state"] != "unverified" else "")


def state_of(judgement: Any, finding: str) -> Any:
    """The judgement row of ``finding``, or None."""
    if judgement is None or not len(judgement):
        return None
    rows = judgement[judgement["finding"] == finding]
    return None if not len(rows) else rows.iloc[0]


def judged(judgement: Any, finding: str) -> bool:
    """False when ``finding`` is not judged (its figures are unknown); True otherwise."""
    row = state_of(judgement, finding)
    return row is None or bool(row["judged"])
