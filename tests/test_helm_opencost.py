"""OpenCost's collector finds the exporter of a rendered chart, under each discovery rule it has
shipped, and finds nothing else gpuwatch deploys.

OpenCost's collector mode scrapes dcgm-exporter itself. It has found it three ways; each is
re-stated below (written by us from the Go source, file and commit cited) and applied to what Helm's
engine renders (helm-python-sdk), with each workload's pod template standing for its running pods:

- ``service_label_rule``: modules/collector-source/pkg/collector/dcgmtargetprovider.go at
  b8b740b9a1c861ab79e517bef333ac72332b1503 (opencost/opencost#3110, April 2025): Services listed in
  every namespace with the label selector ``app.kubernetes.io/component=dcgm-exporter`` (metadata
  labels, exact value); scraped at the ClusterIP on the port named ``metrics``, else 9400.
- ``service_selector_rule``: modules/collector-source/pkg/scrape/dcgm.go at
  d993046957ab96f5914909d2c11bc5e295be4b72: Services with a ClusterIP whose *selector* has ``app``,
  ``app.kubernetes.io/name`` or ``app.kubernetes.io/component`` matching ``(?i)(.*dcgm-exporter.*)``;
  scraped at the ClusterIP, port 9400 always.
- ``pod_label_rule`` (current): modules/collector-source/pkg/scrape/dcgm.go at
  05d8f8eafb815df5a6706cae574f60c66c9adb6e (per-pod scrape since opencost/opencost#3344, September
  2025): running pods whose *labels* match the same keys and pattern; scraped at the pod IP, port
  9400 always.

"Exactly the exporter" means: one Service (the service rules) or only the exporter's pods (the pod
rule), reaching the exporter container's metrics port, and no app, analyzer, report, reclaim or
export-derived object matching. A ``nameOverride`` that would make every gpuwatch pod match is
refused at render time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.support.helm_chart import all_on_values, container, find, helm, pod_spec, render

# Go's regexp.MatchString finds a match anywhere in the value, as re.search does
DCGM_PATTERN = re.compile(r"(?i)(.*dcgm-exporter.*)")
DCGM_KEYS = ("app", "app.kubernetes.io/name", "app.kubernetes.io/component")
SCRAPE_PORT = 9400  # the port both newer rules use, whatever the Service or pod declares
WORKLOADS = ("DaemonSet", "Deployment", "StatefulSet", "Job", "CronJob")
VALUE_SETS = {"default": {}, "all-on": None, "release prod": {}}


@dataclass(frozen=True)
class Pod:
    """A running pod as a workload's template makes it (what OpenCost's cluster cache holds)."""
    workload: str
    component: str
    labels: dict
    spec: dict

    def container_port(self, port: int | str) -> int | None:
        """The container port a Service targetPort (number or name) reaches on this pod."""
        for c in self.spec["containers"]:
            for p in c.get("ports", []):
                if port in (p["containerPort"], p.get("name")):
                    return p["containerPort"]
        return None


def is_dcgm(labels: dict | None) -> bool:
    """isDCGM in scrape/dcgm.go: any of the three keys present with a value the pattern matches."""
    return any(key in (labels or {}) and DCGM_PATTERN.search(labels[key]) for key in DCGM_KEYS)


def service_label_rule(services: list[dict]) -> list[tuple[dict, int]]:
    found = []
    for svc in services:
        if svc["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "dcgm-exporter":
            continue
        port = SCRAPE_PORT
        for p in svc["spec"].get("ports", []):
            if p.get("name") == "metrics":
                port = p["port"]
        found.append((svc, port))
    return found


def service_selector_rule(services: list[dict]) -> list[tuple[dict, int]]:
    # ClusterIP is "" only for ExternalName Services; a rendered Service gets one allocated
    return [(svc, SCRAPE_PORT) for svc in services
            if svc["spec"].get("type") != "ExternalName" and is_dcgm(svc["spec"].get("selector"))]


def pod_label_rule(pods: list[Pod]) -> list[tuple[Pod, int]]:
    return [(pod, SCRAPE_PORT) for pod in pods if is_dcgm(pod.labels)]


def rendered(values: dict | None, name: str = "gpuwatch") -> tuple[list, list[dict], list[Pod]]:
    docs = render(all_on_values() if values is None else values, name=name)
    services = [d.obj for d in docs if d.kind == "Service"]
    pods = [Pod(d.name, d.component, pod_template(d.obj)["metadata"].get("labels", {}), pod_spec(d.obj))
            for d in docs if d.kind in WORKLOADS]
    return docs, services, pods


def pod_template(obj: dict) -> dict:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]
    return obj["spec"]["template"]


def selected(svc: dict, pods: list[Pod]) -> list[Pod]:
    selector = svc["spec"].get("selector") or {}
    return [p for p in pods if selector and selector.items() <= p.labels.items()]


def reaches_the_exporter(svc: dict, port: int, pods: list[Pod]) -> bool:
    """The Service port OpenCost scrapes leads to the exporter container's metrics port, and only
    exporter pods are behind it."""
    behind = selected(svc, pods)
    service_port = next((p for p in svc["spec"]["ports"] if p["port"] == port), None)
    if not behind or service_port is None or {p.component for p in behind} != {"exporter"}:
        return False
    metrics = container(behind[0].spec, "exporter")["ports"][0]
    return behind[0].container_port(service_port["targetPort"]) == metrics["containerPort"]


@pytest.mark.parametrize("value_set", VALUE_SETS)
@pytest.mark.parametrize("rule", [service_label_rule, service_selector_rule], ids=["previous: Service labels",
                                                                                    "previous: Service selector"])
def test_each_service_rule_finds_exactly_the_exporters_discovery_service(value_set, rule):
    docs, services, pods = rendered(VALUE_SETS[value_set], name="prod" if value_set == "release prod" else "gpuwatch")
    found = rule(services)
    assert [svc["metadata"]["name"] for svc, _ in found] == [
        find(docs, "Service", "exporter")["metadata"]["name"] + "-dcgm"], [s["metadata"]["name"] for s in services]
    svc, port = found[0]
    assert reaches_the_exporter(svc, port, pods), (svc["spec"], port)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_the_current_pod_rule_finds_only_the_exporter_pods_on_their_metrics_port(value_set):
    _, _, pods = rendered(VALUE_SETS[value_set], name="prod" if value_set == "release prod" else "gpuwatch")
    found = pod_label_rule(pods)
    assert [(pod.workload, pod.component) for pod, _ in found] == [
        (p.workload, "exporter") for p in pods if p.component == "exporter"] != []
    for pod, port in found:
        assert pod.container_port(port) == port  # the exporter listens where OpenCost knocks


def test_prometheus_scrapes_the_exporter_once():
    docs, services, _ = rendered({})
    monitor = find(docs, "ServiceMonitor", "exporter")["spec"]["selector"]["matchLabels"]
    scraped = [s["metadata"]["name"] for s in services if monitor.items() <= s["metadata"]["labels"].items()]
    assert scraped == [find(docs, "Service", "exporter")["metadata"]["name"]]


def test_discovery_off_is_found_by_no_rule():
    _, services, pods = rendered({"exporter": {"service": {"dcgmExporterDiscovery": False}}})
    assert service_label_rule(services) == service_selector_rule(services) == pod_label_rule(pods) == []


@pytest.mark.parametrize("name", ["dcgm-exporter", "nvidia-DCGM-Exporter-gw"])
def test_a_name_override_every_pod_would_be_found_by_is_refused(name):
    # before: nameOverride dcgm-exporter put app.kubernetes.io/name=dcgm-exporter on every pod
    # and Service selector, so the newer rules scraped the app, analyzer and export-derived too
    with pytest.raises(helm().HelmRenderError, match=re.escape(f"nameOverride={name} would label every gpuwatch pod")):
        render({"nameOverride": name})
    _, services, pods = rendered({"nameOverride": "gpu-costs"})
    assert len(service_selector_rule(services)) == 1
    assert {pod.component for pod, _ in pod_label_rule(pods)} == {"exporter"}


@pytest.mark.parametrize("key", DCGM_KEYS)
def test_common_labels_may_not_set_the_keys_discovery_reads(key):
    with pytest.raises(helm().HelmRenderError, match=re.escape(f"commonLabels.{key}: gpuwatch sets {key}")):
        render({"commonLabels": {key: "dcgm-exporter"}})


def test_the_exporters_network_policy_admits_opencost_where_it_scrapes():
    docs, _, _ = rendered({})
    policy = next(d.obj["spec"] for d in docs if d.kind == "NetworkPolicy" and d.component == "exporter")
    opencost = {"app.kubernetes.io/name": "opencost", "app.kubernetes.io/instance": "opencost"}
    admitted = [rule for rule in policy["ingress"] if SCRAPE_PORT in {p["port"] for p in rule["ports"]}
                and any(peer.get("namespaceSelector") == {}
                        and peer["podSelector"]["matchLabels"].items() <= opencost.items() for peer in rule["from"])]
    assert admitted, policy["ingress"]
    closed = render({"networkPolicy": {"exporterFrom": []}})
    spec = next(d.obj["spec"] for d in closed if d.kind == "NetworkPolicy" and d.component == "exporter")
    assert len(spec["ingress"]) == 1  # Prometheus only


def test_notes_warn_when_the_exporter_is_not_where_opencost_knocks():
    from tests.support.helm_chart import render_raw

    assert "OpenCost" not in render_raw({})["gpuwatch/templates/NOTES.txt"]
    notes = render_raw({"exporter": {"port": 9500}})["gpuwatch/templates/NOTES.txt"]
    assert "OpenCost's collector scrapes dcgm-exporter pods at port 9400: with exporter.port=9500" in notes
