"""Post the weekly report's headline to a Slack-compatible incoming webhook (``{"text": ...}``).

Runs after `gpuwatch report weekly` in the chart's report CronJob. Reads ``chargeback.csv`` from
the report directory, totals every ``*_usd`` column overall and per team, and posts one message.
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


def summarise(rows: list[dict[str, str]], *, top: int = 5) -> str:
    """Headline text: fleet totals of each ``*_usd`` column, then the ``top`` teams by the first."""
    money = [c for c in (rows[0] if rows else {}) if c.endswith("_usd")]
    if not money:
        return "gpuwatch weekly report written (chargeback.csv has no *_usd columns to total)."
    totals: dict[str, float] = defaultdict(float)
    by_team: dict[str, float] = defaultdict(float)
    for row in rows:
        for column in money:
            totals[column] += _number(row.get(column))
        by_team[row.get("team") or row.get("namespace") or "(none)"] += _number(row.get(money[0]))
    lines = ["gpuwatch weekly GPU report: " + ", ".join(f"{c} ${totals[c]:,.2f}" for c in money)]
    ranked = sorted(by_team.items(), key=lambda kv: -kv[1])[:top]
    lines += [f"- {team}: ${usd:,.2f} ({money[0]})" for team, usd in ranked]
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
