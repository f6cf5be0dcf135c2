"""The two stdlib scripts the chart runs in the gpuwatch image, run here for real.

helm/gpuwatch/scripts/analyzer.py runs the real `gpuwatch ingest` and `gpuwatch analyze` (on a
small `gpuwatch simulate` bundle) into a copy and publishes it by rename: the published file
appears, a DuckDB reader that holds the old file open read-only (as the app does) neither blocks
the run nor sees a half-written file, a failing step leaves the published file untouched, and
later runs ingest incrementally. helm/gpuwatch/scripts/report_webhook.py posts to a real local
HTTP server (standing in for Slack's incoming webhook).
"""

from __future__ import annotations

import csv
import http.server
import importlib.util
import json
import subprocess
import sys
import threading
from typing import ClassVar

import pytest

from tests.support.bundles import SAMPLE_DATA
from tests.support.helm_chart import CHART

GPUWATCH = f"{sys.executable} -m gpuwatch"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"chart_{name}", CHART / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "sim"
    subprocess.run([sys.executable, "-m", "gpuwatch", "simulate", "--gpus", "8", "--days", "0.25",
                    "--out", str(out), "--format", "csv"], check=True, capture_output=True)
    return out


def run_analyzer(db, source, out_dir, *extra):
    argv = [sys.executable, str(CHART / "scripts" / "analyzer.py"), "--db", str(db), "--gpuwatch", GPUWATCH,
            *extra, "--", "--from", str(source), "--", "--out", str(out_dir)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_analyzer_publishes_then_survives_a_reader_and_a_failure(tmp_path, bundle):
    duckdb = pytest.importorskip("duckdb")
    db, out = tmp_path / "gpuwatch.duckdb", tmp_path / "analysis"
    first = run_analyzer(db, bundle, out, "--overlap", "0")
    assert first.returncode == 0, first.stderr
    assert db.is_file() and not (tmp_path / "gpuwatch.duckdb.next").exists()
    assert (out / "idle_hoarding.csv").is_file()

    reader = duckdb.connect(str(db), read_only=True)  # the app keeps the file open like this
    before = reader.execute("select count(*) from samples").fetchone()[0]
    assert before > 0
    second = run_analyzer(db, bundle, out, "--overlap", "0")
    assert second.returncode == 0, second.stderr  # no "Could not set lock" while a reader is open
    assert reader.execute("select count(*) from samples").fetchone()[0] == before
    reader.close()
    with duckdb.connect(str(db), read_only=True) as fresh:  # idempotent re-ingest: same rows
        assert fresh.execute("select count(*) from samples").fetchone()[0] == before

    published = db.read_bytes()
    failed = run_analyzer(db, tmp_path / "no-such-bundle", out)
    assert failed.returncode != 0
    assert "left as it was" in failed.stderr
    assert db.read_bytes() == published


def test_later_runs_ingest_incrementally(tmp_path):
    script = load("analyzer")
    prom = ["--from", "prometheus://prometheus:9090"]
    assert script.incremental(prom, overlap_s=3600) == [*prom, "--since-last", "--tail", "3600s"]
    assert script.incremental(["--from=https://thanos:10902"], overlap_s=90) == \
        ["--from=https://thanos:10902", "--since-last", "--tail", "90s"]
    for kept in ([*prom, "--start", "2026-01-01"], [*prom, "--since-last"], ["--from", "bundle/"]):
        assert script.incremental(kept, overlap_s=3600) == kept
    assert script.incremental(prom, overlap_s=0) == prom
    assert script.split_args(["--", "--from", "x", "--", "--out", "y"]) == (["--from", "x"], ["--out", "y"])
    assert script.seconds("15m") == 900 and script.seconds("1h") == 3600 and script.seconds("90") == 90
    assert script.seconds("1h30m") == 5400 and script.seconds("500ms") == 0.5  # every duration the schema admits


class _Hook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    _Hook.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Hook.received
    server.shutdown()


def write_chargeback(path, rows):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_report_webhook_posts_totals_per_team(tmp_path, webhook):
    url, received = webhook
    write_chargeback(tmp_path / "chargeback.csv", [
        {"period": "2026-W46", "team": "ml", "namespace": "ml", "cost_usd": "100.50", "idle_usd": "40", "total_usd": "9"},
        {"period": "2026-W46", "team": "ml", "namespace": "ml-dev", "cost_usd": "20", "idle_usd": "20", "total_usd": "9"},
        {"period": "2026-W46", "team": "", "namespace": "search", "cost_usd": "300", "idle_usd": "", "total_usd": "9"}])
    script = load("report_webhook")
    assert script.main(["--dir", str(tmp_path)], environ={script.URL_ENV: url}) == 0
    (content_type, body), = received
    assert content_type == "application/json"
    lines = body["text"].splitlines()
    # only the columns known to add up are totalled (total_usd, unknown, is not)
    assert lines[0] == "gpuwatch weekly GPU report 2026-W46: fleet cost $420.50, idle $60.00"
    assert lines[1:] == ["- search: $300.00", "- ml: $120.50"]


def test_report_webhook_posts_the_fleet_cost_of_a_real_report(tmp_path, webhook):
    """Regression (issue 31, item 10): the webhook summed every *_usd column of chargeback.csv, one of
    which (fleet_cost_usd) repeated the fleet total on every row: it posted 13x the fleet cost. Here on
    the real `gpuwatch report weekly` of sample_data: the posted fleet cost is the report's, to the cent,
    and no column of chargeback.csv repeats one value on every row while summing it is the natural act."""
    from gpuwatch.cli import main

    db, out = tmp_path / "s.db", tmp_path / "report"
    assert main(["ingest", "--from", str(SAMPLE_DATA), "--db", str(db)]) == 0
    assert main(["report", "weekly", "--db", str(db), "--out", str(out)]) == 0
    url, received = webhook
    script = load("report_webhook")
    assert script.main(["--dir", str(out)], environ={script.URL_ENV: url}) == 0
    headline = received[0][1]["text"].splitlines()[0]
    assert headline.startswith("gpuwatch weekly GPU report 2026-W46: fleet cost $62,092.80, productive $")
    with (out / "chargeback.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    fleet_html = (out / "fleet.html").read_text()
    assert "$62,092.80" in fleet_html
    for column in rows[0]:
        if column.endswith("_usd"):  # a money column adds up: it never holds the same total on every row
            values = {r[column] for r in rows if r[column]}
            assert len(values) > 1, column


def test_report_webhook_fails_clearly(tmp_path, webhook):
    script = load("report_webhook")
    assert script.main(["--dir", str(tmp_path)], environ={}) == 2  # no URL
    assert script.main(["--dir", str(tmp_path)], environ={script.URL_ENV: webhook[0]}) == 2  # no CSV
    write_chargeback(tmp_path / "chargeback.csv", [{"team": "a", "total_usd": "1"}])
    assert script.main(["--dir", str(tmp_path)], environ={script.URL_ENV: "http://127.0.0.1:9/none"}) == 1
    assert webhook[1] == []
