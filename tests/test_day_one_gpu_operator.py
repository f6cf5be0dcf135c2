"""Day one on the GPU Operator path (issue 32 items 1 and 2), end to end on a REAL Prometheus.

Debian's Prometheus (tests/support/prometheus.py) is backfilled with what a GPU-Operator cluster
serves (tests/support/gpu_operator.py): dcgm-exporter's DEFAULT counters (no SM activity, no NVLink
traffic), ``Hostname``, the workload in ``exported_*`` labels as the operator's ServiceMonitor
(``honorLabels: false``) leaves it, and kube-state-metrics as deployed by default (no pod labels).
Then the user's path, each step the real command: ``gpuwatch doctor`` -> ``ingest`` -> ``analyze``
-> ``export-derived`` -> the app (streamlit.testing, and Chromium for the Readiness page) -> the
weekly report. Every blind spot must be named with its enabling config, and no $0 may stand in for
an unknown. The partial evidence (busy_without_work) must find exactly the pods false utilization
finds on the same fleet with SM activity (the ground truth: the same fleet's bundle, every signal).
A second, empty Prometheus is a fresh install: "no complete step yet", nothing loaded.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support import gpu_operator
from tests.support.prometheus import backfill, running

pytestmark = pytest.mark.slow
START, END = "2026-11-09T12:00:00Z", "2026-11-09T18:00:00Z"
WINDOW = (dt.datetime(2026, 11, 9, 12), dt.datetime(2026, 11, 9, 18))
SM_LINE = "DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned."


def gpuwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def fleet():
    return gpu_operator.fleet_and_window()


@pytest.fixture(scope="module")
def prom(fleet, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu-operator")
    for path in gpu_operator.write(tmp, *fleet):
        backfill(path, tmp / "tsdb")
    with running(tmp, tsdb=tmp / "tsdb") as server:
        yield server.url.replace("http://", "prometheus://", 1)


@pytest.fixture(scope="module")
def ingested(prom, tmp_path_factory):
    db = tmp_path_factory.mktemp("store") / "gpuwatch.duckdb"
    done = gpuwatch("ingest", "--from", prom, "--db", str(db), "--start", START, "--end", END, "--prices", "list")
    assert done.returncode == 0, done.stderr
    return db, done


@pytest.fixture(scope="module")
def truth(fleet, tmp_path_factory):
    """False-utilization offenders of the same fleet with every signal (SM activity too): a bundle."""
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params
    from gpuwatch.fleet import command as simulate

    out = tmp_path_factory.mktemp("truth")
    simulate.write_bundle(fleet[0], out / "bundle")
    con = store.connect(str(out / "truth.duckdb"))
    store.load_bundle(con, out / "bundle")
    false = analyses.run(con, "false_utilization", **params(*WINDOW))
    con.close()
    return set(false.loc[false["offender"], "pod"])


def test_doctor_names_every_blind_spot_per_node_with_its_config(prom):
    done = gpuwatch("doctor", "--from", prom, "--at", END)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "2 GPU node(s), 16 GPU(s)" in out and "gpu-node-000, gpu-node-001 (2 node(s), 16 GPU(s))" in out
    present = next(line for line in out.splitlines() if line.strip().startswith("present:"))
    for have in ("tensor activity", "DRAM activity", "GPU memory used", "GPU health", "pods (kube_pod_info)",
                 "pod status", "GPU requests", "node info"):
        assert have in present, (have, present)
    assert ("MISSING: SM activity (DCGM_FI_PROF_SM_ACTIVE) -> not judged: false_utilization, rightsizing; "
            "less evidence: idle_hoarding") in out
    assert "MISSING: pod labels (kube_pod_labels label_*) -> less evidence: gang_stall" in out
    assert "MISSING: GPU topology" in out and "MISSING: NVLink traffic" in out
    assert "teams (a team pod label, or namespace -> team): missing -> less evidence: chargeback" in out
    assert "NOT JUDGED: false_utilization - SM activity (DCGM_FI_PROF_SM_ACTIVE) missing on all 2 GPU node(s)" in out
    # each config once: the counters lines, ONE kube-state-metrics values snippet
    assert out.count(SM_LINE) == 1 and out.count("metricLabelsAllowlist:") == 1
    assert "  - pods=[team," in out and "--metric-opt-in-list=kube_pod_nodeselectors" in out


def test_doctor_on_the_store_gives_the_same_verdicts(ingested):
    db, _ = ingested
    done = gpuwatch("doctor", "--db", str(db), "--window", "6h")
    assert done.returncode == 0, done.stderr
    assert "NOT JUDGED: false_utilization - SM activity (DCGM_FI_PROF_SM_ACTIVE) missing on all 2 GPU node(s)" in done.stdout
    assert "GPU prices: present (16 of 16)" in done.stdout and done.stdout.count(SM_LINE) == 1
    # a store keeps health events, not whether XIDs were collected: said, not guessed either way
    assert "UNVERIFIED: unhealthy_gpu - GPU health (DCGM_FI_DEV_XID_ERRORS): no rows" in done.stdout
    nothing = gpuwatch("doctor")
    assert nothing.returncode == 2 and nothing.stderr == (
        "gpuwatch doctor: --from prometheus://host:port or --db STORE: required (what to check)\n")


def test_ingest_reads_the_operator_labels_and_warns_teams_became_namespaces(ingested):
    from gpuwatch import store

    db, done = ingested
    assert "no pod has the team label 'team' on kube_pod_labels: teams are the namespaces" in done.stderr
    assert "no DCGM_FI_PROF_SM_ACTIVE series" in done.stderr
    con = store.connect(str(db), read_only=True)
    pods = {r[0] for r in con.execute("SELECT DISTINCT pod FROM samples WHERE pod IS NOT NULL").fetchall()}
    con.close()
    assert pods and gpu_operator.TARGET["pod"] not in pods  # the exporter's own pod is no workload


def test_analyze_says_not_judged_and_never_zero(ingested, truth, tmp_path):
    db, _ = ingested
    done = gpuwatch("analyze", "--db", str(db), "--window", "6h", "--format", "table", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "false utilization: 0 pods" not in out and "false $" not in out
    assert "false utilization: not judged: SM activity (DCGM_FI_PROF_SM_ACTIVE) missing on all 2 GPU node(s); " \
           "enable: dcgm-exporter counters file" in out and SM_LINE in out
    assert "placement: not judged: GPU topology" in out and "blocked demand: not judged: GPU topology" in out
    assert "est. penalty $0.00" not in out
    assert f"busy without tensor/DRAM work (GPU_UTIL high, tensor and DRAM activity near 0; weaker evidence than " \
           f"false utilization, not counted as savings): {len(truth)} of 11 pods" in out
    assert "  chargeback: partly judged - teams (a team pod label, or namespace -> team) missing" in out
    import pandas as pd

    verdict = pd.read_csv(tmp_path / "judgement.csv").set_index("finding")
    assert not verdict.loc["false_utilization", "judged"] and verdict.loc["utilization", "judged"]
    busy = pd.read_csv(tmp_path / "busy_without_work.csv")
    assert set(busy.loc[busy["suspect"], "pod"]) == truth  # the partial evidence finds the real offenders
    assert truth, "the fleet has false-utilization offenders to find"


def test_derived_metrics_say_which_findings_are_judged(ingested):
    from gpuwatch import store
    from gpuwatch.findings import exporter

    db, _ = ingested
    con = store.connect(str(db), read_only=True)
    text = exporter.render(con, window="6h")
    con.close()
    assert 'gpuwatch_finding_judged{finding="false_utilization"} 0.0' in text
    assert 'gpuwatch_finding_judged{finding="idle_hoarding"} 1.0' in text
    assert "gpuwatch_false_util_gpu_hours{" not in text  # unknown: absent, and the gauge above says why


def _page(db: Path, page: str, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GPUWATCH_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120)
    at.run()
    if page != "fleet":
        at.switch_page(f"views/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_app_pages_say_not_judged(ingested, truth, monkeypatch):
    db, _ = ingested
    fleet = _page(db, "fleet", monkeypatch)
    assert {m.label: m.value for m in fleet.metric}["False utilization"] == "not judged"
    false = _page(db, "false_utilization", monkeypatch)
    assert any("Not judged" in w.value and "DCGM_FI_PROF_SM_ACTIVE" in w.value for w in false.warning)
    assert any(SM_LINE in c.value for c in false.code)
    assert not any("the SMs are busy too" in str(getattr(e, "value", "")) for e in false.main)
    assert {m.label: m.value for m in false.metric}["Suspect pods"] == f"{len(truth)} of 11"
    ready = _page(db, "readiness", monkeypatch)
    counts = {m.label: m.value for m in ready.metric}
    assert counts["Not judged"] == "4 findings", counts
    assert any(SM_LINE in c.value for c in ready.code) and sum("metricLabelsAllowlist" in c.value for c in ready.code) == 1


def test_weekly_report_says_not_judged(ingested, tmp_path):
    db, _ = ingested
    done = gpuwatch("report", "weekly", "--db", str(db), "--week", "2026-W46", "--out", str(tmp_path),
                    "--min-coverage", "0")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "fleet.html").read_text()
    assert 'id="false-util-not-judged"' in html and SM_LINE in html
    assert 'id="blind-spots"' in html and "false_utilization: not judged" in html
    assert "Waste (idle + unallocated + stranded; false-util not judged)" in html
    assert "No falsely-utilized pods" not in html


def test_readiness_page_in_chromium(ingested):
    """The Readiness page in Debian's Chromium; a screenshot under tests/artifacts/ to look at."""
    from tests.test_app_browser import ARGS, ARTIFACTS, CHROMIUM, FINISHED, serving

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    db, _ = ingested
    ARTIFACTS.mkdir(exist_ok=True)
    with serving(db) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(f"{url}/readiness")
        page.get_by_text("Cluster-wide").first.wait_for(timeout=90_000)
        page.wait_for_function(FINISHED, timeout=60_000)
        page.get_by_text("metricLabelsAllowlist", exact=False).first.wait_for(timeout=30_000)
        text = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "app-readiness.png"), full_page=True)
        browser.close()
    assert "false_utilization is not judged: SM activity (DCGM_FI_PROF_SM_ACTIVE) missing on all 2 GPU node(s)." in text
    assert SM_LINE in text and text.count("metricLabelsAllowlist:") == 1


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A Prometheus just installed: nothing scraped yet."""
    tmp = tmp_path_factory.mktemp("fresh")
    with running(tmp) as server:
        yield server.url.replace("http://", "prometheus://", 1)


def test_fresh_prometheus_has_no_complete_step_yet(fresh, tmp_path):
    from gpuwatch import store

    db = tmp_path / "fresh.duckdb"
    once = gpuwatch("ingest", "--from", fresh, "--db", str(db))
    assert once.returncode == 1 and "loaded into" not in once.stdout
    assert f"gpuwatch ingest: --from {fresh}: no complete step yet: no GPU series in [" in once.stderr
    assert f"`gpuwatch doctor --from {fresh}` shows what Prometheus holds" in once.stderr
    resumed = gpuwatch("ingest", "--from", fresh, "--db", str(db), "--since-last")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"{db}: {fresh}: no complete step yet: no GPU series in [")
    con = store.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM ingest_log").fetchone()[0] == 0  # nothing loaded
    con.close()
    doctor = gpuwatch("doctor", "--from", fresh)
    assert doctor.returncode == 0 and "no complete step yet: no GPU series" in doctor.stdout
