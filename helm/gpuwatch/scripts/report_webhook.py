"""Post the weekly report's headline to a Slack-compatible incoming webhook (``{"text": ...}``).

Runs after `gpuwatch report weekly` in the chart's report CronJob. Reads ``chargeback.csv`` from
the report directory, totals its money columns (``MONEY``: each row's own dollars) overall and
cost_usd per team, and posts one message.
The URL comes from the environment (a Secret), never from the command line. Stdlib only.

    GPUWATCH_REPORT_WEBHOOK_URL=https://hooks.slack.com/... python report_webhook.py --dir /data/reports
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import urllib.request
from collections import defaultdict
from pathlib import Path

URL_ENV = "GPUWATCH_REPORT_WEBHOOK_URL"


# chargeback.csv's money columns (gpuwatch report weekly): each row's own dollars, so a column's sum is
# the fleet's (cost_usd: the fleet cost; the rest: its parts). Only these are totalled: a column is
# summed because it is known to add up, never because its name ends in _usd.
MONEY = ("cost_usd", "productive_usd", "false_util_usd", "idle_usd", "unobserved_usd")
LABELS = {"cost_usd": "fleet cost", "productive_usd": "productive", "false_util_usd": "false utilization",
          "idle_usd": "idle", "unobserved_usd": "unobserved"}


def summarise(rows: list[dict[str, str]], *, top: int = 5) -> str:
    """Headline text: the fleet cost (the sum of cost_usd over every row: teams, unallocated, stranded)
    and its parts, then the ``top`` teams by cost."""
    money = [c for c in MONEY if c in (rows[0] if rows else {})]
    if "cost_usd" not in money:
        return "gpuwatch weekly report written (chargeback.csv has no cost_usd column to total)."
    totals: dict[str, float] = defaultdict(float)
    by_team: dict[str, float] = defaultdict(float)
    for row in rows:
        for column in money:
            totals[column] += _number(row.get(column))
        by_team[row.get("team") or row.get("namespace") or "(none)"] += _number(row.get("cost_usd"))
    period = f" {rows[0]['period']}" if rows and rows[0].get("period") else ""
    lines = [f"gpuwatch weekly GPU report{period}: " + ", ".join(f"{LABELS[c]} ${totals[c]:,.2f}" for c in money)]
    ranked = sorted(by_team.items(), key=lambda kv: -kv[1])[:top]
    lines += [f"- {team}: ${usd:,.2f}" for team, usd in ranked]
    return "\n".join(lines)


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else 0.0
    except ValueError:
        return 0.0


def post(url: str, text: str, *, timeout: float = 10.0) -> int:
    """POST ``{"text": text}``; returns the HTTP status (raises on network errors)."""
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return reply.status


def main(argv: list[str] | None = None, *, environ: dict[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="directory `gpuwatch report weekly` wrote")
    args = parser.parse_args(argv)
    url = (os.environ if environ is None else environ).get(URL_ENV, "")
    if not url:
        print(f"report_webhook: {URL_ENV} is empty; set report.webhook.existingSecret", file=sys.stderr)
        return 2
    path = args.dir / "chargeback.csv"
    if not path.is_file():
        print(f"report_webhook: {path} not found; did `gpuwatch report weekly` run?", file=sys.stderr)
        return 2
    with path.open(newline="", encoding="utf-8") as handle:
        text = summarise(list(csv.DictReader(handle)))
    try:
        status = post(url, text)
    except OSError as exc:  # URLError/HTTPError/timeouts are all OSErrors
        print(f"report_webhook: posting failed: {exc}", file=sys.stderr)
        return 1
    print(f"report_webhook: posted ({status})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
