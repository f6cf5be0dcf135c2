"""MIG placement search and the two fragmentation analyses at fleet scale.

    python bench/mig.py --gpus 1000 10000

For each size: N MIG GPUs with random valid layouts (every layout gpuwatch.mig enumerates is
equally likely, the worst case for memoization; real fleets repeat a handful of layouts) and
~70% of instances in use, 2 MIG pods per GPU as demand; then mig_fragmentation through a real
in-memory DuckDB store, and fragmentation_fgd on N whole/shared GPUs (8 per node) with as many
pods. Prints one table row per size and analysis; timings are wall seconds, cold caches.
"""

from __future__ import annotations

import argparse
import random
import time

import pandas as pd

from gpuwatch import analyses, mig, store
from gpuwatch import fleet as workloads

START = workloads.DEFAULT_START
NAMES = {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb", 0: "7g.80gb"}


def ts(seconds: float) -> pd.Timestamp:
    return pd.Timestamp(START + seconds, unit="s", tz="UTC")


def mig_bundle(gpus: int, rng: random.Random) -> dict[str, pd.DataFrame]:
    devices, pods = [], []
    layouts = [layout for layout in mig.all_layouts() if layout]
    for g in range(gpus):
        for gi, p in enumerate(rng.choice(layouts)):
            devices.append({"node": f"n{g // 8:05d}", "gpu_uuid": f"GPU-{g:06d}", "gpu_index": g % 8,
                            "gpu_model": "NVIDIA H100 80GB HBM3", "fb_total_bytes": p.profile.size * 10 * 2**30,
                            "mig_gi_id": gi + 1, "mig_profile": NAMES[p.profile_id], "mig_profile_id": p.profile_id,
                            "mig_placement_start": p.start, "mig_placement_size": p.profile.size})
    for i in range(2 * gpus):
        pods.append({"namespace": "ns", "pod": f"p{i}", "node": f"n{rng.randrange(max(1, gpus // 8)):05d}",
                     "start_ts": ts(0), "end_ts": None if rng.random() < 0.7 else ts(1800),
                     "gpu_resource": "nvidia.com/mig-" + rng.choice(["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]),
                     "gpu_count": 1, "device_ids": ""})
    return {"devices": pd.DataFrame(devices), "pods": pd.DataFrame(pods)}


def fgd_bundle(gpus: int, rng: random.Random) -> dict[str, pd.DataFrame]:
    devices = [{"node": f"n{g // 8:05d}", "gpu_uuid": f"GPU-{g:06d}", "gpu_index": g % 8, "gpu_model": "T4"}
               for g in range(gpus)]
    pods = []
    for i in range(gpus):
        share = rng.choice([1.0, 1.0, 0.5, 0.25, 0.3])
        pods.append({"namespace": "ns", "pod": f"p{i}", "node": f"n{(i % gpus) // 8:05d}", "start_ts": ts(0),
                     "end_ts": None, "gpu_resource": "nvidia.com/gpu", "gpu_count": share,
                     "device_ids": f"GPU-{rng.randrange(gpus):06d}"})
    return {"devices": pd.DataFrame(devices), "pods": pd.DataFrame(pods)}


def timed(name: str, frames: dict, gpus: int) -> tuple[str, int, int, float, str]:
    con = store.connect(None)
    store.load(con, frames, source="bench")
    t0 = time.perf_counter()
    out = analyses.run(con, name, start=ts(0).tz_localize(None).to_pydatetime(),
                       end=ts(3600).tz_localize(None).to_pydatetime())
    seconds = time.perf_counter() - t0
    if name == "mig_fragmentation":
        summary = f"stranded {int(out['stranded_slices'].sum())} of {int(out['free_slices'].sum())} free slices"
    else:
        summary = f"fleet ratio {out.iloc[-1]['fragmentation_ratio']:.3f}"
    return name, gpus, len(out), seconds, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'analysis':<20} {'gpus':>7} {'rows':>7} {'seconds':>8}  result")
    for gpus in args.gpus:
        rng = random.Random(args.seed)
        for name, frames in (("mig_fragmentation", mig_bundle(gpus, rng)), ("fragmentation_fgd", fgd_bundle(gpus, rng))):
            for cached in (mig._repack, mig._stranded, mig._placeable):
                cached.cache_clear()
            row = timed(name, frames, gpus)
            print(f"{row[0]:<20} {row[1]:>7} {row[2]:>7} {row[3]:>8.2f}  {row[4]}")


if __name__ == "__main__":
    main()
