"""``gpuwatch export-derived``: the analyses' findings as Prometheus metrics (gpuwatch.findings.exporter).

On a small real DuckDB store (a simulated bundle with MIG, hoarders and false-util jobs) the
served series must carry exactly the analysis frames' pods, teams and values; a store that is
broken (not DuckDB, or missing its tables) must yield ``gpuwatch_derived_up 0`` in a successful
scrape; results are cached for the TTL (clock injected); a real Prometheus scrapes the server.
"""

from __future__ import annotations

import urllib.request
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params, window
from gpuwatch.findings import exporter as derived
from gpuwatch.fleet import build_fleet
from gpuwatch.fleet import command as simulate
from tests.support.prometheus import running

WINDOW = timedelta(days=1)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("derived")
    simulate.write_bundle(build_fleet(gpus=24, seed=2, days=1), tmp / "bundle")
    con = store.connect(str(tmp / "gw.duckdb"))
    store.load_bundle(con, tmp / "bundle")
    con.close()
    return tmp / "gw.duckdb"


def _series(text: str) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _frames(db) -> dict:
    con = store.connect(str(db), read_only=True)
    try:
        p = params(*window(store.data_range(con)[1], length=WINDOW))
        return {name: analyses.run(con, name, **p) for name in derived.ANALYSES}
    finally:
        con.close()


def test_findings_match_the_analysis_frames(db):
    con = store.connect(str(db), read_only=True)
    served = _series(derived.render(con, window=WINDOW))
    con.close()
    frames = _frames(db)
    idle, false, mig = frames["idle_hoarding"], frames["false_utilization"], frames["mig_fragmentation"]
    busy_idle = idle[idle.idle_gpu_hours > 0]
    assert len(busy_idle) > 0 and len(false[false.false_util_gpu_hours > 0]) > 0
    assert served["gpuwatch_idle_gpu_hours"] == {
        (("namespace", r.namespace), ("pod", r.pod), ("team", r.team or "")): pytest.approx(r.idle_gpu_hours)
        for r in busy_idle.itertuples()}
    assert served["gpuwatch_false_util_gpu_hours"] == {
        (("namespace", r.namespace), ("pod", r.pod), ("team", r.team or "")): pytest.approx(r.false_util_gpu_hours)
        for r in false[false.false_util_gpu_hours > 0].itertuples()}
    stranded = mig[mig.stranded_slices > 0]
    assert len(stranded) > 0, "the fleet has MIG layouts that strand slices"
    assert served["gpuwatch_mig_stranded_slices"] == {
        (("UUID", r.gpu_uuid), ("hostname", r.node)): r.stranded_slices for r in stranded.itertuples()}
    charge = frames["chargeback"]  # waste is the report's cents: chargeback's parts
    want = {(("kind", kind), ("namespace", r.namespace), ("team", r.team)): getattr(r, f"{kind}_usd")
            for r in charge[charge.kind == "team"].itertuples() for kind in ("idle", "false_util")
            if getattr(r, f"{kind}_usd") > 0}
    want |= {(("kind", r.kind), ("namespace", ""), ("team", "")): r.cost_usd
             for r in charge[charge.kind.isin(["unallocated", "stranded"])].itertuples()}
    assert served["gpuwatch_waste_usd"] == pytest.approx(want)
    assert {k[0][1] for k in want} == {"idle", "false_util", "unallocated", "stranded"}
    reclaimable = idle[idle.reclaimable_now.fillna(False).astype(bool)].gpu_count.sum()
    assert served["gpuwatch_reclaimable_gpus"] == {(): pytest.approx(reclaimable)}
    assert served["gpuwatch_derived_up"] == {(): 1.0}
    assert served["gpuwatch_derived_window_seconds"] == {(): 86400.0}


def test_a_file_that_is_not_a_store_reads_derived_up_0(tmp_path):
    bogus = tmp_path / "bogus.duckdb"
    bogus.write_text("not a database")
    collector = derived.DerivedCollector(lambda: store.connect(str(bogus), read_only=True), window="7d")
    served = _series(_scrape(collector))
    assert served["gpuwatch_derived_up"] == {(): 0.0}
    assert set(served["gpuwatch_derived_analysis_up"].values()) == {0.0}
    assert "gpuwatch_idle_gpu_hours" not in served


def test_a_broken_analysis_reads_0_and_the_others_still_serve(db, tmp_path):
    broken = tmp_path / "broken.duckdb"
    broken.write_bytes(db.read_bytes())
    con = store.connect(str(broken))
    con.execute("DROP TABLE stg_devices CASCADE")  # a half-migrated store: mig_fragmentation needs it
    served = _series(derived.render(con, window=WINDOW))
    con.close()
    up = {dict(k)["analysis"]: v for k, v in served["gpuwatch_derived_analysis_up"].items()}
    assert served["gpuwatch_derived_up"] == {(): 0.0} and 0.0 in up.values()
    assert up["mig_fragmentation"] == 0.0


def test_results_are_cached_for_the_ttl(db):
    opened, now = [], [0.0]

    def connect():
        opened.append(1)
        return store.connect(str(db), read_only=True)

    collector = derived.DerivedCollector(connect, window=WINDOW, ttl=60.0, clock=lambda: now[0])
    first = collector.values()
    now[0] = 59.0
    assert collector.values() is first and len(opened) == 1
    now[0] = 60.0
    collector.values()
    assert len(opened) == 2


@pytest.mark.slow
def test_a_real_prometheus_scrapes_the_findings(db, tmp_path):
    collector = derived.DerivedCollector(lambda: store.connect(str(db), read_only=True), window=WINDOW)
    server = derived.serve(collector, "127.0.0.1:0")
    try:
        port = server.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
            assert reply.status == 200
        with running(tmp_path, targets=[f"127.0.0.1:{port}"], interval="1s") as prom:
            [up] = prom.wait_for("gpuwatch_derived_up")
            assert up["value"][1] == "1"
            assert prom.wait_for("gpuwatch_idle_gpu_hours > 0")
    finally:
        server.stop()


def _scrape(collector) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


@pytest.mark.slow
def test_the_command_serves_metrics(db):
    """``gpuwatch export-derived --db DB --listen HOST:PORT`` as a real process."""
    import subprocess
    import sys
    import time

    from tests.support.prometheus import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "gpuwatch", "export-derived", "--db", str(db), "--listen", f"127.0.0.1:{port}",
           "--window", "1d"]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline, text = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "gpuwatch_derived_up" not in text:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
                    text = reply.read().decode()
            except OSError:
                assert process.poll() is None, process.stderr.read().decode()
                time.sleep(0.3)
        served = _series(text)
        assert served["gpuwatch_derived_up"] == {(): 1.0}
        assert served["gpuwatch_derived_window_seconds"] == {(): 86400.0}
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize(("flags", "message"), [
    (["--ttl", "-5"], "--ttl: -5.0 is not a number of seconds >= 0"),
    (["--ttl", "nan"], "--ttl: nan is not"),
    (["--window", "1x"], "--window: '1x' is not a duration"),
    (["--listen", ":99999"], "--listen: ':99999'"),
])
def test_bad_flags_are_one_line_usage_errors_before_the_store_is_opened(tmp_path, capsys, flags, message):
    from gpuwatch import cli

    missing = tmp_path / "never-created.duckdb"
    assert cli.main(["export-derived", "--db", str(missing), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not missing.exists()


def test_gang_stalls_and_mig_mismatches_are_served_from_their_frames():
    """The failure findings that need a live alert (a stalled gang, a profile too small) come from the
    analyses' own frames, on the hand-built bundles of tests/test_failure_findings_b.py."""
    from tests import test_failure_findings_b as failing

    stalls = failing.load(**failing.stall_bundle(), prices=failing.PRICES)
    mismatches = failing.load(**failing.mismatch_bundle(), prices=failing.PRICES)
    frames = {"gang_stall": analyses.run(stalls, "gang_stall", **failing.WINDOW),
              "mig_mismatch": analyses.run(mismatches, "mig_mismatch", **failing.WINDOW)}
    served = derived.findings(frames)
    stall, mismatch = frames["gang_stall"], frames["mig_mismatch"]
    held = stall[stall.kind == "partial_allocation"]
    assert len(held) > 0 and len(mismatch) > 0
    want = held.groupby(["namespace", "job"])["idle_gpu_hours"].sum()
    assert dict(served["gpuwatch_gang_stall_idle_gpu_hours"]) == pytest.approx(
        {(ns, job): v for (ns, job), v in want.items()})
    runs = dict(served["gpuwatch_mig_mismatch_failed_runs"])
    assert runs[("ml", "retry-b", "retry-job", "ml", "gpu_memory", "1g.20gb")] == 3.0
    assert runs[("ml", "host-oom", "", "ml", "host_memory", "")] == 2.0
    assert len(runs) == len(mismatch)
