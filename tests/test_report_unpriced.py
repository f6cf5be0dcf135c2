"""The weekly report and analyze's recommendations on a store where no GPU has a price: every dollar
says "unpriced", never $0.00 (issue 31 item 8). A real DuckDB store of sample_data without its prices,
the real `gpuwatch report weekly`."""

from __future__ import annotations

import html
import re

from gpuwatch.cli import main
from tests.app_support import sample_bundle


def test_a_report_without_any_price_shows_no_dollar_amount(tmp_path, capsys):
    bundle = tmp_path / "b"
    bundle.mkdir()
    for file in sample_bundle().iterdir():
        if file.name != "prices.csv" and file.name != "truth.csv":
            (bundle / file.name).symlink_to(file)
    db, out = tmp_path / "s.duckdb", tmp_path / "report"
    assert main(["ingest", "--from", str(bundle), "--db", str(db)]) == 0
    assert main(["report", "weekly", "--db", str(db), "--week", "2026-W46", "--out", str(out)]) == 0
    page = (out / "fleet.html").read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S)))
    assert re.findall(r"\$\d[\d,]*\.\d\d", text) == []  # before: "Spend this week $0.00", "$0.00/hour" ...
    assert "unpriced" in text
    for path in out.glob("team-*.html"):  # (no team is charged anything here, so there may be none)
        team = path.read_text(encoding="utf-8")
        team_text = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(style|script)\b.*?</\1>", "", team, flags=re.S)))
        assert re.findall(r"\$\d[\d,]*\.\d\d", team_text) == [], path
