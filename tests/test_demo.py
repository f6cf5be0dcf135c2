"""`gpuwatch demo --no-app` end to end: the live leg really goes exporter -> Prometheus (Debian's, or
the exporter's own /metrics pages when none is installed) -> ingest -> analyze, the history leg
analyses, reclaims (dry-run) and reports the simulated week, and a healthy demo prints no ERROR."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.test_app_browser import free_port

pytestmark = pytest.mark.slow


def _demo(tmp_path, env=None, extra: tuple[str, ...] = ()) -> tuple[str, object]:
    work = tmp_path / ".demo"
    out = subprocess.run([sys.executable, "-m", "gpuwatch", "demo", "--no-app", "--workdir", str(work),
                          "--exporter-listen", f"127.0.0.1:{free_port()}", "--live-seconds", "8s", *extra],
                         capture_output=True, text=True, cwd=ROOT, env=env or os.environ.copy(), timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert "ERROR" not in text and "Traceback" not in text, text[-3000:]
    return text, work


def _live_samples(work) -> int:
    from gpuwatch import store

    con = store.connect(str(work / "live.duckdb"), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM samples").fetchone()[0]
    finally:
        con.close()


def test_the_demo_runs_the_pipeline_it_describes(tmp_path):
    if not shutil.which("prometheus"):
        pytest.skip("Debian's prometheus is not installed (make system-deps)")
    text, work = _demo(tmp_path)
    assert "== live: Prometheus" in text and "-> Prometheus -> ingest -> analyze" in text
    assert _live_samples(work) > 0 and (work / "live-findings" / "chargeback.csv").is_file()
    assert "fleet cost $62,092.80" in text  # the history leg: sample_data's week
    assert (work / "reports" / "fleet.html").is_file()
    assert "app      : http://127.0.0.1:8501 serves the history store" in text


def test_without_prometheus_the_demo_ingests_the_exporters_own_pages(tmp_path):
    bindir = tmp_path / "bin"  # PATH with this Python only: no prometheus
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bindir)}
    text, work = _demo(tmp_path, env=env, extra=("--gpus", "8"))  # the live leg is what this test is about
    assert "no `prometheus` installed: saved" in text and "-> /metrics pages -> ingest -> analyze" in text
    assert _live_samples(work) > 0
