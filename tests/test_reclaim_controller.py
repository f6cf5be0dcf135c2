"""The reclaim controller end to end: crash safety, leader election, metrics, and the CLI offline.

The Kubernetes API is the FAKE HTTP server of tests/support/fake_kube.py (no API server runs
here), driven by the real ``kubernetes`` client, in-process and from `gpuwatch reclaim`
subprocesses that are SIGKILLed mid-write. Checks: a controller killed between warn and act,
and again right after its act landed, never warns or acts twice once restarted; two replicas
behind one Lease never both act; the metrics endpoint serves the contract's series; and
`gpuwatch reclaim --once` plans from sample_data (real DuckDB store, no cluster), says the
cluster was not consulted, writes the audit table, and only ever picks the simulator's true
hoarders.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import duckdb
import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.cli import main
from gpuwatch.reclaim import controller, kube
from gpuwatch.reclaim.lease import Elector
from gpuwatch.reclaim.telemetry import ReclaimMetrics
from tests.conftest import ROOT
from tests.support import bundles
from tests.support.fake_kube import FakeKube, namespace, pod, workload

T0 = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)


def _cluster(server: FakeKube) -> None:
    server.add(namespace("ml"))
    server.add(workload("Deployment", "ml", "web", replicas=2))
    server.add(workload("ReplicaSet", "ml", "web-6d4f", owner=("Deployment", "web")))
    server.add(pod("ml", "web-6d4f-x", owner=("ReplicaSet", "web-6d4f")))


def _findings(tmp_path, since: datetime, as_of: datetime = T0) -> str:
    path = tmp_path / "idle_hoarding.csv"
    pd.DataFrame([{"namespace": "ml", "pod": "web-6d4f-x", "team": "ml", "idle_since": since.isoformat(),
                   "reclaimable_now": True, "gpu_count": 1.0, "usd_per_hour": 3.0,
                   "data_as_of": as_of.strftime("%Y-%m-%dT%H:%M:%SZ")}]).to_csv(path, index=False)
    return str(path)


def _controller(server, tmp_path, now: datetime) -> subprocess.Popen:
    args = [sys.executable, "-m", "gpuwatch", "reclaim", "--once", "--apply", "--findings",
            _findings(tmp_path, T0 - timedelta(minutes=20), as_of=now), "--db", str(tmp_path / "audit.duckdb"),
            "--kube-host", server.url, "--now", now.isoformat(), "--lease-namespace", "ml",
            "--interval", "10s"]  # lease = 2 x interval + 60 s = 80 s: a dead leader's lease expires
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _kill_when(server, proc, method: str, part: str) -> None:
    """SIGKILL ``proc`` once its (stalled) ``method`` request on ``part`` reached the server."""
    deadline = time.monotonic() + 60
    while not any(r.method == method and part in r.path for r in server.log):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the controller never sent the request"
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    server.release()


def _finish(proc) -> str:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return out


def _patches(server, part: str) -> int:
    return sum(1 for r in server.log if r.method == "PATCH" and part in r.path and r.status == 200)


def test_killed_between_warn_and_act_and_after_act_never_acts_twice(tmp_path):
    with FakeKube() as server:
        _cluster(server)
        server.stall_after("POST", "/events")  # the warning annotation lands, then the process dies
        _kill_when(server, _controller(server, tmp_path, T0), "POST", "/events")
        warning = server.get("Pod", "ml", "web-6d4f-x")["metadata"]["annotations"]["gpuwatch.io/reclaim-warning"]
        assert warning == "2026-11-18T10:00:00Z"

        out = _finish(_controller(server, tmp_path, T0 + timedelta(minutes=5)))  # fresh controller
        assert "acts after 2026-11-18 10:30 UTC" in out and _patches(server, "/pods/") == 1

        server.stall_after("PATCH", "/deployments/web")  # the act lands, then the process dies
        _kill_when(server, _controller(server, tmp_path, T0 + timedelta(minutes=31)), "PATCH", "/deployments/web")
        assert server.get("Deployment", "ml", "web")["spec"]["replicas"] == 0

        out = _finish(_controller(server, tmp_path, T0 + timedelta(minutes=33)))
        assert "already stopped" in out
        assert _patches(server, "/pods/") == 1 and _patches(server, "/deployments/web") == 1
        notes = server.get("Deployment", "ml", "web")["metadata"]["annotations"]
        assert notes["gpuwatch.io/reclaim-previous-replicas"] == "2"  # the original, not 0
    audit = duckdb.connect(str(tmp_path / "audit.duckdb")).execute(
        "SELECT decision, result FROM reclaim_audit ORDER BY ts").fetchall()
    assert audit == [("skipped", "skipped"), ("skipped", "skipped")]  # the killed runs wrote nothing


def test_two_replicas_behind_one_lease_never_both_act(tmp_path):
    with FakeKube() as server:
        _cluster(server)
        server.add(pod("ml", "web-6d4f-x", owner=("ReplicaSet", "web-6d4f"),
                       annotations={"gpuwatch.io/reclaim-warning": "2026-11-18T09:00:00Z"}))
        csv = _findings(tmp_path, T0 - timedelta(hours=2))
        results = {}
        for name in ("a", "b"):
            settings = controller.Settings(findings_csv=csv, apply=True, now=T0, identity=name,
                                           lease_namespace="ml")
            results[name] = controller.run_once(settings, duckdb.connect(), kube.connect(host=server.url))
        assert [r["decision"] for r in results["a"].rows] == ["acted"]
        assert results["b"].rows == [] and "not the leader" in results["b"].note
        assert _patches(server, "/deployments/web") == 1
        lease = server.get("Lease", "ml", "gpuwatch-reclaim")
        assert lease["spec"]["holderIdentity"] == "a"
        # MicroTime: the API server parses exactly six fraction digits
        assert lease["spec"]["renewTime"] == "2026-11-18T10:00:00.000001+00:00"
        # after the lease expires without renewal, the other replica takes over
        late = Elector(kube.connect(host=server.url), "ml", "gpuwatch-reclaim", "b")
        assert late.elect(T0 + timedelta(seconds=30)) is False
        assert late.elect(T0 + timedelta(seconds=61)) is True


def test_racing_for_a_new_lease_exactly_one_wins():
    with FakeKube() as server:
        barrier, wins = threading.Barrier(4), []

        def contend(identity: str) -> None:
            elector = Elector(kube.connect(host=server.url), "ml", "gpuwatch-reclaim", identity)
            barrier.wait()
            wins.append((identity, elector.elect(T0)))

        threads = [threading.Thread(target=contend, args=(f"r{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, won in wins if won]
        assert len(winners) == 1
        assert server.get("Lease", "ml", "gpuwatch-reclaim")["spec"]["holderIdentity"] == winners[0]


def test_metrics_are_served():
    metrics = ReclaimMetrics()
    server, _ = metrics.serve("127.0.0.1:0")
    try:
        metrics.observe([
            {"decision": "acted", "action": "scale_to_zero", "result": "ok", "gpu_count": 2.0},
            {"decision": "would_warn", "action": "none", "result": "dry_run", "gpu_count": 1.0},
            {"decision": "skipped", "action": "none", "result": "skipped", "gpu_count": 4.0}])
        port = server.server_address[1]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert 'gpuwatch_reclaim_actions_total{action="scale_to_zero",result="ok"} 1.0' in text
    assert 'gpuwatch_reclaim_actions_total{action="warn",result="dry_run"} 1.0' in text
    assert "gpuwatch_reclaim_reclaimable_gpus 3.0" in text


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    return bundles.sample_store(tmp_path_factory.mktemp("reclaim") / "sample.duckdb")


def test_once_offline_on_sample_data_plans_and_audits(sample_store, capsys):
    code = main(["reclaim", "--once", "--db", str(sample_store), "--no-cluster", "--assume-opted-in",
                 "--counterfactual"])
    out = capsys.readouterr().out
    assert code == 0 and "DRY-RUN" in out and "the cluster was NOT consulted" in out
    assert "Counterfactual" in out and "would have reclaimed" in out
    con = duckdb.connect(str(sample_store), read_only=True)
    rows = con.execute("SELECT decision, namespace, pod, dry_run, result FROM reclaim_audit").df()
    assert len(rows) and rows["dry_run"].all() and set(rows["result"]) <= {"dry_run", "skipped"}
    chosen = rows[rows["decision"].isin(["would_act", "would_warn"])]
    assert len(chosen), out
    truth = pd.read_csv(ROOT / "sample_data" / "truth.csv")
    behaviour = dict(zip(zip(truth["namespace"], truth["pod"], strict=True), truth["behavior"], strict=True))
    picked = {behaviour.get((r.namespace, r.pod)) for r in chosen.itertuples()}
    assert picked == {"hoarder"}, picked  # never a productive or false-util pod
    for line in (ln for ln in out.splitlines() if ln.startswith(("would_act", "would_warn"))):
        assert any(f"{r.namespace}/{r.pod}" in line for r in chosen.itertuples())


def test_opt_in_is_required_without_the_counterfactual_flag(sample_store, capsys):
    assert main(["reclaim", "--once", "--db", str(sample_store), "--no-cluster"]) == 0
    out = capsys.readouterr().out
    assert "would_act" not in out and "namespace not opted in" in out


def test_apply_without_a_cluster_does_nothing_and_says_so(sample_store, capsys):
    assert main(["reclaim", "--once", "--apply", "--db", str(sample_store), "--no-cluster"]) == 0
    out = capsys.readouterr().out
    assert "APPLY" in out and "no decisions" in out
    assert main(["reclaim", "--once", "--apply", "--assume-opted-in", "--db", str(sample_store)]) == 2


def test_replayed_dry_run_day_yields_a_counterfactual_bounded_by_idle_time(sample_store):
    from gpuwatch import analyses
    from gpuwatch.analyses import params
    from gpuwatch.reclaim import audit

    start, end = datetime(2026, 11, 10, 0, 0, tzinfo=UTC), datetime(2026, 11, 11, 0, 0, tzinfo=UTC)
    con = store.connect(str(sample_store))
    con.execute("DELETE FROM reclaim_audit")
    settings = controller.Settings(assume_opted_in=True)
    results = controller.replay(settings, con, step=timedelta(hours=1), start=start, end=end)
    assert len(results) == 25 and all(r.run_id.startswith("replay-") for r in results)
    saved = audit.counterfactual(con, start=start, end=end + timedelta(seconds=1))
    idle = analyses.run(con, "idle_hoarding", **params.params(start.replace(tzinfo=None), end.replace(tzinfo=None)))
    assert 0 < saved["usd"].sum() <= idle["idle_cost_usd"].sum()
    # nothing is saved beyond what the pod's idle time cost (USD: a MIG slice is priced by its share,
    # while gpu_count counts the slice as one device)
    idle_cost = idle.groupby(["namespace", "owner_kind", "owner_name"])["idle_cost_usd"].sum()
    for r in saved.itertuples():
        assert r.usd <= idle_cost[(r.namespace, r.owner_kind, r.owner_name)] + 1e-6, r
    truth = pd.read_csv(ROOT / "sample_data" / "truth.csv")
    hoarders = set(truth.loc[truth["behavior"] == "hoarder", "namespace"])
    assert set(saved["namespace"]) <= hoarders
    con.close()
