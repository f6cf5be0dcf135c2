"""The exporter command line the chart renders, run for real (source simulate, no GPU needed).

The DaemonSet's command and args (with exporter.source=simulate, a free port and the socket
directory pointed at a temp dir) are executed as they would be in the pod, NODE_NAME set as the
downward API would; a real kubelet pod-resources gRPC server (gpuwatch.sources.kubelet_simulated)
listens where the chart's hostPath mount puts the socket. Then /healthz answers 200, /metrics
serves DCGM-named series, and the kubelet source is up —
so the rendered flags, the socket path and the environment fit the real CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.helm_chart import container, find, pod_spec, render
from tests.support.prometheus import free_port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_rendered_exporter_command_serves_metrics_with_attribution(tmp_path):
    kubelet_simulated = pytest.importorskip("gpuwatch.sources.kubelet_simulated")
    pytest.importorskip("grpc")
    port = free_port()
    values = {"exporter": {"source": "simulate", "port": port, "kubeletSocketDir": str(tmp_path),
                           "extraArgs": ["--simulate-gpus", "8"]}}
    exporter = container(pod_spec(find(render(values), "DaemonSet", "exporter")), "exporter")
    kubelet = kubelet_simulated.serve(str(tmp_path / "kubelet.sock"), pods=[])
    env = {**os.environ, "NODE_NAME": "node-under-test"}
    env |= {e["name"]: e["value"] for e in exporter["env"] if "value" in e}
    argv = [sys.executable, "-m", "gpuwatch", *exporter["args"]]
    assert exporter["command"] == ["gpuwatch"]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, status, body = time.monotonic() + 30, 0, ""
        while time.monotonic() < deadline and status != 200:
            assert process.poll() is None, process.stdout.read()
            status, body = get(f"http://127.0.0.1:{port}/healthz") if _listening(port) else (0, "")
            time.sleep(0.2)
        assert status == 200, body
        status, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert 'Hostname="' in metrics  # the default compat profile (dcgm-exporter-4.8); simulate names its fleet's nodes; dcgm/nvml use NODE_NAME
        assert "DCGM_FI_DEV_GPU_UTIL{" in metrics
        assert 'gpuwatch_source_up{source="kubelet"} 1' in metrics
    finally:
        process.terminate()
        process.wait(timeout=10)
        kubelet.stop()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
