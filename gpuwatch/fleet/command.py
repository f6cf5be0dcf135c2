"""`gpuwatch simulate`: write a bundle (docs/architecture.md#data-contract) for a synthetic fleet, plus its
ground truth: ``truth.csv`` (each pod's behaviour, and its topology verdict) and ``failures.csv`` (the
planted failure modes). With topology (the default) the bundle carries every node's GPU links
(``topology``), NUMA nodes and NVLink cliques, and the pods left Pending (docs/architecture.md#topology).

Samples stream segment by segment (workloads.iter_samples) into Parquet row groups or appended
CSV chunks, so 1,024 GPUs x 7 days x 30 s (20.6M rows) and 10,240-GPU fleets fit in memory.
"""

from __future__ import annotations

import argparse
import logging
from datetime import UTC
from pathlib import Path

import numpy as np

from gpuwatch import fleet as workloads
from gpuwatch import units
from gpuwatch.fleet.catalog import GPU_PRODUCT_LABEL, gpu_product
from gpuwatch.fleet.sinks import ROW_GROUP_ROWS, CsvSink, ParquetSink
from gpuwatch.model import BUNDLE_COLUMNS, TRUTH_COLUMNS

log = logging.getLogger(__name__)
_TEXT = ("node", "gpu_uuid", "namespace", "pod", "container")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", type=int, default=64, help="number of GPUs, 8 per node (default: %(default)s)")
    parser.add_argument("--days", type=float, default=7.0, help="length of the trace in days (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed; same seed, same fleet (default: %(default)s)")
    parser.add_argument("--step", type=float, default=60.0, help="sampling interval in seconds (default: %(default)s)")
    parser.add_argument("--start", type=_epoch, default=workloads.DEFAULT_START,
                        help="first timestamp, ISO-8601 UTC or epoch seconds (default: workloads.DEFAULT_START)")
    parser.add_argument("--out", required=True, help="bundle directory to write")
    parser.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="file format (default: %(default)s)")
    parser.add_argument("--small-format", choices=("parquet", "csv"),
                        help="format of the files other than samples (default: same as --format)")
    parser.add_argument("--failures", action=argparse.BooleanOptionalAction, default=True,
                        help="plant the five failure modes, ground truth in failures.csv (default: %(default)s)")
    parser.add_argument("--topology", action=argparse.BooleanOptionalAction, default=True,
                        help="give every node its GPU interconnect layout and add the topology nodes and workloads "
                             "(misplaced, spread and pending pods; truth.csv's topology column) (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    fleet = workloads.build_fleet(gpus=args.gpus, seed=args.seed, start=args.start, days=args.days,
                                  failures=args.failures, topology=args.topology)
    counts = write_bundle(fleet, Path(args.out), step=args.step, fmt=args.format,
                          small_fmt=args.small_format or args.format)
    print(f"wrote {args.out}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    return 0


def write_bundle(fleet: workloads.Fleet, out: Path, *, step: float = 60.0, fmt: str = "parquet",
                 small_fmt: str | None = None) -> dict[str, int]:
    """Write every bundle file, truth.csv and failures.csv for ``fleet``; returns rows per file."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    small_fmt = small_fmt or fmt
    small = {"devices": devices_frame(fleet), "pods": pods_frame(fleet, fmt=small_fmt), "prices": prices_frame(),
             "teams": teams_frame(), "nodes": nodes_frame(fleet), "pod_status": pod_status_frame(fleet, fmt=small_fmt),
             "health": health_frame(fleet, fmt=small_fmt), "topology": topology_frame(fleet)}
    if fleet.processes:  # the simulator models processes only where a failure mode plants them
        small["processes"] = processes_frame(fleet, fmt=small_fmt)
    small["scheduler_pending"] = scheduler_pending_frame(fleet, fmt=small_fmt)
    for name, frame in small.items():
        _write_small(frame, out / f"{name}.{small_fmt}")
    pd.DataFrame(fleet.truth, columns=list(TRUTH_COLUMNS)).to_csv(out / "truth.csv", index=False)
    failures = pd.DataFrame(fleet.failures, columns=list(workloads.FAILURE_COLUMNS)).astype({"mig_gi_id": "Int64"})
    failures.to_csv(out / "failures.csv", index=False)
    writer = ParquetSink(out / "samples.parquet", _schema()) if fmt == "parquet" else CsvSink(out / "samples.csv")
    with writer:
        for batch in sample_batches(fleet, step=step):
            writer.write(batch)
    return {**{k: len(v) for k, v in small.items()}, "samples": writer.rows, "truth": len(fleet.truth),
            "failures": len(failures)}


MIG_COLUMNS = tuple(c for c in BUNDLE_COLUMNS["devices"] if c.startswith("mig_"))


def devices_frame(fleet: workloads.Fleet):
    """One row per GPU (MIG parents included, docs/architecture.md#data-contract) and one per MIG instance."""
    import pandas as pd

    rows, parents = [], set()
    for device in fleet.devices:
        if device.is_mig and device.gpu_uuid not in parents:
            parents.add(device.gpu_uuid)
            rows.append({**device.bundle_row(), **dict.fromkeys(MIG_COLUMNS)})
        rows.append(device.bundle_row())
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["devices"]))
    for column in (*MIG_COLUMNS, "numa_node"):
        if column != "mig_profile":
            frame[column] = frame[column].astype("Int64")
    return frame


def topology_frame(fleet: workloads.Fleet):
    """One row per GPU pair of each node (empty without topology: unknown, never guessed)."""
    import pandas as pd

    frame = pd.DataFrame(list(fleet.topology), columns=list(BUNDLE_COLUMNS["topology"]))
    return frame.astype({"node": "string", "gpu_uuid": "string", "peer_gpu_uuid": "string", "link": "string",
                         "nvlinks": "Int64"})


def pods_frame(fleet: workloads.Fleet, *, fmt: str):
    import pandas as pd

    frame = pd.DataFrame([p.bundle_row() for p in fleet.pods], columns=list(BUNDLE_COLUMNS["pods"]))
    for column in ("start_ts", "end_ts"):
        frame[column] = _stamps(frame[column], fmt=fmt)
    return frame


def pod_status_frame(fleet: workloads.Fleet, *, fmt: str):
    """Every pod's state changes (planted pods' too, and the Pending pods the pods file lacks)."""
    import pandas as pd

    frame = pd.DataFrame(list(fleet.pod_status), columns=list(BUNDLE_COLUMNS["pod_status"]))
    for column in ("ts", "created_ts", "scheduled_ts"):
        frame[column] = _stamps(frame[column], fmt=fmt)
    return frame.astype({"restarts": "Int64", "last_exit_code": "Int64", "gpu_request": "float64",
                         "unschedulable": "Int64", "gpu_resource": "string", "node_selector": "string"})


def health_frame(fleet: workloads.Fleet, *, fmt: str):
    import pandas as pd

    frame = pd.DataFrame(list(fleet.health), columns=list(BUNDLE_COLUMNS["health"]))
    frame["ts"] = _stamps(frame["ts"], fmt=fmt)
    return frame.astype({"node": "string", "gpu_uuid": "string", "kind": "string", "code": "Int64"})


QUEUE_TICK = 300.0  # the simulated Kueue's pending gauge, one value per 5 minutes


def scheduler_pending_frame(fleet: workloads.Fleet, *, fmt: str):
    """What Kueue's ``kueue_pending_workloads{cluster_queue, status="active"}`` would have read: per 5-minute
    tick, the pods Pending with a GPU request, per ClusterQueue (one per GPU product the pods select, else
    "default"); a pod is Pending from its Pending row to its next state change (or the window's end)."""
    import json

    import numpy as np
    import pandas as pd

    by_pod: dict[tuple, list[dict]] = {}
    for row in fleet.pod_status:
        by_pod.setdefault((row["namespace"], row["pod"]), []).append(row)
    ticks = np.arange(np.ceil(fleet.start / QUEUE_TICK) * QUEUE_TICK, fleet.end, QUEUE_TICK)
    counts: dict[str, np.ndarray] = {}
    for rows in by_pod.values():
        rows = sorted(rows, key=lambda r: r["ts"])
        for row, after in zip(rows, [*rows[1:], None], strict=True):
            if row["phase"] != "Pending" or not row.get("gpu_request"):
                continue
            selector = json.loads(row["node_selector"]) if row.get("node_selector") else {}
            queue = "gpu-" + selector[GPU_PRODUCT_LABEL].lower() if GPU_PRODUCT_LABEL in selector else "default"
            until = after["ts"] if after is not None else fleet.end
            counts.setdefault(queue, np.zeros(len(ticks)))[(ticks >= row["ts"]) & (ticks < until)] += 1
    rows = [(t, "kueue", queue, None, "active", "workloads", v)
            for queue, values in sorted(counts.items()) for t, v in zip(ticks.tolist(), values.tolist(), strict=True)]
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["scheduler_pending"]))
    frame["ts"] = _stamps(frame["ts"].astype(float), fmt=fmt)
    return frame.astype({"scheduler": "string", "queue": "string", "job": "string", "status": "string",
                         "unit": "string", "pending": "float64"})


def processes_frame(fleet: workloads.Fleet, *, fmt: str):
    import pandas as pd

    frame = pd.DataFrame(list(fleet.processes), columns=list(BUNDLE_COLUMNS["processes"]))
    frame["ts"] = _stamps(frame["ts"], fmt=fmt)
    return frame.astype({"node": "string", "gpu_uuid": "string", "mig_gi_id": "Int64", "pid": "Int64",
                         "pod_uid": "string", "in_pod": "Int64"})


def _stamps(column, *, fmt: str):
    """Epoch seconds as UTC timestamps (Parquet) or ISO-8601 text to the second (CSV); NaN stays empty."""
    import pandas as pd

    stamps = pd.to_datetime(column.astype(float), unit="s", utc=True)
    return stamps.dt.strftime("%Y-%m-%dT%H:%M:%SZ").where(stamps.notna(), None) if fmt == "csv" else stamps


def prices_frame():
    import pandas as pd

    rows = [(model, usd, None) for model, usd in sorted(workloads.PRICES_USD_PER_GPU_HOUR.items())]
    return pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["prices"]))


def nodes_frame(fleet: workloads.Fleet):
    """Each node's labels (kube-state-metrics names): its instance type, on-demand capacity, and GPU
    Feature Discovery's GPU product (what pending pods' node selectors name)."""
    import json

    import pandas as pd

    models = {d.node: d.gpu_model for d in fleet.devices}
    rows = [(node, json.dumps({"karpenter_sh_capacity_type": "on-demand",
                               "node_kubernetes_io_instance_type": workloads.INSTANCE_TYPES[models[node]],
                               GPU_PRODUCT_LABEL: gpu_product(models[node])},
                              sort_keys=True)) for node in fleet.nodes()]
    return pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["nodes"]))


def teams_frame():
    """Each team's namespaces (its notebooks namespace too), for pods that carry no team label."""
    import pandas as pd

    rows = [(namespace, team) for team, namespaces in sorted(workloads.TEAMS.items())
            for namespace in (*namespaces, workloads.notebooks_namespace(team))]
    return pd.DataFrame(sorted(set(rows)), columns=list(BUNDLE_COLUMNS["teams"]))


def sample_batches(fleet: workloads.Fleet, *, step: float, rows: int = ROW_GROUP_ROWS):
    """pyarrow tables of about ``rows`` samples each, segment by segment."""
    import pyarrow as pa

    grid = np.arange(fleet.start, fleet.end, step)
    parts, pending = [], 0
    for segment, ts, values in workloads.iter_samples(fleet, grid):
        parts.append(_segment_table(fleet, segment, ts, values))
        pending += len(ts)
        if pending >= rows:
            yield _one_dictionary(pa.concat_tables(parts))
            parts, pending = [], 0
    if parts:
        yield _one_dictionary(pa.concat_tables(parts))


def _one_dictionary(table):
    """One dictionary per text column: Parquet then dictionary-encodes it (a segment's own one-value
    dictionaries make the writer fall back to plain strings, 30x larger to decode)."""
    return table.unify_dictionaries().combine_chunks()


def _segment_table(fleet, segment, ts: np.ndarray, values: dict):
    import pyarrow as pa

    device = fleet.devices[segment.device]
    pod = None if segment.pod is None else fleet.pods[segment.pod]
    text = {"node": device.node, "gpu_uuid": device.gpu_uuid, "namespace": pod and pod.namespace,
            "pod": pod and pod.pod, "container": pod and pod.container}
    n = len(ts)
    columns = {"ts": pa.array((ts * 1000).astype("int64"), pa.timestamp("ms", tz="UTC"))}
    for name in BUNDLE_COLUMNS["samples"][1:]:
        if name in _TEXT:
            columns[name] = _repeat(text[name], n)
        elif name == "mig_gi_id":
            columns[name] = pa.array(np.full(n, device.mig_gi_id if device.is_mig else 0, dtype=np.int32),
                                     mask=np.full(n, not device.is_mig))
        else:
            columns[name] = pa.array(values[name], pa.float64(), from_pandas=True)
    return pa.table(columns, schema=_schema())


def _repeat(value: str | None, n: int):
    """``value`` n times as a dictionary array (one string, no copies); None = all NULL."""
    import pyarrow as pa

    if value is None:
        return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    return pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), pa.array([value], pa.string()))


def _schema():
    import pyarrow as pa

    text = pa.dictionary(pa.int32(), pa.string())
    fields = [("ts", pa.timestamp("ms", tz="UTC"))]
    for name in BUNDLE_COLUMNS["samples"][1:]:
        fields.append((name, text if name in _TEXT else pa.int32() if name == "mig_gi_id" else pa.float64()))
    return pa.schema(fields)


def _epoch(text: str) -> float:
    """Epoch seconds from ``1794182400`` or ``2026-11-09T00:00:00Z`` (gpuwatch.units' one time parser)."""
    try:
        return float(text)
    except ValueError:
        return units.parse_utc(text, what="--start").replace(tzinfo=UTC).timestamp()


def _write_small(frame, path: Path) -> None:
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
