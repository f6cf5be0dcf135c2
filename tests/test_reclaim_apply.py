"""apply() against a FAKE Kubernetes API server (tests/support/fake_kube.py), through the REAL client.

No Kubernetes API server runs here, so the boundary is a real HTTP server on 127.0.0.1 serving
real JSON objects; the controller talks to it with the real ``kubernetes`` Python client. Checks
the exact requests (method, path, body) per owner kind, warnings and clearing, the dry-run
guarantee (zero write requests), 409 re-read-and-retry, 5xx backoff, an unreachable API,
PodDisruptionBudget refusals (429, recorded and not retried), the re-check before acting, and
`gpuwatch reclaim restore`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import duckdb
import pandas as pd
import pytest

from gpuwatch.cli import main
from gpuwatch.reclaim import controller, kube
from gpuwatch.reclaim.apply import apply
from gpuwatch.reclaim.plan import plan
from gpuwatch.reclaim.policy import CustomKind, Policy
from gpuwatch.reclaim.state import snapshot
from tests.support.fake_kube import FakeKube, namespace, pod, workload

NOW = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)  # a Wednesday
STAMP = "2026-11-18T10:00:00Z"
WARNED = {"gpuwatch.io/reclaim-warning": "2026-11-18T09:00:00Z"}  # an hour ago: expired
MERGE = "application/merge-patch+json"


@pytest.fixture
def kube_server():
    with FakeKube() as server:
        server.add(namespace("ml"))
        server.add(namespace("other", opted_in=False))
        yield server


def findings(tmp_path, *rows, idle_minutes=120, as_of=STAMP):
    since = (NOW - timedelta(minutes=idle_minutes)).replace(tzinfo=None).isoformat()
    frame = pd.DataFrame([{"namespace": ns, "pod": name, "team": "ml-team", "idle_since": since,
                           "reclaimable_now": True, "gpu_count": 1.0, "usd_per_hour": 3.0,
                           "data_as_of": as_of}
                          for ns, name in rows])
    path = tmp_path / "idle_hoarding.csv"
    frame.to_csv(path, index=False)
    return str(path)


def reconcile(server, csv, *, apply_=True, policy=None, now=NOW, sleep=None):
    policy = policy or Policy()
    settings = controller.Settings(policy=policy, findings_csv=csv, apply=apply_, now=now,
                                   leader_elect=False)
    cluster = kube.connect(host=server.url, sleep=sleep or (lambda s: None))
    cluster.custom.update({k: (c.group, c.version, c.plural) for k, c in policy.custom_kinds.items()})
    return controller.run_once(settings, duckdb.connect(), cluster)


def writes(server, *, events=False):
    return [(r.method, r.path, r.body) for r in server.writes() if events or not r.path.endswith("/events")]


def test_deployment_is_scaled_to_zero_in_one_conditional_patch(kube_server, tmp_path):
    kube_server.add(workload("Deployment", "ml", "web", replicas=2))
    kube_server.add(workload("ReplicaSet", "ml", "web-6d4f", owner=("Deployment", "web")))
    kube_server.add(pod("ml", "web-6d4f-x", owner=("ReplicaSet", "web-6d4f"), annotations=WARNED))
    version = kube_server.get("Deployment", "ml", "web")["metadata"]["resourceVersion"]
    result = reconcile(kube_server, findings(tmp_path, ("ml", "web-6d4f-x")))
    assert writes(kube_server) == [("PATCH", "/apis/apps/v1/namespaces/ml/deployments/web", {
        "metadata": {"resourceVersion": version, "annotations": {
            "gpuwatch.io/reclaimed-at": STAMP, "gpuwatch.io/reclaim-previous-replicas": "2"}},
        "spec": {"replicas": 0}})]
    assert [r.content_type for r in kube_server.writes() if r.method == "PATCH"] == [MERGE]
    events = [r.body["involvedObject"]["kind"] for r in kube_server.writes() if r.path.endswith("/events")]
    assert events == ["Pod", "Deployment"]
    assert [(r["decision"], r["action"], r["result"]) for r in result.rows] == [("acted", "scale_to_zero", "ok")]
    assert kube_server.get("Deployment", "ml", "web")["spec"]["replicas"] == 0


@pytest.mark.parametrize(("objects", "pod_owner", "expected"), [
    ([workload("StatefulSet", "ml", "db", replicas=3)], ("StatefulSet", "db"),
     ("PATCH", "/apis/apps/v1/namespaces/ml/statefulsets/db", {"spec": {"replicas": 0}},
      {"gpuwatch.io/reclaim-previous-replicas": "3"})),
    ([workload("Notebook", "ml", "alice"), workload("StatefulSet", "ml", "alice", owner=("Notebook", "alice"))],
     ("StatefulSet", "alice"),
     ("PATCH", "/apis/kubeflow.org/v1/namespaces/ml/notebooks/alice", {},
      {"kubeflow-resource-stopped": STAMP})),
    ([workload("Job", "ml", "train")], ("Job", "train"),
     ("PATCH", "/apis/batch/v1/namespaces/ml/jobs/train", {"spec": {"suspend": True}}, {})),
])
def test_each_owner_kind_gets_its_own_action(kube_server, tmp_path, objects, pod_owner, expected):
    for obj in objects:
        kube_server.add(obj)
    kube_server.add(pod("ml", "p-0", owner=pod_owner, annotations=WARNED))
    method, path, spec, notes = expected
    reconcile(kube_server, findings(tmp_path, ("ml", "p-0")))
    [(got_method, got_path, body)] = writes(kube_server)
    assert (got_method, got_path) == (method, path)
    assert {k: v for k, v in body.items() if k != "metadata"} == spec
    assert body["metadata"]["annotations"] == {"gpuwatch.io/reclaimed-at": STAMP, **notes}
    assert body["metadata"]["resourceVersion"]


def test_bare_pod_is_evicted_through_the_eviction_api(kube_server, tmp_path):
    kube_server.add(pod("ml", "bare", annotations=WARNED))
    result = reconcile(kube_server, findings(tmp_path, ("ml", "bare")))
    assert writes(kube_server) == [("POST", "/api/v1/namespaces/ml/pods/bare/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "bare", "namespace": "ml"}})]
    assert result.rows[0]["action"] == "evict_pod" and kube_server.get("Pod", "ml", "bare") is None


def test_pdb_refusal_is_recorded_once_not_retried(kube_server, tmp_path):
    kube_server.add(pod("ml", "bare", annotations=WARNED, labels={"app": "svc"}))
    kube_server.add({"kind": "PodDisruptionBudget", "metadata": {"name": "svc", "namespace": "ml"},
                     "spec": {"selector": {"matchLabels": {"app": "svc"}}}, "status": {"disruptionsAllowed": 0}})
    result = reconcile(kube_server, findings(tmp_path, ("ml", "bare")))
    evictions = [r for r in kube_server.log if r.path.endswith("/eviction")]
    assert [r.status for r in evictions] == [429]
    [row] = result.rows
    assert (row["decision"], row["result"]) == ("skipped", "error")
    assert "PodDisruptionBudget" in row["detail"] and kube_server.get("Pod", "ml", "bare") is not None


def test_ray_cluster_is_skipped_unless_configured(kube_server, tmp_path):
    kube_server.add(workload("RayCluster", "ml", "ray", spec={"suspend": False}))
    kube_server.add(pod("ml", "ray-head", owner=("RayCluster", "ray"), annotations=WARNED))
    csv = findings(tmp_path, ("ml", "ray-head"))
    result = reconcile(kube_server, csv)
    assert writes(kube_server) == [] and "owner kind RayCluster" in result.rows[0]["reason"]
    ray = CustomKind(group="ray.io", version="v1", plural="rayclusters", patch={"spec": {"suspend": True}},
                     restore_patch={"spec": {"suspend": False}})
    policy = replace(Policy(), owner_kinds=(*Policy().owner_kinds, "RayCluster"), custom_kinds={"RayCluster": ray})
    reconcile(kube_server, csv, policy=policy)
    [(method, path, body)] = writes(kube_server)
    assert (method, path, body["spec"]) == ("PATCH", "/apis/ray.io/v1/namespaces/ml/rayclusters/ray", {"suspend": True})


def test_warning_annotation_events_and_webhook(kube_server, tmp_path):
    kube_server.add(workload("Job", "ml", "train"))
    kube_server.add(pod("ml", "train-0", owner=("Job", "train")))
    sent = []
    settings = controller.Settings(findings_csv=findings(tmp_path, ("ml", "train-0"), idle_minutes=20),
                                   apply=True, now=NOW, leader_elect=False,
                                   notify=lambda team, text: sent.append((team, text)))
    result = controller.run_once(settings, duckdb.connect(), kube.connect(host=kube_server.url))
    [(method, path, body)] = writes(kube_server)
    assert (method, path) == ("PATCH", "/api/v1/namespaces/ml/pods/train-0")
    assert body["metadata"]["annotations"] == {"gpuwatch.io/reclaim-warning": STAMP}
    assert body["metadata"]["resourceVersion"]  # conditional: a concurrent change gets a 409
    events = [r.body for r in kube_server.writes() if r.path == "/api/v1/namespaces/ml/events"]
    assert [(e["involvedObject"]["kind"], e["reason"], e["type"]) for e in events] == [
        ("Pod", "GPUIdleWarning", "Warning"), ("Job", "GPUIdleWarning", "Warning")]
    assert result.rows[0]["decision"] == "warned" and sent and sent[0][0] == "ml-team"
    assert kube_server.get("Job", "ml", "train")["spec"]["suspend"] is False


def test_activity_after_the_warning_clears_it(kube_server, tmp_path):
    kube_server.add(workload("Job", "ml", "train"))
    kube_server.add(pod("ml", "train-0", owner=("Job", "train"), annotations=WARNED))
    csv = tmp_path / "busy.csv"
    pd.DataFrame([{"namespace": "ml", "pod": "train-0", "team": "t", "idle_since": None,
                   "reclaimable_now": False, "gpu_count": 1.0, "usd_per_hour": 3.0,
                   "data_as_of": STAMP}]).to_csv(csv, index=False)
    result = reconcile(kube_server, str(csv))
    [(method, path, body)] = writes(kube_server)
    assert (method, path) == ("PATCH", "/api/v1/namespaces/ml/pods/train-0")
    assert body["metadata"]["annotations"] == {"gpuwatch.io/reclaim-warning": None}
    assert result.rows[0]["decision"] == "cleared"
    assert "gpuwatch.io/reclaim-warning" not in kube_server.get("Pod", "ml", "train-0")["metadata"]["annotations"]


def test_dry_run_makes_zero_write_requests(kube_server, tmp_path):
    kube_server.add(workload("Deployment", "ml", "web"))
    kube_server.add(pod("ml", "web-0", owner=("Deployment", "web"), annotations=WARNED))
    kube_server.add(workload("Job", "ml", "train"))
    kube_server.add(pod("ml", "train-0", owner=("Job", "train")))
    kube_server.add(pod("ml", "bare", annotations=WARNED))
    kube_server.add(pod("other", "theirs"))
    csv = findings(tmp_path, ("ml", "web-0"), ("ml", "train-0"), ("ml", "bare"), ("other", "theirs"))
    result = reconcile(kube_server, csv, apply_=False)
    assert kube_server.writes() == []
    decisions = sorted((r["pod"], r["decision"], r["result"]) for r in result.rows)
    assert decisions == [("bare", "would_act", "dry_run"), ("theirs", "skipped", "skipped"),
                         ("train-0", "would_act", "dry_run"), ("web-0", "would_act", "dry_run")]


def test_conflict_rereads_and_retries(kube_server, tmp_path):
    kube_server.add(workload("Deployment", "ml", "web", replicas=1))
    kube_server.add(pod("ml", "web-0", owner=("Deployment", "web"), annotations=WARNED))
    kube_server.fail("PATCH", "/deployments/web", 409)
    result = reconcile(kube_server, findings(tmp_path, ("ml", "web-0")))
    patches = [(r.status, r.path) for r in kube_server.log if r.method == "PATCH"]
    path = "/apis/apps/v1/namespaces/ml/deployments/web"
    assert patches == [(409, path), (200, path)]
    reads = [r for r in kube_server.log if r.method == "GET" and r.path.endswith("/deployments/web")]
    assert len(reads) >= 2  # re-read after the conflict
    assert result.rows[0]["result"] == "ok"


def test_server_errors_are_backed_off_then_succeed(kube_server, tmp_path):
    kube_server.add(workload("Job", "ml", "train"))
    kube_server.add(pod("ml", "train-0", owner=("Job", "train"), annotations=WARNED))
    kube_server.fail("GET", "/namespaces/ml/pods", 503, times=2)
    slept = []
    result = reconcile(kube_server, findings(tmp_path, ("ml", "train-0")), sleep=slept.append)
    assert slept == [0.5, 1.0]  # exponential backoff, then the third try succeeds
    assert result.rows[0]["decision"] == "acted"


def test_unreachable_api_means_no_actions_and_the_loop_continues(tmp_path, caplog):
    csv = findings(tmp_path, ("ml", "web-0"))
    settings = controller.Settings(findings_csv=csv, apply=True, now=NOW, leader_elect=False)
    cluster = kube.connect(host="http://127.0.0.1:9", sleep=lambda s: None)  # nothing listens
    result = controller.run_once(settings, duckdb.connect(), cluster)
    assert result.rows == [] and "unreachable" in result.note
    assert "Kubernetes API unreachable" in caplog.text
    passes = []
    controller.loop(settings, duckdb.connect(), lambda: passes.append(1) or cluster,
                    interval_seconds=1, sleep=lambda s: None, passes=3)
    assert len(passes) == 3


def test_recheck_skips_a_pod_exempted_after_the_plan(kube_server, tmp_path):
    kube_server.add(workload("Job", "ml", "train"))
    kube_server.add(pod("ml", "train-0", owner=("Job", "train"), annotations=WARNED))
    cluster = kube.connect(host=kube_server.url)
    rows = pd.read_csv(findings(tmp_path, ("ml", "train-0")))
    actions = plan(rows, snapshot(cluster, ["ml"]), Policy(), NOW, data_as_of=NOW)
    assert [a.decision for a in actions] == ["act"]
    cluster.patch("Pod", "ml", "train-0", {"metadata": {"annotations": {"gpuwatch.io/reclaim": "never"}}})
    before = len(kube_server.writes())
    [row] = apply(actions, cluster, dry_run=False, now=NOW, run_id="t", policy=Policy())
    assert (row["decision"], row["detail"]) == ("skipped", "re-check: pod train-0 is now exempt")
    assert len(kube_server.writes()) == before


@pytest.mark.parametrize(("kind", "obj", "check"), [
    ("Deployment", workload("Deployment", "ml", "web", replicas=0, annotations={
        "gpuwatch.io/reclaimed-at": STAMP, "gpuwatch.io/reclaim-previous-replicas": "3"}),
     lambda o: o["spec"]["replicas"] == 3),
    ("Job", workload("Job", "ml", "web", spec={"suspend": True}, annotations={"gpuwatch.io/reclaimed-at": STAMP}),
     lambda o: o["spec"]["suspend"] is False),
    ("Notebook", workload("Notebook", "ml", "web", annotations={
        "gpuwatch.io/reclaimed-at": STAMP, "kubeflow-resource-stopped": STAMP}),
     lambda o: "kubeflow-resource-stopped" not in o["metadata"]["annotations"]),
])
def test_restore_undoes_each_kind(kube_server, kind, obj, check, capsys, tmp_path):
    kube_server.add(obj)
    db = str(tmp_path / "audit.duckdb")
    assert main(["reclaim", "restore", f"ml/{kind}/web", "--kube-host", kube_server.url, "--db", db]) == 0
    restored = kube_server.get(kind, "ml", "web")
    assert check(restored) and "gpuwatch.io/reclaimed-at" not in restored["metadata"]["annotations"]
    assert "restored" in capsys.readouterr().out
    decisions = duckdb.connect(db).execute("SELECT decision, owner_kind FROM reclaim_audit").fetchall()
    assert decisions == [("restored", kind)]


def test_restore_refuses_what_gpuwatch_did_not_stop(kube_server, capsys):
    kube_server.add(workload("Job", "ml", "manual", spec={"suspend": True}))
    assert main(["reclaim", "restore", "ml/Job/manual", "--kube-host", kube_server.url]) == 1
    assert "was not reclaimed by gpuwatch" in capsys.readouterr().err
    assert kube_server.writes() == []


def test_a_deployment_with_two_idle_replicas_is_stopped_once(kube_server, tmp_path):
    kube_server.add(workload("Deployment", "ml", "web", replicas=2))
    kube_server.add(workload("ReplicaSet", "ml", "web-6d4f", owner=("Deployment", "web")))
    for name in ("web-6d4f-a", "web-6d4f-b"):
        kube_server.add(pod("ml", name, owner=("ReplicaSet", "web-6d4f"), annotations=WARNED))
    result = reconcile(kube_server, findings(tmp_path, ("ml", "web-6d4f-a"), ("ml", "web-6d4f-b")))
    [row] = result.rows
    assert (row["decision"], row["gpu_count"], row["detail"]) == ("acted", 2.0, "stopped; pods: web-6d4f-a,web-6d4f-b")
    assert [m for m, p, _ in writes(kube_server)] == ["PATCH"]
    events = [r.body["involvedObject"]["name"] for r in kube_server.writes() if r.path.endswith("/events")]
    assert events == ["web-6d4f-a", "web-6d4f-b", "web"]


def test_webhook_posts_slack_json_and_a_dead_webhook_is_harmless():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from gpuwatch.reclaim.notify import webhook_notifier

    received = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append((self.headers["Content-Type"], json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.handle_request, daemon=True).start()
    notify = webhook_notifier({"ml-team": f"http://127.0.0.1:{server.server_address[1]}/hook",
                               "*": "http://127.0.0.1:9/dead"})
    notify("ml-team", "GPU idle")
    notify("other-team", "GPU idle")  # falls back to "*", which is down: logged, not raised
    server.server_close()
    assert received == [("application/json", {"text": "GPU idle"})]


def test_audit_table_has_exactly_the_contract_columns(tmp_path):
    from gpuwatch import store
    from gpuwatch.reclaim import audit

    bare = duckdb.connect(str(tmp_path / "bare.duckdb"))
    audit.ensure_table(bare)
    described = [r[0] for r in bare.execute("DESCRIBE reclaim_audit").fetchall()]
    assert tuple(described) == audit.COLUMNS
    stored = [r[0] for r in store.connect(None).execute("DESCRIBE reclaim_audit").fetchall()]
    assert tuple(stored) == audit.COLUMNS
