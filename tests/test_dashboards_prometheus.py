"""The rules and every dashboard query on a real Prometheus (Debian's), fed like a real cluster.

Prometheus loads dashboards/gpuwatch-rules.yaml and scrapes four local HTTP endpoints serving
fixed exposition text: a gpuwatch exporter (scraped with honor_labels, no target pod labels, as
the chart's ServiceMonitor does), an NVIDIA dcgm-exporter (`Hostname`, scraped with
honor_labels: false and the exporter pod's own pod/namespace/container target labels, as the GPU
Operator does — so Prometheus itself renames the workload labels to exported_*),
kube-state-metrics (kube_pod_labels) and `gpuwatch export-derived` (series built from
gpuwatch.findings.exporter.METRICS, so their labels are the real ones). Then every query of every
dashboard, with its variables bound to a gpuwatch-attributed and a dcgm-attributed pod, must be
accepted and return data, and the headline numbers must count both exporters' GPUs correctly.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import subprocess
import threading
import time
import urllib.request

import pytest

from tests.support.prometheus import Prometheus, free_port, require_prometheus
from tests.support.promql_names import ROOT, RULES

H100, A100 = 'modelName="NVIDIA H100 80GB HBM3"', 'modelName="NVIDIA A100-SXM4-80GB"'


def gpu(i: int, uuid: str, model: str, node_label: str, pod: str = "", ns: str = "", mig: str = "") -> str:
    labels = f'gpu="{i}",UUID="{uuid}",pci_bus_id="00000000:{i + 10}:00.0",device="nvidia{i}",{model}'
    labels += f",{mig}" if mig else ""
    labels += f",{node_label}"
    return labels + (f',pod="{pod}",namespace="{ns}",container="main"' if pod else "")


def series(labels: str, values: dict[str, float]) -> str:
    return "".join(f"{name}{{{labels}}} {value}\n" for name, value in values.items())


def gpuwatch_exporter() -> str:
    node = 'hostname="node-1"'
    idle = {"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_PROF_SM_ACTIVE": 0.01, "DCGM_FI_PROF_SM_OCCUPANCY": 0.0,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0, "DCGM_FI_PROF_DRAM_ACTIVE": 0.0, "DCGM_FI_DEV_FB_USED": 30000,
            "DCGM_FI_DEV_POWER_USAGE": 70, "DCGM_FI_DEV_GPU_TEMP": 35, "DCGM_FI_PROF_NVLINK_TX_BYTES": 0,
            "DCGM_FI_PROF_NVLINK_RX_BYTES": 0, "DCGM_FI_DEV_XID_ERRORS": 0}
    busy = idle | {"DCGM_FI_DEV_GPU_UTIL": 95, "DCGM_FI_PROF_SM_ACTIVE": 0.7, "DCGM_FI_DEV_XID_ERRORS": 13}
    mig = 'GPU_I_PROFILE="1g.10gb",GPU_I_ID="9"'
    text = series(gpu(0, "GPU-a", H100, node, "nb-1", "team-a"), idle)
    text += series(gpu(1, "GPU-b", H100, node, "train-1", "team-a"), busy)
    text += series(gpu(2, "GPU-c", H100, node), {"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_GPU_TEMP": 30})
    text += series(gpu(3, "GPU-d", H100, node, "mig-nb", "team-c", mig),
                   {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.01, "DCGM_FI_DEV_FB_USED": 500, "DCGM_FI_DEV_GPU_TEMP": 33})
    text += ('gpuwatch_gpu_allocation_info{gpu="0",UUID="GPU-a",device="nvidia0",' + H100 + ',hostname="node-1",'
             'pod="nb-1",namespace="team-a",container="main",resource="nvidia.com/gpu",vgpu=""} 1\n')
    text += ('gpuwatch_mig_instance_info{gpu="3",UUID="GPU-d",device="nvidia3",' + H100 + ',hostname="node-1",'
             + mig + ',mig_uuid="MIG-1",profile_id="19",placement_start="0",placement_size="1"} 1\n')
    text += 'gpuwatch_source_up{source="nvml"} 1\ngpuwatch_source_up{source="kubelet"} 1\n'
    text += 'gpuwatch_source_duration_seconds{source="nvml"} 0.004\ngpuwatch_gpus 4\n'
    text += 'gpuwatch_gpu_lost{UUID="GPU-z",hostname="node-1"} 1\ngpuwatch_attribution_error_info{reason="timeout"} 1\n'
    text += 'gpuwatch_gpu_up{gpu="0",UUID="GPU-a",device="nvidia0",' + H100 + ',hostname="node-1"} 1\n'
    text += 'gpuwatch_node_free_gpus{hostname="node-1",resource="nvidia.com/gpu"} 2\n'
    text += "".join(f'gpuwatch_node_free_nvlink_block{{hostname="node-1",k="{k}"}} {int(k <= 2)}\n' for k in (1, 2, 4, 8))
    text += "".join(f'gpuwatch_gpu_link_info{{gpu="{a}",UUID="GPU-{"abcd"[a]}",peer_gpu="{b}",peer_UUID="GPU-{"abcd"[b]}",'
                    f'link="NV18",nvlinks="18",hostname="node-1"}} 1\n' for a in range(4) for b in range(4) if a != b)
    return text + 'gpuwatch_build_info{version="0.1.0"} 1\n'


def dcgm_exporter() -> str:
    node = 'Hostname="node-2"'
    idle = {"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_PROF_SM_ACTIVE": 0, "DCGM_FI_PROF_SM_OCCUPANCY": 0,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0, "DCGM_FI_PROF_DRAM_ACTIVE": 0, "DCGM_FI_DEV_FB_USED": 12000,
            "DCGM_FI_DEV_POWER_USAGE": 60, "DCGM_FI_DEV_GPU_TEMP": 31, "DCGM_FI_PROF_NVLINK_TX_BYTES": 0,
            "DCGM_FI_PROF_NVLINK_RX_BYTES": 0}
    text = series(gpu(0, "GPU-20", A100, node, "nb-2", "team-b"), idle)
    return text + series(gpu(1, "GPU-21", A100, node), {"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_GPU_TEMP": 30})


def kube_state_metrics() -> str:
    return ('kube_pod_labels{namespace="team-b",pod="nb-2",uid="u-2",label_team="vision"} 1\n'
            'kube_pod_labels{namespace="team-a",pod="nb-1",uid="u-1"} 1\n'
            'kube_pod_labels{namespace="team-c",pod="mig-nb",uid="u-3",label_team="research"} 1\n')


def derived_findings() -> str:
    from gpuwatch.findings import exporter as derived

    values = {"namespace": "team-a", "pod": "nb-1", "team": "team-a", "kind": "idle", "hostname": "node-1",
              "UUID": "GPU-d", "analysis": "idle_hoarding", "gang": "j", "cause": "gpu_memory",
              "recommended_profile": "1g.20gb", "finding": "false_utilization", "step": "idle"}
    lines = []
    for name, (_, _, labels) in derived.METRICS.items():
        lines.append(name + "{" + ",".join(f'{k}="{values[k]}"' for k in labels) + "} 2\n")
    return "".join(lines)


@contextlib.contextmanager
def serving(pages: dict[str, str]):
    """One local HTTP server per page; yields name -> host:port."""
    servers = {}
    for name, text in pages.items():
        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self, body=body):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    try:
        yield {name: f"127.0.0.1:{s.server_address[1]}" for name, s in servers.items()}
    finally:
        for server in servers.values():
            server.shutdown()


def scrape_configs(targets: dict[str, str]) -> list[dict]:
    job = lambda name, target, honor, labels=None: {  # noqa: E731
        "job_name": name, "honor_labels": honor, "static_configs": [{"targets": [target], "labels": labels or {}}]}
    return [job("gpuwatch-exporter", targets["gpuwatch"], True, {"node": "node-1"}),
            job("nvidia-dcgm-exporter", targets["dcgm"], False,
                {"pod": "nvidia-dcgm-exporter-x1", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"}),
            job("kube-state-metrics", targets["ksm"], True), job("gpuwatch-derived", targets["derived"], True)]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    pytest.importorskip("gpuwatch.findings.exporter")
    prom, _ = require_prometheus()
    tmp = tmp_path_factory.mktemp("prom")
    pages = {"gpuwatch": gpuwatch_exporter(), "dcgm": dcgm_exporter(), "ksm": kube_state_metrics(),
             "derived": derived_findings()}
    with serving(pages) as targets:
        config = tmp / "prometheus.yml"
        config.write_text(json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "rule_files": [str(RULES)], "scrape_configs": scrape_configs(targets)}))
        port, log = free_port(), tmp / "prometheus.log"
        with log.open("w") as out:
            process = subprocess.Popen([prom, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                        f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)
        server = Prometheus(url=f"http://127.0.0.1:{port}", process=process, log=log)
        try:
            wait_ready(server)
            server.wait_for("count(up == 1) == 4", timeout=45)  # every target scraped, even on a loaded machine
            server.wait_for("count(pod:gpuwatch_gpu_idle:bool5m == 1) == 3", timeout=45)
            yield server
        finally:
            process.terminate()
            process.wait(timeout=10)


def wait_ready(server: Prometheus, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.process.poll() is None, server.log.read_text()[-2000:]
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.url}/-/ready", timeout=2):
            return
        time.sleep(0.2)
    raise AssertionError(f"prometheus not ready: {server.log.read_text()[-2000:]}")


BINDINGS = {"gpuwatch pod": {"namespace": "team-a", "pod": "nb-1", "node": ".*"},
            "dcgm pod": {"namespace": "team-b", "pod": "nb-2", "node": ".*"}}


def dashboard_queries() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            out += [(path.name, panel["title"], t["expr"]) for t in panel["targets"]]
    return out


def bind(expr: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$([a-z_]\w*)", lambda m: variables[m.group(1)], expr)


def test_every_panel_query_is_valid_and_returns_data(prometheus):
    empty = []
    for board, title, expr in dashboard_queries():
        results = [prometheus.query(bind(expr, binding)) for binding in BINDINGS.values()]
        if not any(results):
            empty.append(f"{board}: {title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_pod_detail_works_for_a_dcgm_exporter_pod(prometheus):
    for _, title, expr in dashboard_queries():
        if "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" in expr or "gpu_reported_utilization:ratio{namespace" in expr:
            assert prometheus.query(bind(expr, BINDINGS["dcgm pod"])), title


def value(prometheus, promql: str) -> float:
    (sample,) = prometheus.query(promql)
    return float(sample["value"][1])


def test_fleet_counts_both_exporters_and_not_the_exporter_pod(prometheus):
    reported = "gpuwatch:gpu_reported_utilization:ratio"
    devices = f"count(max by (hostname, UUID, GPU_I_ID) ({reported}))"
    assert value(prometheus, devices) == 6  # 4 behind gpuwatch (one a MIG instance) + 2 behind dcgm-exporter
    allocated = {(s["metric"]["namespace"], s["metric"]["pod"]) for s in prometheus.query(f'{reported}{{pod!=""}}')}
    assert allocated == {("team-a", "nb-1"), ("team-a", "train-1"), ("team-c", "mig-nb"), ("team-b", "nb-2")}
    hosts = {s["metric"].get("hostname") for s in prometheus.query(reported)}
    assert hosts == {"node-1", "node-2"}  # dcgm-exporter's Hostname normalised


def test_idle_by_team_uses_the_pod_label_then_the_namespace(prometheus):
    board = json.loads((ROOT / "dashboards" / "gpuwatch-idle-by-team.json").read_text())
    expr = next(t["expr"] for p in board["panels"] if p["title"] == "Idle allocated GPUs by team (now)"
                for t in p["targets"])
    teams = {s["metric"]["team"]: float(s["value"][1]) for s in prometheus.query(expr)}
    assert teams == {"team-a": 1.0, "vision": 1.0, "research": 1.0}
