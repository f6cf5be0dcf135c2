"""Faults never fail the scrape, and /healthz says why.

Real HTTP server (gpuwatch.exporter.server on 127.0.0.1) and a REAL kubelet pod-resources gRPC
server on a unix socket (gpuwatch.sources.kubelet_simulated, with its delay/fail options). The GPU
side is the fake pynvml (tests/fakes/fake_pynvml.py, a fake at the NVML boundary) driving the real
nvml source, or a source object that raises. Covers: a source failing for one GPU, a GPU lost
mid-run, a dead source, zero GPUs, the kubelet socket deleted, hanging and erroring.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request

import pytest

from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.server import serve
from gpuwatch.sources import SourceOptions, kubelet, kubelet_simulated, nvml
from tests.conftest import FIXTURES
from tests.fakes.fake_pynvml import FakeNvml

H100 = json.loads((FIXTURES / "nvml" / "h100.json").read_text())
UUID0 = H100["gpus"][0]["uuid"]


def two_gpus() -> dict:
    scenario = copy.deepcopy(H100)
    second = copy.deepcopy(scenario["gpus"][0]) | {"uuid": "GPU-11111111-0000-0000-0000-000000000001",
                                                   "pci_bus_id": "00000000:0A:00.0", "xid_events": []}
    scenario["gpus"].append(second)
    return scenario


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now

    def tick(self, seconds=5.0):
        self.now += seconds


@pytest.fixture
def exporter(tmp_path):
    """(fake nvml, clock, kubelet handle, base url); kubelet serves one pod on GPU 0."""
    fake, clock = FakeNvml(two_gpus()), Clock()
    pods = [{"name": "train-0", "namespace": "ml", "containers": [
        {"name": "main", "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [UUID0]}]}]}]
    sock = str(tmp_path / "kubelet.sock")
    fake_kubelet = kubelet_simulated.serve(sock, pods=pods)
    client = kubelet.Client(sock)
    source = nvml.open_source(SourceOptions(node="node-a"), nvml=fake)
    collector = ExporterCollector(source, clock=clock, interval_s=1.0,
                                  allocations=lambda: client.list_allocations(timeout=0.5))
    server = serve(collector, "127.0.0.1:0")
    yield fake, clock, fake_kubelet, f"http://127.0.0.1:{server.port}"
    server.stop()
    client.close()
    fake_kubelet.stop()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " ")]


def test_healthy_with_pod_labels(exporter):
    _, _, _, url = exporter
    code, body = get(url + "/metrics")
    assert code == 200
    util = series(body, "DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 2 and sum('pod="train-0"' in x for x in util) == 1
    assert 'gpuwatch_source_up{source="kubelet"} 1' in body and 'gpuwatch_source_up{source="nvml"} 1' in body
    code, health = get(url + "/healthz")
    assert code == 200 and health.startswith("ok: 2 GPUs")


def test_one_gpu_failing_keeps_the_other(exporter):
    fake, clock, _, url = exporter
    get(url + "/metrics")
    fake.scenario["gpus"][1]["error"] = True
    clock.tick()
    code, body = get(url + "/metrics")
    assert code == 200
    assert len(series(body, "DCGM_FI_DEV_GPU_UTIL")) == 1 and UUID0 in series(body, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert 'gpuwatch_source_up{source="nvml"} 1' in body
    code, health = get(url + "/healthz")
    assert code == 200 and "GPU 1" in health and "Unknown Error" in health


def test_gpu_lost_mid_run(exporter):
    fake, clock, _, url = exporter
    get(url + "/metrics")
    fake.scenario["gpus"][1]["lost"] = True
    clock.tick()
    code, body = get(url + "/metrics")
    lost = series(body, "gpuwatch_gpu_lost")
    assert code == 200 and lost == [f'gpuwatch_gpu_lost{{UUID="{fake.scenario["gpus"][1]["uuid"]}",hostname="node-a"}} 1']
    assert len(series(body, "DCGM_FI_DEV_GPU_UTIL")) == 1
    code, health = get(url + "/healthz")
    assert code == 200 and "lost GPU (fell off the bus)" in health


def test_dead_source_and_zero_gpus_are_unhealthy(exporter):
    fake, clock, _, url = exporter
    fake.scenario["gpus"][0]["error"] = fake.scenario["gpus"][1]["error"] = False
    saved = fake.scenario["gpus"]
    fake.scenario["gpus"] = []
    clock.tick()
    code, health = get(url + "/healthz")
    assert code == 503 and "sees no GPUs" in health
    fake.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(fake.NVMLError(fake.NVML_ERROR_DRIVER_NOT_LOADED))
    clock.tick()
    code, body = get(url + "/metrics")
    assert code == 200 and 'gpuwatch_source_up{source="nvml"} 0' in body and not series(body, "DCGM_FI_DEV_GPU_UTIL")
    code, health = get(url + "/healthz")
    assert code == 503 and "source nvml is down" in health and "Driver Not Loaded" in health
    fake.scenario["gpus"] = saved


@pytest.mark.parametrize(("fault", "reason"), [("deleted", "socket_missing"), ("hang", "timeout"),
                                               ("fail", "error"), ("unavailable", "unavailable")])
def test_kubelet_faults_drop_only_pod_labels(exporter, fault, reason):
    _, clock, fake_kubelet, url = exporter
    if fault == "deleted":
        fake_kubelet.stop()
    elif fault == "hang":
        fake_kubelet.delay = 3.0
    elif fault == "fail":
        fake_kubelet.fail = True
    else:
        fake_kubelet.fail = "UNAVAILABLE"
    clock.tick()
    code, body = get(url + "/metrics")
    assert code == 200
    util = series(body, "DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 2 and not any("pod=" in x for x in util)
    assert f'gpuwatch_attribution_error_info{{reason="{reason}"}} 1' in body
    assert 'gpuwatch_source_up{source="kubelet"} 0' in body
    code, health = get(url + "/healthz")
    assert code == 200 and f"attribution failing ({reason})" in health


def test_readings_cached_for_the_interval(exporter):
    _fake, clock, fake_kubelet, url = exporter
    for _ in range(5):
        get(url + "/metrics")
    calls = fake_kubelet.calls["List"]
    assert calls == 1, "kubelet listed more than once within one interval"
    clock.tick(1.5)
    get(url + "/metrics")
    assert fake_kubelet.calls["List"] == 2
