"""Bundles built in tests: the shipped sample_data, a fresh simulated fleet, and real public traces.

Real traces (tests/conftest.py ``shared_data``) are read in place and reshaped into bundle frames
here; nothing from them is copied into the repository.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import weakref
from pathlib import Path

import pandas as pd

from gpuwatch import store
from gpuwatch.analyses.params import params, window

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DATA = ROOT / "sample_data"
SAMPLE_START = "2026-11-09T00:00:00Z"
GENAI_STEP_SECONDS = 57.0
DLRM_T0 = pd.Timestamp("2025-01-01T00:00:00")


def loaded(path: Path | str = SAMPLE_DATA):
    """A private store holding the bundle at ``path`` and the default analysis parameters.

    For the shipped sample_data the store is a copy of a template made once per test process
    (``sample_store``): the caller owns its copy and may write to it. Any other bundle is loaded into
    a fresh in-memory store, as every call did before.
    """
    if Path(path).resolve() == SAMPLE_DATA.resolve():
        folder = _scratch()
        con = store.connect(str(sample_store(folder / "sample.duckdb")))
        _SCRATCH.append((weakref.ref(con), folder))
    else:
        con = store.connect(None)
        store.load_bundle(con, path)
    return con, params(*window(store.data_range(con)[1]))


def sample_store(db: Path | str) -> Path:
    """sample_data loaded into a fresh store file at ``db`` (closed), as ``store.connect`` and
    ``store.load_bundle`` make it: a copy of a template loaded once per test process."""
    db = Path(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    shutil.copyfile(_template(), db)
    return db


# One template per test process (each xdist worker makes its own), remade if sample_data changes
# under it; the copies loaded() hands out live in per-call scratch folders, removed once their
# connection is gone and at exit.
_TEMPLATE: dict[str, object] = {}
_SCRATCH: list[tuple[weakref.ref, Path]] = []


def _template() -> Path:
    signature = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(SAMPLE_DATA.iterdir())
                      if p.is_file())
    if _TEMPLATE.get("signature") != signature:
        folder = Path(tempfile.mkdtemp(prefix="gpuwatch-sample-store-"))
        atexit.register(shutil.rmtree, folder, True)
        db = folder / "sample.duckdb"
        con = store.connect(str(db))
        store.load_bundle(con, SAMPLE_DATA)
        con.close()
        _TEMPLATE.update(signature=signature, path=db)
    return _TEMPLATE["path"]


def _scratch() -> Path:
    """A new folder for one copy (its WAL and spill files beside it); the folders of copies whose
    connection has been collected are removed first."""
    for entry in [e for e in _SCRATCH if e[0]() is None]:
        _SCRATCH.remove(entry)
        shutil.rmtree(entry[1], ignore_errors=True)
    if "exit" not in _TEMPLATE:
        _TEMPLATE["exit"] = atexit.register(_remove_scratch)
    return Path(tempfile.mkdtemp(prefix="gpuwatch-loaded-"))


def _remove_scratch() -> None:
    for _, folder in _SCRATCH:
        shutil.rmtree(folder, ignore_errors=True)
    _SCRATCH.clear()


def genai_frames(shared_data: Path) -> dict[str, pd.DataFrame]:
    """Alibaba GenAI serving trace as a bundle: duty cycle (%) -> gpu_util, memory -> fb_used_bytes."""
    base = shared_data / "alibaba_v2026_genai"
    duty = pd.read_csv(base / "pod_gpu_duty_cycle_anon.csv").rename(columns={"value": "gpu_util"})
    duty["gpu_util"] = duty["gpu_util"] / 100.0  # the trace's README: duty cycle in percent; bundles hold ratios
    memory = pd.read_csv(base / "pod_gpu_memory_used_bytes_anon.csv").rename(columns={"value": "fb_used_bytes"})
    samples = duty.merge(memory, on=["timestamp_anon", "container_ip"], how="outer")
    samples = samples.rename(columns={"timestamp_anon": "ts", "container_ip": "pod"})
    samples = samples.assign(node="genai-node", gpu_uuid="GPU-" + samples["pod"], namespace="genai", container="serving")
    pods = samples.groupby("pod", as_index=False)["ts"].min().rename(columns={"ts": "start_ts"})
    pods = pods.assign(namespace="genai", node="genai-node", gpu_resource="nvidia.com/gpu", gpu_count=1.0,
                       device_ids="GPU-" + pods["pod"], team="genai")
    devices = pods[["node"]].assign(gpu_uuid=pods["device_ids"], gpu_model="unknown (GenTD26)")
    return {"samples": samples, "pods": pods, "devices": devices}


def dlrm_frames(shared_data: Path, *, usd_per_gpu_hour: float = 1.0) -> dict[str, pd.DataFrame]:
    """Alibaba DLRM trace (allocations only) as devices + pods + prices; app_name is the team."""
    raw = pd.read_csv(shared_data / "alibaba_gpu_v2025_dlrm" / "disaggregated_DLRM_trace.csv")
    gpu = raw[raw["gpu_request"] > 0].reset_index(drop=True)
    start = DLRM_T0 + pd.to_timedelta(gpu["creation_time"].fillna(0), unit="s")
    end = DLRM_T0 + pd.to_timedelta(gpu["deletion_time"], unit="s")
    pods = pd.DataFrame({"namespace": "dlrm-" + gpu["app_name"], "pod": gpu["instance_sn"], "node": "hn-pool",
                         "team": gpu["app_name"], "start_ts": start, "end_ts": end,
                         "gpu_resource": "nvidia.com/gpu", "gpu_count": gpu["gpu_request"].astype(float)})
    gpus = int(peak_concurrent(pods))
    devices = pd.DataFrame({"node": "hn-pool", "gpu_uuid": [f"GPU-hn-{i:05d}" for i in range(gpus)],
                            "gpu_index": range(gpus), "gpu_model": "DLRM HN GPU"})
    prices = pd.DataFrame({"gpu_model": ["DLRM HN GPU"], "usd_per_gpu_hour": [usd_per_gpu_hour]})
    return {"devices": devices, "pods": pods, "prices": prices}


def peak_concurrent(pods: pd.DataFrame) -> float:
    """Most GPUs allocated at once (an open end counts as still running)."""
    events = pd.concat([pd.DataFrame({"t": pods["start_ts"], "d": pods["gpu_count"]}),
                        pd.DataFrame({"t": pods["end_ts"].dropna(), "d": -pods.loc[pods["end_ts"].notna(), "gpu_count"]})])
    return float(events.sort_values(["t", "d"])["d"].cumsum().max())


def without_samples(bundle: Path, out: Path) -> Path:
    """A copy of ``bundle``'s files but its samples (DuckDB reads them as it reads the whole bundle)."""
    import shutil

    from gpuwatch.store import bundle as bundle_files

    out.mkdir(parents=True, exist_ok=True)
    for name, path in bundle_files.find_files(bundle).items():
        if name != "samples":
            shutil.copy(path, out / path.name)
    return out


def by_hour(samples: pd.DataFrame) -> list[pd.DataFrame]:
    """The samples split by clock hour, in time order (a bundle sent an hour at a time)."""
    hour = pd.to_datetime(samples["ts"]).dt.floor("h")
    return [part for _, part in samples.groupby(hour, sort=True)]


def small_fleet(out: Path, *, seed: int, days: float = 0.5) -> Path:
    """A simulated 16-GPU fleet over ``days`` (half a day) at 60 s, failures and topology planted, as a bundle."""
    from gpuwatch import fleet
    from gpuwatch.fleet import command

    command.write_bundle(fleet.build_fleet(gpus=16, seed=seed, days=days, failures=True, topology=True), out, step=60)
    return out


def other_gpus(source: Path | str, out: Path, *, tag: str) -> Path:
    """A copy of the bundle at ``source`` whose GPUs are other GPUs (every ``GPU-…`` UUID becomes
    ``GPU-<tag>…``): the same workload on another cluster's hardware. One GPU UUID is one GPU, so
    the same bundle loaded as two clusters is refused (store/places.py)."""
    import shutil

    source, out = Path(source), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.suffix == ".csv":
            (out / path.name).write_text(path.read_text(encoding="utf-8").replace("GPU-", f"GPU-{tag}"), encoding="utf-8")
        elif path.suffix == ".parquet":
            frame = pd.read_parquet(path)
            for column in ("gpu_uuid", "peer_gpu_uuid"):
                if column in frame:
                    frame[column] = frame[column].astype(str).str.replace("GPU-", f"GPU-{tag}", regex=False)
            frame.to_parquet(out / path.name, index=False)
        elif path.is_file():
            shutil.copy(path, out / path.name)
    return out
