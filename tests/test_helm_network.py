"""NetworkPolicies and the optional oauth2-proxy, rendered by Helm's engine (helm-python-sdk) and
validated strictly with kubernetes-validate.

Checks: one NetworkPolicy per enabled component, on by default and off with
networkPolicy.enabled=false; the exporter, export-derived and reclaim accept only Prometheus, on
their metrics port; the analyzer and report accept nothing; the app accepts nothing by default
(port-forward), or what networkPolicy.appFrom lists; egress: analyzer -> Prometheus + DNS, reclaim
-> API server + DNS, export-derived and the app -> nothing, report -> its webhook only when set.
oauth2-proxy is off by default; on, it is a sidecar the ClusterIP Service points at, the app listens
on 127.0.0.1, the client secrets come from a Secret, and it is refused without one.
"""

from __future__ import annotations

import re

import pytest

from tests.support.helm_chart import all_on_values, container, find, helm, pod_spec, render

PROMETHEUS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
OPENCOST = [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "opencost"}}}]
PROXY = {"app": {"oauth2Proxy": {"enabled": True, "existingSecret": "gpuwatch-oauth",
                                 "args": ["--provider=oidc", "--oidc-issuer-url=https://login.example.com"]}}}


def policies(docs) -> dict[str, dict]:
    return {d.component: d.obj["spec"] for d in docs if d.kind == "NetworkPolicy"}


def ports(rule: dict) -> set[int]:
    return {p["port"] for p in rule.get("ports", [])}


@pytest.mark.parametrize("values", [{}, None, PROXY, {"reclaim": {"enabled": True, "rbac": {"namespaces": ["ml"]}}}])
def test_every_object_validates_against_current_kubernetes(values):
    kv = pytest.importorskip("kubernetes_validate")
    version = kv.utils.latest_version()
    for doc in render(all_on_values() if values is None else values):
        if doc.obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kv.validate(doc.obj, version, strict=True)


def test_a_policy_for_every_component_by_default_and_none_when_off():
    docs = render({"reclaim": {"enabled": True}})
    deployed = {d.component for d in docs if d.kind in ("Deployment", "DaemonSet", "CronJob")}
    assert set(policies(docs)) == deployed == {"exporter", "analyzer", "app", "report", "derived", "reclaim"}
    for component, spec in policies(docs).items():
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
    assert policies(render({"networkPolicy": {"enabled": False}})) == {}


def test_scrape_targets_accept_only_prometheus_on_their_metrics_port():
    spec = policies(render({"reclaim": {"enabled": True}}))
    for component, port in (("exporter", 9400), ("derived", 9401), ("reclaim", 9402)):
        rule, *others = spec[component]["ingress"]
        assert rule["from"] == [PROMETHEUS] and ports(rule) == {port}, component
        # the exporter also admits OpenCost's collector (networkPolicy.exporterFrom), on that port only
        assert [(o["from"], ports(o)) for o in others] == ([(OPENCOST, {port})] if component == "exporter" else [])
    for component in ("analyzer", "report", "app"):
        assert spec[component]["ingress"] == [] and "Ingress" in spec[component]["policyTypes"], component


def test_egress_goes_only_where_each_component_must():
    spec = policies(render({"reclaim": {"enabled": True}}))
    assert "Egress" not in spec["exporter"]["policyTypes"]  # --dcgm-host may reach a node hostengine
    assert spec["derived"]["egress"] == [] and spec["app"]["egress"] == [] and spec["report"]["egress"] == []
    dns, prom = spec["analyzer"]["egress"]
    assert ports(dns) == {53} and prom["to"] == [PROMETHEUS] and ports(prom) == {9090}
    dns, api = spec["reclaim"]["egress"]
    assert ports(dns) == {53} and ports(api) == {443, 6443} and api["to"] == [{"ipBlock": {"cidr": "0.0.0.0/0"}}]
    webhook = policies(render({"report": {"webhook": {"enabled": True, "existingSecret": "w"}}}))["report"]
    assert [ports(r) for r in webhook["egress"]] == [{53}, {443}]


def test_app_ingress_follows_app_from():
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    [rule] = policies(render({"networkPolicy": {"appFrom": [peer]}}))["app"]["ingress"]
    assert rule["from"] == [peer] and ports(rule) == {8501}


def test_oauth2_proxy_is_off_by_default():
    spec = pod_spec(find(render(), "Deployment", "app"))
    assert [c["name"] for c in spec["containers"]] == ["app"]


def test_oauth2_proxy_fronts_the_app():
    docs = render(PROXY)
    spec = pod_spec(find(docs, "Deployment", "app"))
    app, proxy = container(spec, "app"), container(spec, "oauth2-proxy")
    assert app["args"][app["args"].index("--address") + 1] == "127.0.0.1" and "ports" not in app
    assert "--upstream=http://127.0.0.1:8501" in proxy["args"] and "--provider=oidc" in proxy["args"]
    assert proxy["image"].startswith("quay.io/oauth2-proxy/oauth2-proxy:")
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in proxy["env"]} == {"gpuwatch-oauth"}
    assert proxy["securityContext"]["readOnlyRootFilesystem"] is True
    assert app["readinessProbe"]["httpGet"]["port"] == 4180
    service = find(docs, "Service", "app")
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["ports"][0]["targetPort"] == "http"
    assert {p["name"]: p["containerPort"] for p in proxy["ports"]} == {"http": 4180}
    [rule] = policies(docs)["app"]["ingress"]
    assert "from" not in rule and ports(rule) == {4180}
    custom = container(pod_spec(find(render({"app": {"oauth2Proxy": {**PROXY["app"]["oauth2Proxy"],
                                                                      "upstream": "http://127.0.0.1:9000"}}}),
                                      "Deployment", "app")), "oauth2-proxy")
    assert "--upstream=http://127.0.0.1:9000" in custom["args"]


def test_oauth2_proxy_without_a_secret_is_refused_naming_the_key():
    with pytest.raises(helm().HelmValuesError, match=re.escape("/app/oauth2Proxy/existingSecret")):
        render({"app": {"oauth2Proxy": {"enabled": True}}})


def test_a_team_view_from_values_or_from_the_proxys_groups():
    """app.teams pins the app to teams; teamsFromGroups lets oauth2-proxy's X-Forwarded-Groups decide per user,
    which the chart allows only behind the proxy (the app on 127.0.0.1, so nothing else can set the header)."""
    app = container(pod_spec(find(render({"app": {"teams": ["nlp", "vision"]}}), "Deployment", "app")), "app")
    assert app["args"][-2:] == ["--team=nlp", "--team=vision"]
    spec = pod_spec(find(render({"app": {"oauth2Proxy": {**PROXY["app"]["oauth2Proxy"], "teamsFromGroups": True}}}),
                         "Deployment", "app"))
    app, proxy = container(spec, "app"), container(spec, "oauth2-proxy")
    assert "--teams-header=X-Forwarded-Groups" in app["args"]
    assert app["args"][app["args"].index("--address") + 1] == "127.0.0.1"
    assert "--pass-user-headers=true" in proxy["args"]
    with pytest.raises(helm().HelmRenderError, match=re.escape("teamsFromGroups needs app.oauth2Proxy.enabled")):
        render({"app": {"oauth2Proxy": {"teamsFromGroups": True}}})
    with pytest.raises(helm().HelmValuesError, match="/app/teams"):
        render({"app": {"teams": ["a,b"]}})
