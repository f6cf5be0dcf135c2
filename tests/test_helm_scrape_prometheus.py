"""The chart's scrape conventions on a REAL Prometheus (Debian's), read by both consumers' queries.

For each ``exporter.scrapeConvention`` (``dcgm-exporter``, the default, and ``gpuwatch``) the chart is
rendered (Helm's Go engine) and its ServiceMonitor and PodMonitor endpoints are turned into Prometheus
scrape jobs the way the Prometheus Operator does: the target's own labels first (``namespace``,
``pod``, ``container`` of the exporter pod, ``service``, ``endpoint``), then the endpoint's
``honorLabels``, ``relabelings`` and ``metricRelabelings``. The __meta_kubernetes_* labels a real
Kubernetes service discovery would give the target are set on a static target: the Kubernetes API is
what cannot run here. The target serves what ``gpuwatch export --source simulate --simulate-kubelet``
serves for the whole fleet (time-sliced, MIG, idle GPUs) in the default profile (``render_at``).

Then: OpenCost's pod-grouped queries (tests/fixtures/peer_queries/opencost.yaml) must name exactly
the workload pods the exporter attributed, never the exporter pod, in both conventions; a
dcgm-exporter user's ``exported_pod`` query must find them in the default convention (the chart
scrapes as dcgm-exporter's does) and nothing in ``gpuwatch`` (the documented switch).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import subprocess
import threading

import pytest

from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import render_at
from gpuwatch.fleet import DEFAULT_START, build_fleet
from tests.support.helm_chart import all_on_values, find, render
from tests.support.prometheus import Prometheus, _wait_ready, free_port, require_prometheus
from tests.test_peer_queries import MINUTE_SUBQUERY, opencost_queries

pytestmark = pytest.mark.slow
T = DEFAULT_START + 2.5 * 86400 + 1234.0
NODE, EXPORTER_POD = "gpu-node-004", "gpuwatch-exporter-7xk2p"
# what Kubernetes service discovery gives the exporter's target, and what the Operator makes of it
META = {"__meta_kubernetes_namespace": "gpuwatch", "__meta_kubernetes_pod_name": EXPORTER_POD,
        "__meta_kubernetes_pod_container_name": "exporter", "__meta_kubernetes_pod_node_name": NODE,
        "__meta_kubernetes_service_name": "gpuwatch-exporter"}
OPERATOR = [{"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"target_label": "endpoint", "replacement": "metrics"}]
KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label", "separator": "separator",
        "regex": "regex", "replacement": "replacement", "action": "action", "modulus": "modulus"}
CONVENTIONS = ("dcgm-exporter", "gpuwatch")
GROUPED_BY_POD = [q for q in opencost_queries() if re.search(r"by \([^)]*\bpod\b", q.expr)
                  and not MINUTE_SUBQUERY.search(q.expr)]


def _relabel(rules: list[dict]) -> list[dict]:
    """A monitoring.coreos.com RelabelConfig list as Prometheus's relabel_configs."""
    return [{KEYS[k]: v.lower() if k == "action" else v for k, v in rule.items()} for rule in rules]


def _jobs(target: str) -> list[dict]:
    """One scrape job per (convention, monitor kind), from the rendered chart."""
    jobs = []
    for convention in CONVENTIONS:
        values = all_on_values()
        values["exporter"]["scrapeConvention"] = convention
        if convention == "dcgm-exporter":
            values["exporter"].pop("scrapeConvention")  # the chart's default
        docs = render(values)
        for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
            endpoint = find(docs, kind, "exporter")["spec"][key][0]
            jobs.append({"job_name": f"{convention}-{kind}", "honor_labels": endpoint["honorLabels"],
                         "scrape_interval": "1s", "metrics_path": endpoint["path"],
                         "static_configs": [{"targets": [target], "labels": META | {"monitor": f"{convention}-{kind}"}}],
                         "relabel_configs": OPERATOR + _relabel(endpoint.get("relabelings", [])),
                         "metric_relabel_configs": _relabel(endpoint.get("metricRelabelings", []))})
    return jobs


@pytest.fixture(scope="module")
def exposition() -> str:
    return render_at(build_fleet(gpus=40, seed=0), T, options=compat.options(compat.DEFAULT))  # every node


@pytest.fixture(scope="module")
def prom(exposition, tmp_path_factory):
    body = exposition.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    jobs = _jobs(f"127.0.0.1:{server.server_address[1]}")
    binary, _ = require_prometheus()
    tmp = tmp_path_factory.mktemp("prom")
    (tmp / "prometheus.yml").write_text(json.dumps({"scrape_configs": jobs}))
    port, log = free_port(), tmp / "prometheus.log"
    with log.open("w") as out:
        process = subprocess.Popen([binary, f"--config.file={tmp / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                   stdout=out, stderr=subprocess.STDOUT)
    p = Prometheus(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        _wait_ready(p)
        p.wait_for(f"count(up == 1) == {len(jobs)}", timeout=60)
        p.wait_for(f"count(count_over_time(up[1m]) >= 3) == {len(jobs)}", timeout=60)
        yield p
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        server.shutdown()


def _pods_serving(exposition: str, names: set[str]) -> set[tuple[str, str]]:
    """(namespace, pod) on the exporter's series of ``names`` (what it attributed)."""
    out = set()
    for line in exposition.splitlines():
        name = line.split("{", 1)[0]
        if name in names and 'pod="' in line:
            out.add((re.search(r'namespace="([^"]*)"', line)[1], re.search(r'pod="([^"]*)"', line)[1]))
    return out


def _jobs_of(convention: str) -> list[str]:  # the `monitor` label each scrape config's target carries
    return [f"{convention}-{kind}" for kind in ("ServiceMonitor", "PodMonitor")]


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("query", GROUPED_BY_POD, ids=[q.id for q in GROUPED_BY_POD])
def test_opencost_finds_the_workload_pods_in_both_conventions(prom, exposition, convention, query):
    names = {n for n in re.findall(r"\b(DCGM_\w+)", query.expr)}
    want = _pods_serving(exposition, names)
    if not want:
        pytest.skip(f"gpuwatch serves none of {sorted(names)}")
    for job in _jobs_of(convention):
        expr = re.sub(r"(DCGM_\w+)\{", rf'\1{{monitor="{job}",', query.expr)
        result = prom.query(expr)
        got = {(r["metric"].get("namespace"), r["metric"].get("pod")) for r in result}
        assert got == want, f"{job}: {expr}"


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_exported_pod_consoles_see_the_workload_in_the_default_convention(prom, exposition, convention):
    want = _pods_serving(exposition, {"DCGM_FI_DEV_GPU_UTIL"})
    assert want
    for job in _jobs_of(convention):
        result = prom.query(f'count by (exported_namespace, exported_pod) (DCGM_FI_DEV_GPU_UTIL{{monitor="{job}"}})')
        got = {(r["metric"].get("exported_namespace"), r["metric"].get("exported_pod")) for r in result}
        got.discard((None, None))
        assert got == (want if convention == "dcgm-exporter" else set()), job


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_an_unallocated_gpu_never_carries_the_exporter_pod(prom, convention):
    for job in _jobs_of(convention):
        assert prom.query(f'DCGM_FI_DEV_GPU_TEMP{{monitor="{job}",pod="{EXPORTER_POD}"}}') == [], job
        assert prom.query(f'DCGM_FI_DEV_GPU_TEMP{{monitor="{job}",pod=""}}'), f"{job}: no unattributed GPU"
        up = prom.query(f'up{{monitor="{job}"}}')[0]["metric"]
        assert up["exporter_pod"] == EXPORTER_POD  # the target's own pod, under its own name
        assert up.get("pod") == (EXPORTER_POD if convention == "dcgm-exporter" else None)


def test_the_chart_defaults_to_dcgm_exporters_convention():
    endpoint = find(render(), "ServiceMonitor", "exporter")["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is False
