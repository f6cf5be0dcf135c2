"""Exporter benchmark: render time and peak RSS per scrape, against prometheus_client's floor,
then a loopback load test of the real HTTP server. Prints tables; no pass/fail exit code for speed.

    .venv/bin/python bench/exporter.py            # full: 60 s load at 50 scrapes/s
    .venv/bin/python bench/exporter.py --quick    # 10 s load

Scenarios: 8 whole GPUs, and 8 GPUs x 7 MIG instances (1g each), every device with every
DCGM field gpuwatch serves and one pod attributed. The floor is prometheus_client's own
``generate_latest`` over a registry of plain labelled Gauges holding the same number of series
with the same label sets. Each measurement runs in a fresh subprocess so peak RSS is its own.
Targets (issue): render <= 1.5x the floor, RSS <= 80 MB; load: 0 errors, RSS flat within 10 %.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIOS = {"8 GPUs": (8, 0), "8 GPUs x 7 MIG": (8, 7)}


def snapshot(gpus: int, migs: int):
    """A node's Snapshot with every served field set, and one allocation per device."""
    from gpuwatch.exporter.metrics import RAW_METRICS
    from gpuwatch.model import Allocation, Device
    from gpuwatch.sources import DeviceReading, Snapshot

    readings, allocations = [], []
    for g in range(gpus):
        uuid = f"GPU-{g:08d}-0000-0000-0000-000000000000"
        for i in range(migs or 1):
            mig = dict(mig_gi_id=7 + i, mig_profile="1g.10gb", mig_profile_id=19, mig_placement_start=i,
                       mig_placement_size=1, mig_uuid=f"MIG-{g:04d}{i:04d}-0000-0000-0000-000000000000") if migs else {}
            device = Device(node="bench-node", gpu_uuid=uuid, gpu_index=g, gpu_model="NVIDIA H100 80GB HBM3",
                            fb_total_bytes=80 << 30, pci_bus_id=f"00000000:{g + 16:02X}:00.0", **mig)
            values = {m.field_id: (0.4321 if m.fmt == "d" else 1234) for m in RAW_METRICS}
            readings.append(DeviceReading(device, values))
            allocations.append(Allocation(namespace="team-a", pod=f"pod-{g}-{i}", container="main",
                                          resource="nvidia.com/gpu", device_id=mig.get("mig_uuid", uuid)))
    return Snapshot(source="bench", readings=tuple(readings), driver_version="550.127.08"), allocations


class FixedSource:
    name = "bench"

    def __init__(self, snap):
        self.snap = snap

    def read(self, now):
        return self.snap

    def close(self):
        pass


def collector_for(gpus: int, migs: int):
    from gpuwatch.exporter.collector import ExporterCollector

    snap, allocations = snapshot(gpus, migs)
    return ExporterCollector(FixedSource(snap), allocations=lambda: allocations, interval_s=3600.0)


def measure(kind: str, gpus: int, migs: int, scrapes: int) -> dict:
    """Child process: time ``scrapes`` renders of ``kind`` (gpuwatch | floor); report peak RSS."""
    from gpuwatch.exporter.exposition import render

    collector = collector_for(gpus, migs)
    body = render(collector.collect())
    if kind == "floor":
        registry = floor_registry(collector)
        from prometheus_client import generate_latest

        def scrape():
            return generate_latest(registry)
    else:
        def scrape():
            return render(collector.collect())
    series = sum(1 for line in body.decode().splitlines() if not line.startswith("#"))
    scrape()
    started = time.perf_counter()
    for _ in range(scrapes):
        out = scrape()
    seconds = (time.perf_counter() - started) / scrapes
    return {"kind": kind, "series": series, "ms": seconds * 1000, "bytes": len(out),
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def floor_registry(collector):
    """prometheus_client Gauges with the same families, label sets and series count."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry(auto_describe=True)
    for family in collector.collect():
        if not family.samples:
            continue
        labelnames = sorted({k for s in family.samples for k in s.labels})
        gauge = Gauge(family.name, family.documentation, labelnames, registry=registry)
        for s in family.samples:
            child = gauge.labels(**{k: s.labels.get(k, "") for k in labelnames}) if labelnames else gauge
            child.set(s.value)
    return registry


def run_child(kind: str, scenario: str, scrapes: int) -> dict:
    gpus, migs = SCENARIOS[scenario]
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); from bench.exporter import measure; "
            f"print(json.dumps(measure({kind!r}, {gpus}, {migs}, {scrapes})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)


def render_table(scrapes: int) -> None:
    print(f"\nRender per scrape ({scrapes} scrapes each, fresh process per row; RSS = process peak)")
    print(f"{'scenario':<16} {'series':>6} {'gpuwatch ms':>11} {'floor ms':>9} {'ratio':>6} "
          f"{'gpuwatch RSS MB':>15} {'floor RSS MB':>12}")
    for scenario in SCENARIOS:
        ours, floor = run_child("gpuwatch", scenario, scrapes), run_child("floor", scenario, scrapes)
        print(f"{scenario:<16} {ours['series']:>6} {ours['ms']:>11.3f} {floor['ms']:>9.3f} "
              f"{ours['ms'] / floor['ms']:>6.2f} {ours['rss_mb']:>15.1f} {floor['rss_mb']:>12.1f}")


def load_test(seconds: float, rate: float) -> None:
    """``gpuwatch export --source simulate --simulate-kubelet`` (MIG node) under ``rate`` scrapes/s."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tests.support.prometheus import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-kubelet",
           "--simulate-gpus", "24", "--simulate-node", "gpu-node-002", "--listen", f"127.0.0.1:{port}"]
    server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        _wait(url)
        errors, done, rss = [0], [0], []
        _drive(url, seconds=min(5.0, seconds / 6), rate=rate, errors=errors, done=done)  # warm-up
        start_rss = _rss_mb(server.pid)
        sampler = threading.Thread(target=_sample_rss, args=(server.pid, seconds, rss), daemon=True)
        sampler.start()
        errors[0] = done[0] = 0
        started = time.monotonic()
        _drive(url, seconds=seconds, rate=rate, errors=errors, done=done)
        elapsed = time.monotonic() - started
        sampler.join()
        end_rss = _rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=15)
    drift = (end_rss - start_rss) / start_rss * 100
    print(f"\nLoad: {seconds:.0f} s at {rate:.0f} scrapes/s on the real HTTP server (simulate, MIG node, fake kubelet)")
    print(f"{'scrapes':>8} {'achieved/s':>10} {'errors':>6} {'RSS start MB':>12} {'RSS end MB':>10} "
          f"{'RSS max MB':>10} {'drift %':>8}")
    print(f"{done[0]:>8} {done[0] / elapsed:>10.1f} {errors[0]:>6} {start_rss:>12.1f} {end_rss:>10.1f} "
          f"{max(rss or [end_rss]):>10.1f} {drift:>8.1f}")


def concurrent_test(seconds: float, clients: int, slow: int) -> None:
    """``clients`` closed-loop scrapers (each asks again as soon as it has its answer) while ``slow``
    connections sit open sending half a request: latency percentiles, errors and the server's RSS.
    Target (issue: exporter under load): 0 errors, p99 <= 50 ms, RSS <= 120 MB."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tests.support.prometheus import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-kubelet",
           "--simulate-gpus", "24", "--simulate-node", "gpu-node-002", "--listen", f"127.0.0.1:{port}"]
    server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url, latencies, errors, rss = f"http://127.0.0.1:{port}/metrics", [], [0], []
    try:
        _wait(url)
        held = [_half_request(port) for _ in range(slow)]
        sampler = threading.Thread(target=_sample_rss, args=(server.pid, seconds, rss), daemon=True)
        sampler.start()
        deadline = time.monotonic() + seconds
        workers = [threading.Thread(target=_closed_loop, args=(url, deadline, latencies, errors)) for _ in range(clients)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        sampler.join()
        for sock in held:
            sock.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
    ms = sorted(x * 1000 for x in latencies)
    pick = (lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]) if ms else (lambda q: float("nan"))
    print(f"\nConcurrent: {clients} closed-loop clients x {seconds:.0f} s, {slow} silent half-open connections")
    print(f"{'scrapes':>8} {'errors':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'RSS max MB':>10}")
    print(f"{len(ms):>8} {errors[0]:>6} {pick(0.5):>7.1f} {pick(0.99):>7.1f} {ms[-1] if ms else float('nan'):>7.1f} "
          f"{max(rss or [0.0]):>10.1f}")


def _closed_loop(url: str, deadline: float, latencies: list, errors: list) -> None:
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                ok = reply.status == 200 and reply.read().startswith(b"# HELP")
        except OSError:
            ok = False
        latencies.append(time.monotonic() - started)
        errors[0] += not ok


def _half_request(port: int):
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished: a slow client
    return sock


def _drive(url: str, *, seconds: float, rate: float, errors: list, done: list) -> None:
    deadline, period, lock = time.monotonic() + seconds, 1.0 / rate, threading.Lock()

    def worker(offset: float):
        next_at = time.monotonic() + offset
        while next_at < deadline:
            time.sleep(max(0.0, next_at - time.monotonic()))
            try:
                with urllib.request.urlopen(url, timeout=5) as reply:
                    ok = reply.status == 200 and reply.read().startswith(b"# HELP")
            except OSError:
                ok = False
            with lock:
                done[0] += 1
                errors[0] += not ok
            next_at += period * 4

    threads = [threading.Thread(target=worker, args=(i * period,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _wait(url: str) -> None:
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"exporter did not answer on {url}")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _sample_rss(pid: int, seconds: float, out: list) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out.append(_rss_mb(pid))
        time.sleep(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (10 s load, fewer scrapes)")
    parser.add_argument("--scrapes", type=int, default=0, help="renders per measurement")
    args = parser.parse_args()
    render_table(args.scrapes or (200 if args.quick else 1000))
    load_test(10.0 if args.quick else 60.0, 50.0)
    concurrent_test(10.0 if args.quick else 60.0, clients=20, slow=200)
    print(f"\npython {sys.version.split()[0]}, {os.cpu_count()} CPUs (shared)")


if __name__ == "__main__":
    main()
