"""PromQL vs gpuwatch's analyzer on the same data: idle GPU-hours and false-util GPU-hours per pod.

    python bench/promql.py --gpus 64 --days 1

simulates a bundle, backfills it into a Prometheus TSDB with promtool (dcgm-exporter names, pod
labels, kube-state-metrics series), starts Debian's prometheus on it, runs the PromQL equivalents
of idle_hoarding and false_utilization over the window, runs the analyzer (DuckDB) on the bundle,
and prints both timings and how far the answers agree. bench/analyzer.py --promql calls ``run``
and ``backfill_from_bundle`` the same way.

The PromQL is the "what people write today" baseline: per step, reported = GPU_UTIL/100 else
GR_ENGINE_ACTIVE, idle = reported < 0.05 and (SM_ACTIVE < 0.05 where present), false = reported >=
0.5 and SM_ACTIVE < 0.25; hours = matching samples x step. It has no gap handling and counts a
MIG instance or a time-sliced share as a whole GPU, so those pods are expected to differ.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

IDLE_BELOW, FALSE_REPORTED_MIN, FALSE_EFFECTIVE_BELOW = 0.05, 0.5, 0.25


def _queries(step: float) -> dict[str, str]:
    r = f"{round(step * 1000) - 1}ms"  # one sample per step; no 5-minute lookback after a series ends
    util = f'(avg_over_time(DCGM_FI_DEV_GPU_UTIL{{pod!=""}}[{r}]) / 100)'
    gr = f'avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{pod!=""}}[{r}])'
    sm = f'avg_over_time(DCGM_FI_PROF_SM_ACTIVE{{pod!=""}}[{r}])'
    reported = f"({util} or {gr})"
    idle = f"(({reported} < bool {IDLE_BELOW}) * (({sm} < bool {IDLE_BELOW}) or ({reported} * 0 + 1)))"
    false = f"(({reported} >= bool {FALSE_REPORTED_MIN}) * ({sm} < bool {FALSE_EFFECTIVE_BELOW}))"
    return {"idle_gpu_hours": idle, "false_util_gpu_hours": false}


def run(url: str, *, start: float, end: float, step: float = 60.0):
    """(seconds, frame namespace/pod/idle_gpu_hours/false_util_gpu_hours) from PromQL on ``url``."""
    import pandas as pd

    width = f"{round(end - start)}s"
    rows: dict[tuple, dict] = {}
    began = time.perf_counter()
    for column, expr in _queries(step).items():
        query = f"sum by (namespace, pod) (sum_over_time({expr}[{width}:{round(step)}s])) * {step / 3600}"
        for item in _get(url, "/api/v1/query", {"query": query, "time": f"{end - step:.3f}"})["result"]:
            key = (item["metric"].get("namespace"), item["metric"].get("pod"))
            rows.setdefault(key, {})[column] = float(item["value"][1])
    seconds = time.perf_counter() - began
    frame = pd.DataFrame([{"namespace": ns, "pod": pod, **v} for (ns, pod), v in rows.items()],
                         columns=["namespace", "pod", "idle_gpu_hours", "false_util_gpu_hours"])
    return seconds, frame.fillna(0.0).sort_values(["namespace", "pod"]).reset_index(drop=True)


def backfill_from_bundle(bundle_dir: str | Path, tsdb_dir: str | Path, *, step: float = 60.0,
                         block_seconds: float = 7200.0) -> int:
    """Write the bundle as OpenMetrics (dcgm-exporter + KSM names) and ``promtool`` it into ``tsdb_dir``.

    One OpenMetrics file per 2-hour block: promtool 2.42 (Debian 12) re-reads its whole input for
    every 2-hour block it cuts, so a 7-day file is read 84 times; a file per block is read once."""
    import numpy as np

    from gpuwatch.ingest import openmetrics
    from gpuwatch.store import bundle

    files = bundle.find_files(bundle_dir)
    frames = {name: _read(files[name]) for name in ("devices", "samples", "pods")}
    ts = openmetrics._epoch(frames["samples"]["ts"])
    grid = np.arange(ts.min(), ts.max() + step, step)
    families = {}
    for part in (openmetrics.sample_families(frames["devices"], frames["samples"]),
                 openmetrics.ksm_families(frames["pods"], grid), openmetrics.ksm_node_families(frames["pods"], grid)):
        for name, series in part.items():
            families.setdefault(name, []).extend(series)
    Path(tsdb_dir).mkdir(parents=True, exist_ok=True)
    written = 0
    first = np.floor(ts.min() / block_seconds) * block_seconds
    with tempfile.TemporaryDirectory() as tmp:
        for lo in np.arange(first, ts.max() + step, block_seconds):
            block = {name: [(labels, t[(t >= lo) & (t < lo + block_seconds)], v[(t >= lo) & (t < lo + block_seconds)])
                            for labels, t, v in series] for name, series in families.items()}
            block = {name: [s for s in series if len(s[1])] for name, series in block.items()}
            if not any(block.values()):
                continue
            path = Path(tmp) / "block.om"
            written += openmetrics.write(path, block)
            subprocess.run([_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(path), str(tsdb_dir)],
                           check=True, capture_output=True, text=True)
    return written


def agreement(promql, analyzer, column: str, *, tolerance: float = 0.02, only: set | None = None) -> tuple[int, int]:
    """(pods whose GPU-hours agree within ``tolerance`` hours, pods compared); ``only`` (ns, pod)s."""
    merged = promql.merge(analyzer[["namespace", "pod", column]], on=["namespace", "pod"], how="outer",
                          suffixes=("_promql", "_analyzer")).fillna(0.0)
    if only is not None:
        merged = merged[[(ns, pod) in only for ns, pod in zip(merged.namespace, merged.pod, strict=True)]]
    diff = (merged[f"{column}_promql"] - merged[f"{column}_analyzer"]).abs()
    return int((diff <= tolerance).sum()), len(merged)


@contextlib.contextmanager
def prometheus(tsdb: Path):
    """Debian's prometheus serving ``tsdb`` on a free 127.0.0.1 port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tsdb.parent / "prometheus.yml"
    config.write_text("global: {}\n")
    proc = subprocess.Popen([_binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y",
                             "--query.max-samples=200000000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200:
                    break
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params
    from gpuwatch.fleet import build_fleet
    from gpuwatch.fleet import command as simulate
    from gpuwatch.ingest.prometheus import fetch

    fleet = build_fleet(gpus=args.gpus, seed=args.seed, days=args.days)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        simulate.write_bundle(fleet, root / "bundle")
        began = time.perf_counter()
        samples = backfill_from_bundle(root / "bundle", root / "tsdb")
        print(f"backfill: {samples:,} samples with promtool in {time.perf_counter() - began:.1f} s")
        con = store.connect(None)
        store.load_bundle(con, root / "bundle")
        p = params(_utc(fleet.start), _utc(fleet.end))
        began = time.perf_counter()
        frames = {name: analyses.run(con, name, **p) for name in ("idle_hoarding", "false_utilization")}
        analyzer_s = time.perf_counter() - began
        with prometheus(root / "tsdb") as url:
            promql_s, result = run(url, start=fleet.start, end=fleet.end)
            began = time.perf_counter()
            fetched = fetch(url, start=fleet.start, end=fleet.end)
            fetch_s = time.perf_counter() - began
        ingested = store.connect(None)
        store.load(ingested, fetched | {"prices": simulate.prices_frame()}, source=url)
        again = {name: analyses.run(ingested, name, **p) for name in frames}
    print(f"gpuwatch ingest from that Prometheus (fetch): {len(fetched['samples']):,} sample rows in {fetch_s:.1f} s")
    print(f"\n{'engine':<22}{'seconds':>9}{'idle GPU-h':>12}{'false-util GPU-h':>18}")
    print(f"{'analyzer (DuckDB)':<22}{analyzer_s:>9.2f}{frames['idle_hoarding'].idle_gpu_hours.sum():>12.1f}"
          f"{frames['false_utilization'].false_util_gpu_hours.sum():>18.1f}")
    print(f"{'analyzer on ingested':<22}{'':>9}{again['idle_hoarding'].idle_gpu_hours.sum():>12.1f}"
          f"{again['false_utilization'].false_util_gpu_hours.sum():>18.1f}")
    print(f"{'PromQL (Prometheus)':<22}{promql_s:>9.2f}{result.idle_gpu_hours.sum():>12.1f}"
          f"{result.false_util_gpu_hours.sum():>18.1f}")
    whole = {(p.namespace, p.pod) for p in fleet.pods if p.gpu_resource == "nvidia.com/gpu"}
    for name, column in (("idle_hoarding", "idle_gpu_hours"), ("false_utilization", "false_util_gpu_hours")):
        ok, total = agreement(result, frames[name], column)
        keep = [(ns, pod) in whole for ns, pod in zip(result.namespace, result.pod, strict=True)]
        ok_whole, total_whole = agreement(result[keep], frames[name], column, only=whole)
        print(f"agreement {column}: {ok}/{total} pods within 0.02 GPU-h; whole-GPU pods {ok_whole}/{total_whole} "
              "(PromQL counts a MIG instance or time-sliced share as a whole GPU)")
    return 0


def _get(url: str, path: str, params: dict) -> dict:
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=600) as reply:
        body = json.load(reply)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params.get('query')}: {body}")
    return body["data"]


def _read(file: Path):
    import pandas as pd

    return pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)


def _binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if not found:
        raise SystemExit(f"{name} not found: install Debian's prometheus package")
    return found


def _utc(epoch: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC)


if __name__ == "__main__":
    raise SystemExit(main())
