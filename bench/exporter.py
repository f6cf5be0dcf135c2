"""Exporter benchmark: render time and peak RSS per scrape, against prometheus_client's floor,
then a loopback load test of the real HTTP server. Prints tables; no pass/fail exit code for speed.

    .venv/bin/python bench/exporter.py            # full: 20 clients x 60 s, then the same + 200 slow
    .venv/bin/python bench/exporter.py --quick    # 10-15 s each

Scenarios: 8 whole GPUs, and 8 GPUs x 7 MIG instances (1g each), every device with every
DCGM field gpuwatch serves and one pod attributed. The floor is prometheus_client's own
``generate_latest`` over a registry of plain labelled Gauges holding the same number of series
with the same label sets. Each measurement runs in a fresh subprocess so peak RSS is its own.
Targets (issue): render <= 1.5x the floor, RSS <= 80 MB; 20 concurrent clients on loopback: 0 errors,
p99 <= 50 ms, RSS <= 120 MB and flat (first vs end sample), also with 200 slow connections held open.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
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


@contextlib.contextmanager
def exporter():
    """``gpuwatch export --source simulate --simulate-kubelet`` (a MIG node) in a child process: (url, pid)."""
    from tests.support.prometheus import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-kubelet",
           "--simulate-gpus", "24", "--simulate-node", "gpu-node-002", "--listen", f"127.0.0.1:{port}"]
    server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(f"http://127.0.0.1:{port}/metrics")
        yield f"http://127.0.0.1:{port}/metrics", server.pid
    finally:
        server.terminate()
        server.wait(timeout=15)


def concurrent_test(seconds: float, clients: int, slow: int) -> None:
    """``clients`` closed-loop scrapers (each asks again as soon as it has its answer) while ``slow``
    connections are held open, half sending nothing and half sending half a request; each one the
    server drops (idle timeout) is reopened at once. Target (issue: exporter under load): 0 errors,
    p99 <= 50 ms, RSS <= 120 MB, with and without the slow clients."""
    latencies, errors, rss, dropped = [], [0], [], [0]
    with exporter() as (url, pid):
        port = int(url.split(":")[2].split("/")[0])
        deadline = time.monotonic() + seconds
        threads = [threading.Thread(target=_hold_slow, args=(port, slow, deadline, dropped)),
                   threading.Thread(target=_sample_rss, args=(pid, seconds, rss)),
                   *(threading.Thread(target=_closed_loop, args=(url, deadline, latencies, errors)) for _ in range(clients))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        end_rss = _rss_mb(pid)
    ms = sorted(x * 1000 for x in latencies)
    pick = (lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]) if ms else (lambda q: float("nan"))
    print(f"\nConcurrent: {clients} closed-loop clients x {seconds:.0f} s, {slow} slow connections held open")
    print(f"{'scrapes':>8} {'errors':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'RSS first MB':>12} "
          f"{'RSS end MB':>10} {'RSS max MB':>10} {'slow dropped':>12}")
    print(f"{len(ms):>8} {errors[0]:>6} {pick(0.5):>7.1f} {pick(0.99):>7.1f} {ms[-1] if ms else float('nan'):>7.1f} "
          f"{(rss or [end_rss])[0]:>12.1f} {end_rss:>10.1f} {max(rss or [end_rss]):>10.1f} {dropped[0]:>12}")


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


def _hold_slow(port: int, count: int, deadline: float, dropped: list) -> None:
    """Keep ``count`` slow connections open until ``deadline``; reopen each one the server closes."""
    held = [_slow(port, half=i % 2 == 1) for i in range(count)]
    while time.monotonic() < deadline:
        readable, _, _ = select.select(held, [], [], 0.2) if held else ([], [], [])
        for sock in readable:  # readable with nothing sent back = closed by the server
            held.remove(sock)
            sock.close()
            dropped[0] += 1
            held.append(_slow(port, half=dropped[0] % 2 == 1))
    for sock in held:
        sock.close()


def _slow(port: int, *, half: bool):
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if half:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
    return sock


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
    parser.add_argument("--quick", action="store_true", help="short run (10-15 s per load, fewer scrapes)")
    parser.add_argument("--scrapes", type=int, default=0, help="renders per measurement")
    args = parser.parse_args()
    render_table(args.scrapes or (200 if args.quick else 1000))
    concurrent_test(10.0 if args.quick else 60.0, clients=20, slow=0)
    concurrent_test(15.0 if args.quick else 60.0, clients=20, slow=200)
    print(f"\npython {sys.version.split()[0]}, {os.cpu_count()} CPUs (shared)")


if __name__ == "__main__":
    main()
