"""Benchmark: one kubelet pod-resources List per scrape — fresh channel vs a reused Client.

Serves a node-sized answer from the real gRPC fake kubelet on a unix socket (gpuwatch's
kubelet_simulated) and times, side by side in one run: a List on a fresh channel (what
``kubelet.list_allocations`` does), a List on a reused ``kubelet.Client`` (what the exporter
does), the pure ``parse`` and the pure ``attribute`` on that answer. Prints a table.

    .venv/bin/python bench/kubelet.py [--pods 110] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from google.protobuf import json_format

from gpuwatch.attribution import attribute_with_unknown
from gpuwatch.model import Device
from gpuwatch.sources import kubelet
from gpuwatch.sources.kubelet_simulated import serve


def node_answer(pods: int) -> tuple[list[dict], list[Device]]:
    """``pods`` pods on an 8-GPU node: 4 whole GPUs, 4 GPUs time-sliced; the rest CPU-only."""
    devices = [Device(node="n", gpu_uuid=f"GPU-{i:08d}-0000-4000-8000-000000000000", gpu_index=i,
                      gpu_model="NVIDIA H100 80GB HBM3", fb_total_bytes=80 << 30) for i in range(8)]
    out = []
    for n in range(pods):
        containers = [{"name": "app", "cpu_ids": list(range(n % 4, n % 4 + 2))}, {"name": "sidecar"}]
        if n < 4:
            containers[0]["devices"] = [{"resource_name": "nvidia.com/gpu", "device_ids": [devices[n].gpu_uuid]}]
        elif n < 4 + 4 * 8:  # 8 replicas on each of GPUs 4-7
            gpu = devices[4 + (n - 4) // 8]
            containers[0]["devices"] = [{"resource_name": "nvidia.com/gpu.shared",
                                         "device_ids": [f"{gpu.gpu_uuid}::{(n - 4) % 8}"]}]
        out.append({"name": f"pod-{n}", "namespace": f"ns-{n % 7}", "containers": containers})
    return out, devices


def timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls (after one warm-up)."""
    fn()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110, help="pods on the node (kubelet's default max is 110)")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    pods, devices = node_answer(args.pods)
    api_pb2, _ = kubelet.stubs()
    pods = [json_format.ParseDict(p, api_pb2.PodResources()) for p in pods]  # the fake's cost out of the timing
    with tempfile.TemporaryDirectory() as tmp:
        sock = str(Path(tmp) / "kubelet.sock")
        with serve(sock, pods=pods), kubelet.Client(sock) as client:
            response = client.read(timeout=5)
            allocations = kubelet.parse(response)
            rows = [
                ("List, fresh channel (list_allocations)", timed(lambda: kubelet.list_allocations(sock, timeout=5), args.repeat)),
                ("List, reused Client.list_allocations", timed(lambda: client.list_allocations(timeout=5), args.repeat)),
                ("parse (pure)", timed(lambda: kubelet.parse(response), args.repeat)),
                ("attribute_with_unknown (pure)", timed(lambda: attribute_with_unknown(devices, allocations), args.repeat)),
            ]
    print(f"{args.pods} pods, {len(allocations)} GPU allocations, {response.ByteSize()} bytes, median of {args.repeat}")
    print(f"{'step':<42} {'ms':>8}")
    for name, seconds in rows:
        print(f"{name:<42} {seconds * 1000:>8.3f}")


if __name__ == "__main__":
    main()
