"""``gpuwatch doctor``: before (or after) ingesting, which signals exist per GPU node, which findings
each missing one blinds, and the exact config that enables it.

``--from prometheus://host:port`` asks Prometheus (doctor/probe.py: the series of the last
``--lookback`` at ``--at``); ``--db STORE`` reads the store's coverage of the last ``--window``
(analyses/signal_coverage.sql); with both, Prometheus' view plus the store's prices. The signals and
their enabling config are gpuwatch/signals.py's, who needs which is findings.NEEDS, and the verdict
per finding is findings/judgement.py's: the same the analyzer, app, report and derived metrics show.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuwatch import signals, units
from gpuwatch.findings import ALL, NEEDS, judgement

LOOKBACK = "1h"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", metavar="URL", help="prometheus://host:port to check")
    parser.add_argument("--db", help="a gpuwatch store to check (its prices; without --from: everything it holds)")
    parser.add_argument("--at", help="--from: the instant to check, ISO-8601 UTC (default: now)")
    parser.add_argument("--lookback", default=LOOKBACK,
                        help="--from: a signal counts when a series of it exists this far back (default: %(default)s)")
    parser.add_argument("--window", default="7d", help="--db alone: the window ending at the store's latest data "
                                                       "(default: %(default)s)")
    parser.add_argument("--team-label", default="team", metavar="KEY",
                        help="the pod label that names the team (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    if not (args.source or args.db):
        raise units.UsageError("--from prometheus://host:port or --db STORE: required (what to check)")
    if args.source and not args.source.startswith(("prometheus://", "http://", "https://")):
        raise units.UsageError(f"--from: {args.source!r} is not a Prometheus URL (prometheus://host:port)")
    units.parse_duration(args.lookback, what="--lookback")
    window = timedelta(seconds=units.parse_duration(args.window, what="--window"))
    at = units.parse_utc(args.at, what="--at") if args.at else datetime.now(UTC).replace(tzinfo=None)
    team_label = units.parse_label_key(args.team_label, what="--team-label")
    stored = _store_coverage(args.db, window) if args.db else None
    if args.source:
        from gpuwatch.doctor import probe
        from gpuwatch.ingest import prometheus

        coverage, fleet = probe.coverage(prometheus.Client(args.source), at=units.epoch_seconds(at),
                                         lookback=args.lookback, team_label=team_label)
        if stored is not None:
            coverage = _with_prices(coverage, stored[0])
        head = f"gpuwatch doctor: {args.source} at {at:%Y-%m-%dT%H:%M:%SZ}, series of the last {args.lookback}"
        gpus = {node: len(uuids) for node, uuids in fleet.items()}
    else:
        coverage, head, gpus = stored[0], stored[1], stored[2]
    print(report(coverage, gpus, head=head))
    return 0


def _store_coverage(db: str, window: timedelta) -> tuple[Any, str, dict[str, int]]:
    """(coverage, heading, node -> GPUs) of the store at ``db`` over its last ``window``."""
    from pathlib import Path

    from gpuwatch import analyses, store

    if not Path(db).is_file():
        raise units.DataError(f"--db {db}: no such store")
    con = store.connect(db, read_only=True)
    try:
        last = store.data_range(con)[1]
        if last is None:
            return _empty(), f"gpuwatch doctor: {db} holds no samples", {}
        end = last + timedelta(seconds=1)
        coverage = analyses.run(con, "signal_coverage", start=end - window, end=end)
        gpus = dict(con.execute("SELECT node, count(DISTINCT gpu_uuid) FROM stg_devices GROUP BY node").fetchall())
    finally:
        con.close()
    return coverage, f"gpuwatch doctor: {db}, {end - window:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC", gpus


def _empty():
    import pandas as pd

    return pd.DataFrame(columns=["node", "signal", "observed", "expected", "present"])


def _with_prices(coverage: Any, stored: Any) -> Any:
    """Prometheus' coverage with the store's prices row."""
    import pandas as pd

    prices = stored[stored["signal"] == "prices"]
    return pd.concat([coverage[coverage["signal"] != "prices"], prices], ignore_index=True)


def blinds(name: str) -> tuple[list[str], list[str]]:
    """(findings not judged without signal ``name``, findings judged on less evidence without it)."""
    needs = {finding: judgement.signal_needs(NEEDS, finding) for finding in ALL}
    return ([f for f, wanted in needs.items() if wanted.get(name) is True],
            [f for f, wanted in needs.items() if wanted.get(name) is False])


def report(coverage: Any, gpus: dict[str, int], *, head: str) -> str:
    """The readiness report: per node (nodes alike grouped), cluster-wide signals, findings, what to enable."""
    lines = [head]
    if not gpus:
        return "\n".join([*lines,
                          "no complete step yet: no GPU series (dcgm-exporter or gpuwatch's exporter) in this range. "
                          "Is the exporter scraped by this Prometheus, and for long enough? Every finding is not "
                          "judged until it is."])
    pods = coverage[(coverage["signal"] == "ksm_status") & coverage["node"].notna()]
    lines.append(f"{len(gpus)} GPU node(s), {sum(gpus.values())} GPU(s), "
                 f"{int(pods['expected'].fillna(0).sum())} GPU pod(s) seen")
    lines += ["", "per GPU node:", *_node_lines(coverage, gpus)]
    lines += ["", "cluster-wide:", *_cluster_lines(coverage)]
    verdict = judgement.judge(coverage, NEEDS, ALL)
    lines += ["", "findings:", *_finding_lines(verdict)]
    missing = [n for n in signals.SIGNALS if _absent_somewhere(coverage, n)]
    if missing:
        lines += ["", "to enable (each config once):"]
        lines += ["  " + line for block in signals.enable(*missing) for line in block.splitlines()]
    return "\n".join(lines)


def _absent_somewhere(coverage: Any, name: str) -> bool:
    rows = coverage[coverage["signal"] == name]
    could = rows[rows["expected"].isna() | (rows["expected"] > 0)]
    return bool(could["present"].eq(False).any())


def _node_lines(coverage: Any, gpus: dict[str, int]) -> list[str]:
    per_node = coverage[coverage["node"].notna()]
    groups: dict[tuple, list[str]] = {}
    for node in sorted(gpus):
        rows = per_node[per_node["node"] == node]
        order = list(signals.SIGNALS)
        state = tuple((r.signal, _state(r)) for r in rows.sort_values("signal", key=lambda c: c.map(order.index))
                      .itertuples())
        groups.setdefault(state, []).append(node)
    out = []
    for state, nodes in groups.items():
        shown = ", ".join(nodes[:6]) + (f" and {len(nodes) - 6} more" if len(nodes) > 6 else "")
        out.append(f"  {shown} ({len(nodes)} node(s), {sum(gpus[n] for n in nodes)} GPU(s))")
        have = [signals.SIGNALS[name].label for name, text in state if text == "present"]
        out.append("    present: " + (", ".join(have) or "nothing"))
        for name, text in state:
            if text not in ("present", "nothing to check"):
                if text == "not known":
                    out.append(f"    NOT RECORDED: {signals.SIGNALS[name].label} (a store keeps events, not whether "
                               f"the series exist: --from prometheus://... checks){_blind_text(name)}")
                    continue
                word, _, rest = text.partition(" ")
                out.append(f"    {word.upper()}{' ' + rest if rest else ''}: {signals.SIGNALS[name].label}{_blind_text(name)}")
    return out


def _state(row: Any) -> str:
    import pandas as pd

    if pd.isna(row.present):
        return "not known"
    known = not pd.isna(row.expected)
    if known and int(row.expected) == 0:
        return "nothing to check"
    if not bool(row.present):
        return "missing"
    if known and int(row.observed) < int(row.expected):
        return f"partial ({int(row.observed)} of {int(row.expected)})"
    return "present"


def _blind_text(name: str) -> str:
    blind, less = blinds(name)
    parts = ([f"not judged: {', '.join(blind)}"] if blind else []) + ([f"less evidence: {', '.join(less)}"] if less else [])
    return f" -> {'; '.join(parts)}" if parts else ""


def _cluster_lines(coverage: Any) -> list[str]:
    out = []
    for row in coverage[coverage["node"].isna()].sort_values("signal").itertuples():
        label = signals.SIGNALS[row.signal].label
        text = _state(row)
        if text == "not known":
            out.append(f"  {label}: not known here (prices live in a store: add --db STORE)")
            continue
        counted = f" ({int(row.observed)} of {int(row.expected)})" if text == "present" else ""
        out.append(f"  {label}: {text}{counted}" + ("" if text == "present" else _blind_text(row.signal)))
    return out


def _finding_lines(verdict: Any) -> list[str]:
    out = []
    for state in reversed(judgement.STATES):
        rows = verdict[verdict["state"] == state]
        if state == "judged":
            if len(rows):
                out.append(f"  judged: {', '.join(rows['finding'])}")
            continue
        out += [f"  {state.upper()}: {r.finding} - {r.reason}" for r in rows.itertuples()]
    return out
