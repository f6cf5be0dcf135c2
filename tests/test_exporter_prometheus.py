"""End to end: a REAL Prometheus (tests/support/prometheus.py) scrapes ``gpuwatch export --source
simulate --simulate-kubelet`` run as a subprocess on a free port; attribution goes through the
real kubelet gRPC path (the exporter's own fake kubelet on a unix socket). The test queries
Prometheus's HTTP API for DCGM series, MIG series (GPU_I_PROFILE) and their pod labels.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.prometheus import free_port, require_prometheus, running

pytestmark = pytest.mark.slow


@pytest.fixture
def exporter_process(tmp_path):
    require_prometheus()
    port = free_port()
    log = (tmp_path / "exporter.log").open("w")
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-kubelet",
           "--simulate-gpus", "24", "--simulate-node", "gpu-node-002", "--compat", "gpuwatch", "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            time.sleep(0.3)
        assert process.poll() is None, (tmp_path / "exporter.log").read_text()
    yield f"127.0.0.1:{port}"
    process.terminate()
    assert process.wait(timeout=15) == 0, "exporter did not exit cleanly on SIGTERM"


def test_prometheus_scrapes_dcgm_mig_and_pod_series(tmp_path, exporter_process):
    with running(tmp_path, targets=[exporter_process]) as prom:
        temps = prom.wait_for('DCGM_FI_DEV_GPU_TEMP{hostname="gpu-node-002"}')
        assert len({r["metric"]["UUID"] for r in temps}) == 8
        mig = prom.wait_for('DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_PROFILE!=""}')
        assert {r["metric"]["GPU_I_PROFILE"] for r in mig} >= {"1g.10gb"}
        with_pods = prom.query('DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_PROFILE!="", pod!=""}')
        assert with_pods, "no MIG series carries pod labels"
        assert all(r["metric"]["namespace"] and r["metric"]["container"] == "main" for r in with_pods)
        alloc = prom.query('gpuwatch_gpu_allocation_info{resource=~"nvidia.com/mig-.*"}')
        assert {r["metric"]["pod"] for r in alloc} == {r["metric"]["pod"] for r in with_pods}
        assert prom.query('gpuwatch_source_up{source="kubelet"} == 1')
        assert not prom.query("gpuwatch_attribution_error_info")
        assert prom.query('up{job="gpuwatch"} == 1')
