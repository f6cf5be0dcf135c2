"""The chart's reclaim controller, run as the chart runs it, against RBAC rendered by the chart.

The FAKE Kubernetes API server (tests/support/fake_kube.py) enforces the rendered ClusterRole and
Roles (403 otherwise); the controller runs with the exact command line of the rendered Deployment
(only the in-cluster config, the /data paths and the clock are swapped for the test's), through
the real ``kubernetes`` client. Checks: with ``reclaim.apply`` the warn pass and the act pass
stop every kind of owner and the verbs granted are exactly the verbs used (no */scale, no watch,
no events patch); with ``apply=false`` the chart grants get/list only and a dry run uses exactly
those and writes nothing; ``reclaim.rbac.namespaces`` scopes writes to the listed namespaces (an
opted-in namespace outside them is skipped, not failed); and a 3-day-old findings file makes the
chart's controller change nothing (issue 12, defect 2).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
import yaml

from gpuwatch.cli import main
from tests.support.fake_kube import FakeKube, Rbac, access, namespace, pod, workload
from tests.support.helm_chart import container, pod_spec, render

NOW = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)  # a Wednesday
POLICY = {"max_actions_per_team_per_hour": 10, "namespaces": ["ml", "other"]}
PODS = {  # pod -> owner of the pod (the owner objects are created in cluster())
    "web-6d4f-x": ("ReplicaSet", "web-6d4f"), "db-0": ("StatefulSet", "db"), "train-0": ("Job", "train"),
    "nb-0": ("StatefulSet", "nb"), "bare": None, "ray-head": ("RayCluster", "ray"),
}


def values(**reclaim) -> dict:
    return {"reclaim": {"enabled": True, "policy": POLICY, **reclaim}}


def rbac_of(docs) -> Rbac:
    rbac = Rbac()
    for doc in docs:
        if doc.component != "reclaim":
            continue
        if doc.kind == "ClusterRole":
            rbac.cluster += doc.obj["rules"]
        elif doc.kind == "Role":
            rbac.namespaced.setdefault(doc.obj["metadata"]["namespace"], []).extend(doc.obj["rules"])
    return rbac


def granted(rbac: Rbac) -> set[tuple[str, str, str]]:
    rules = rbac.cluster + [r for rules in rbac.namespaced.values() for r in rules]
    return {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}


def used(server: FakeKube) -> set[tuple[str, str, str]]:
    return {(a.group, a.resource, a.verb) for a in map(access, server.log)}


def cluster(server: FakeKube, ns: str = "ml", *, warned: str | None = None) -> None:
    server.add(namespace(ns))
    notes = {"gpuwatch.io/reclaim-warning": warned} if warned else {}
    for kind, name, owner in (("Deployment", "web", None), ("ReplicaSet", "web-6d4f", ("Deployment", "web")),
                              ("StatefulSet", "db", None), ("Job", "train", None),
                              ("Notebook", "nb", None), ("StatefulSet", "nb", ("Notebook", "nb")),
                              ("RayCluster", "ray", None)):
        server.add(workload(kind, ns, name, owner=owner))
    for name, owner in PODS.items():
        server.add(pod(ns, name, owner=owner, annotations=notes))


def findings(tmp_path, *, as_of: datetime, namespaces=("ml",)) -> str:
    rows = [{"namespace": ns, "pod": name, "team": "ml", "idle_since": (NOW - timedelta(hours=3)).isoformat(),
             "reclaimable_now": True, "gpu_count": 1.0, "usd_per_hour": 3.0,
             "data_as_of": as_of.strftime("%Y-%m-%dT%H:%M:%SZ")} for ns in namespaces for name in PODS]
    path = tmp_path / "idle_hoarding.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def chart_args(docs, server: FakeKube, tmp_path, *, csv: str, now: datetime) -> list[str]:
    """The rendered controller command line, pointed at the fake server and the test's files."""
    args = container(pod_spec(next(d.obj for d in docs if d.kind == "Deployment" and d.component == "reclaim")),
                     "reclaim")["args"]
    policy = next((d.obj for d in docs if d.kind == "ConfigMap" and d.component == "reclaim"), None)
    if policy:
        (tmp_path / "policy.yaml").write_text(policy["data"]["policy.yaml"])
    swap = {"--in-cluster": ["--kube-host", server.url], "/data/analysis/idle_hoarding.csv": [csv],
            "/data/reclaim.duckdb": [str(tmp_path / "reclaim.duckdb")],
            "/etc/gpuwatch/policy.yaml": [str(tmp_path / "policy.yaml")]}
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--metrics-listen":
            skip = True  # no port is bound in the test
        else:
            out += swap.get(arg, [arg])
    return [*out, "--once", "--now", now.isoformat()]


@pytest.fixture(scope="module")
def apply_docs():
    return render(values(apply=True))


def test_apply_grants_exactly_the_verbs_the_controller_uses(apply_docs, tmp_path):
    rbac = rbac_of(apply_docs)
    with FakeKube(rbac=rbac) as server:
        cluster(server)
        csv = findings(tmp_path, as_of=NOW)
        assert main(chart_args(apply_docs, server, tmp_path, csv=csv, now=NOW)) == 0  # warns
        later = NOW + timedelta(minutes=31)
        csv = findings(tmp_path, as_of=later)
        assert main(chart_args(apply_docs, server, tmp_path, csv=csv, now=later)) == 0  # acts
        denied = [(r.method, r.path) for r in server.log if r.status == 403]
        assert denied == []
        assert server.get("Deployment", "ml", "web")["spec"]["replicas"] == 0
        assert server.get("StatefulSet", "ml", "db")["spec"]["replicas"] == 0
        assert server.get("Job", "ml", "train")["spec"]["suspend"] is True
        assert "kubeflow-resource-stopped" in server.get("Notebook", "ml", "nb")["metadata"]["annotations"]
        assert server.get("Pod", "ml", "bare") is None  # evicted
        assert used(server) == granted(rbac)
    verbs = granted(rbac)
    assert not [g for g in verbs if g[1].endswith("/scale") or g[2] in ("watch", "delete", "*")]
    assert ("", "events", "patch") not in verbs


def test_dry_run_grants_and_uses_get_and_list_only(tmp_path):
    docs = render(values())
    rbac = rbac_of(docs)
    assert {verb for _, _, verb in granted(rbac)} == {"get", "list"}
    assert not [d for d in docs if d.kind in ("Lease",) or d.name.endswith("-lease")]
    with FakeKube(rbac=rbac) as server:
        cluster(server, warned="2026-11-18T08:00:00Z")
        assert main(chart_args(docs, server, tmp_path, csv=findings(tmp_path, as_of=NOW), now=NOW)) == 0
        assert server.writes() == [] and [r for r in server.log if r.status == 403] == []
        assert used(server) == granted(rbac)


def test_scoped_rbac_writes_only_in_the_listed_namespaces(tmp_path):
    docs = render(values(apply=True, rbac={"namespaces": ["ml"]}))
    rbac = rbac_of(docs)
    assert rbac.cluster == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]
    assert set(rbac.namespaced) == {"ml", "gpuwatch"}  # the listed namespace, and the Lease's
    with FakeKube(rbac=rbac) as server:
        cluster(server, "ml", warned="2026-11-18T08:00:00Z")
        cluster(server, "other", warned="2026-11-18T08:00:00Z")
        csv = findings(tmp_path, as_of=NOW, namespaces=("ml", "other"))
        assert main(chart_args(docs, server, tmp_path, csv=csv, now=NOW)) == 0
        assert server.get("Deployment", "ml", "web")["spec"]["replicas"] == 0
        assert server.get("Deployment", "other", "web")["spec"]["replicas"] == 1
        assert {access(r).namespace for r in server.log if r.status == 403} == {"other"}
        assert {access(r).namespace for r in server.writes()} <= {"ml", "gpuwatch"}


def test_the_charts_controller_changes_nothing_on_a_three_day_old_findings_file(apply_docs, tmp_path):
    with FakeKube(rbac=rbac_of(apply_docs)) as server:
        cluster(server, warned="2026-11-15T06:00:00Z")
        csv = findings(tmp_path, as_of=NOW - timedelta(days=3))
        assert main(chart_args(apply_docs, server, tmp_path, csv=csv, now=NOW)) == 0
        assert [r for r in server.writes() if "/leases" not in r.path] == []
        assert server.get("Deployment", "ml", "web")["spec"]["replicas"] == 1


def test_policy_from_values_keeps_its_times_and_keys():
    docs = render(values(policy={**POLICY, "business_hours": {"timezone": "UTC", "start": "08:00", "end": "18:00"}}))
    text = next(d.obj for d in docs if d.kind == "ConfigMap" and d.component == "reclaim")["data"]["policy.yaml"]
    from gpuwatch.reclaim import policy

    rules = policy.parse(policy.read_yaml(text), source="values reclaim.policy")
    assert rules.business_hours.end.hour == 18 and yaml.safe_load(text)["max_actions_per_team_per_hour"] == 10
