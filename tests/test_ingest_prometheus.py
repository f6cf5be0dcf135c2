"""Ingest from a REAL Prometheus (Debian's 2.42, tests/support/prometheus.py) through ``fetch``.

The TSDB is backfilled with ``promtool tsdb create-blocks-from openmetrics`` from files written
here for a small deterministic fleet (gpuwatch.fleet, seed 2, 3 nodes, 4 h of 1-minute data):
- gpu-node-000 and gpu-node-002 (MIG): exactly what ``gpuwatch export --source simulate`` serves
  (gpuwatch.exporter.collector.families_at, rendered by the exporter's own OpenMetrics writer):
  DCGM names, lower-case ``hostname``, pod labels, gpuwatch_* series; gpu-node-002 in dcgm-exporter
  4.9's naming and units (``DCGM_FI_DEV_GPU_UTIL_RATIO`` as a ratio, ``*_BYTES`` in bytes), as a
  cluster part-way through an upgrade serves it;
- gpu-node-001: dcgm-exporter <= 4.5.3 scraped with ``honorLabels: false`` — ``Hostname``,
  ``exported_pod/namespace/container`` and the exporter pod's own target labels, no gpuwatch_*;
- kube-state-metrics series for every pod (gpuwatch.ingest.openmetrics.ksm_families).
The frames must equal the generator's values (within the exporter's rounding: GPU_UTIL is an
integer %, NVLink an integer B/s and absent on MIG instances). Chunked and sharded reads must
give exactly the rows of one big query. A stand-in HTTP server (a broken Prometheus, the only
fake here) checks retries, ``status: error`` and truncated JSON.
"""

from __future__ import annotations

import http.server
import json
import threading
from datetime import UTC, datetime
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params as analysis_params
from gpuwatch.fleet import build_fleet, iter_samples
from gpuwatch.fleet import command as simulate
from gpuwatch.ingest import openmetrics, prometheus
from gpuwatch.sources import simulate_extra
from tests.support.prometheus import backfill, running

pytestmark = pytest.mark.slow
STEP = 60.0
MIB = 1 << 20
DCGM_STYLE_NODE = "gpu-node-001"
NAMING_49_NODE = "gpu-node-002"
TARGET = {"pod": "nvidia-dcgm-exporter-7xq2k", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter",
          "instance": "10.0.1.5:9400", "job": "nvidia-dcgm-exporter"}


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=24, seed=2, days=1)


@pytest.fixture(scope="module")
def window(fleet):
    start = fleet.start + 12 * 3600
    return start, start + 4 * 3600


@pytest.fixture(scope="module")
def prom(fleet, window, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom")
    grid = np.arange(window[0] - 600, window[1] + 600, STEP)  # a margin either side of the window
    files = {"exporter.om": _exporter_families(fleet, grid), "ksm.om": None}
    for name, families in files.items():
        path = tmp / name
        if families is None:
            openmetrics.write(path, openmetrics.ksm_families(_pods(fleet), grid))
        else:
            from gpuwatch.exporter.exposition import render

            path.write_bytes(render(families, openmetrics=True))
        backfill(path, tmp / "tsdb")
    with running(tmp, tsdb=tmp / "tsdb") as server:
        yield server


def _exporter_families(fleet, grid):
    """The exporter's families at every grid instant, merged per family; node 1 as dcgm-exporter."""
    from prometheus_client.metrics_core import Metric
    from prometheus_client.samples import Sample

    from gpuwatch.exporter.collector import families_at
    from gpuwatch.exporter.families import Options

    merged: dict[str, Metric] = {}
    for node in fleet.nodes():
        dcgm = node == DCGM_STYLE_NODE
        for t in grid:
            for family in families_at(fleet, float(t), node=node, timestamp=float(t),
                                      options=Options(hostname_label="Hostname" if dcgm else "hostname",
                                                      naming="4.9" if node == NAMING_49_NODE else "4.8")):
                if dcgm and not family.name.startswith("DCGM_"):
                    continue  # dcgm-exporter has no gpuwatch_* series
                out = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                scrape = {"instance": f"{node}:9400", "job": "gpuwatch-exporter"}  # the target's labels
                out.samples.extend(Sample(s.name, _as_dcgm_exporter(s.labels) if dcgm else s.labels | scrape, s.value,
                                          s.timestamp) for s in family.samples)
    return list(merged.values())


def _as_dcgm_exporter(labels: dict) -> dict:
    """honorLabels false: the workload moves to exported_*, the target's own labels are attached."""
    out = {k: v for k, v in labels.items() if k not in ("pod", "namespace", "container")}
    if "pod" in labels:
        out |= {f"exported_{k}": labels[k] for k in ("pod", "namespace", "container")}
    return out | TARGET


def _pods(fleet) -> pd.DataFrame:
    return pd.DataFrame([p.bundle_row() for p in fleet.pods])


def _expected_samples(fleet, window) -> pd.DataFrame:
    grid = np.arange(window[0], window[1], STEP)
    parts = []
    for segment, ts, cols in iter_samples(fleet, grid):
        d, pod = fleet.devices[segment.device], None if segment.pod is None else fleet.pods[segment.pod]
        frame = pd.DataFrame(cols | {"t": ts})
        frame = frame.assign(node=d.node, gpu_uuid=d.gpu_uuid, mig_gi_id=d.mig_gi_id,
                             pod=pod.pod if pod else None, namespace=pod.namespace if pod else None,
                             container=pod.container if pod else None)
        if d.is_mig:  # the exporter reads NVLink per GPU, never per MIG instance
            frame[["nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second"]] = np.nan
        parts.append(frame)
    return _with_mig_board_power(fleet, pd.concat(parts, ignore_index=True))


def _with_mig_board_power(fleet, frame: pd.DataFrame) -> pd.DataFrame:
    """A MIG instance's power is its GPU's board power (the simulate source's mig_power_w of the GPU's
    instances at that instant), as DCGM serves it on every instance."""
    devices = {(d.gpu_uuid, d.mig_gi_id): d for d in fleet.devices}
    mig = frame["mig_gi_id"].notna()
    for (_t, _uuid), rows in frame[mig].groupby(["t", "gpu_uuid"]):
        instances = [(devices[(r.gpu_uuid, int(r.mig_gi_id))], {"sm_active": r.sm_active,
                      "gr_engine_active": r.gr_engine_active}) for r in rows.itertuples()]
        frame.loc[rows.index, "power_watts"] = simulate_extra.mig_power_w(instances)
    return frame


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    if "t" not in out:
        out["t"] = (out["ts"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    out["mig_gi_id"] = out["mig_gi_id"].astype("Int64").astype(str)
    out["pod"] = out["pod"].fillna("-")
    return out.set_index(["t", "node", "gpu_uuid", "mig_gi_id", "pod"]).sort_index()


@pytest.fixture(scope="module")
def fetched(prom, window):
    return prometheus.fetch(prom.url, start=window[0], end=window[1], step=STEP)


def test_samples_equal_the_generators_values(fleet, window, fetched):
    got, want = _keyed(fetched["samples"]), _keyed(_expected_samples(fleet, window))
    assert list(got.index) == list(want.index)
    assert (got["namespace"].fillna("-") == want["namespace"].fillna("-")).all()
    assert (got["container"].fillna("-") == want["container"].fillna("-")).all()
    tolerance = {"gpu_util": 0.0051, "nvlink_tx_bytes_per_second": 1.0, "nvlink_rx_bytes_per_second": 1.0}
    for column in ("gpu_util", "gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
                   "fb_used_bytes", "power_watts", "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second"):
        a, b = got[column].to_numpy(dtype=float), want[column].to_numpy(dtype=float)
        assert (np.isnan(a) == np.isnan(b)).all(), column
        np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], atol=tolerance.get(column, 1e-6), err_msg=column)


def test_both_label_generations_attribute_pods(fetched):
    samples = fetched["samples"]
    old = samples[samples["node"] == DCGM_STYLE_NODE]
    assert old["pod"].notna().any(), "exported_pod must be read as the workload"
    assert TARGET["pod"] not in set(samples["pod"].dropna()), "the exporter's own pod is not a workload"
    util = samples["gpu_util"].dropna()
    assert util.between(0, 1).all() and util.max() > 0.9, "GPU_UTIL % must arrive as a 0-1 ratio"
    assert samples["fb_used_bytes"].max() > 1 << 30, "FB_USED MiB must arrive as bytes"


def test_both_naming_generations_arrive_in_base_units(prom, window, fetched):
    """gpu-node-002 served only 4.9 names (ratio, bytes), the others only 4.8 ones (%, MiB): the
    readers convert each from its own generation's unit, so both land in the same ratio and bytes."""
    names = set(prometheus.Client(prom.url).values("__name__", match='{__name__=~"DCGM_FI_.*"}',
                                                    start=window[0], end=window[1]))
    assert {"DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_BOARD_POWER_WATTS"} <= names
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"} <= names
    samples = fetched["samples"]
    for node in (NAMING_49_NODE, "gpu-node-000"):
        mine = samples[samples["node"] == node]
        assert mine["gpu_util"].dropna().between(0, 1).all() and mine["gpu_util"].max() > 0.5, node
        assert mine["fb_used_bytes"].max() > 1 << 30, node
        assert mine["power_watts"].notna().any(), node


def test_devices_match_the_fleet(fleet, fetched):
    got = fetched["devices"].set_index(["gpu_uuid", "mig_gi_id"]).sort_index()
    want = simulate.devices_frame(fleet).set_index(["gpu_uuid", "mig_gi_id"]).sort_index()
    assert list(got.index) == list(want.index)  # MIG parents included, as in the simulator's bundle
    parents = got.index.get_level_values("mig_gi_id").isna() & got.index.get_level_values("gpu_uuid").isin(
        [d.gpu_uuid for d in fleet.devices if d.is_mig])
    assert got.loc[parents, "fb_total_bytes"].isna().all()  # a MIG GPU is reported per instance only
    got, want = got[~parents], want[~parents]
    for column in ("node", "gpu_index", "gpu_model", "mig_profile"):
        assert got[column].fillna("-").tolist() == want[column].fillna("-").tolist(), column
    for column in ("mig_profile_id", "mig_placement_start", "mig_placement_size"):
        assert got[column].astype(str).tolist() == want[column].astype("Int64").astype(str).tolist(), column
    # DCGM reports memory in whole MiB: a 4/8 slice of an 81559 MiB H100 is 40779 MiB, not 40779.5
    np.testing.assert_allclose(got["fb_total_bytes"].astype(float), want["fb_total_bytes"].astype(float), atol=MIB)


def test_pods_match_kube_state_metrics(fleet, window, fetched):
    got = fetched["pods"].set_index(["namespace", "pod"]).sort_index()
    live = [p for p in fleet.pods if p.start_ts < window[1] and (p.end_ts is None or p.end_ts > window[0])]
    assert sorted(got.index) == sorted((p.namespace, p.pod) for p in live)
    for p in live:
        row = got.loc[(p.namespace, p.pod)]
        assert (row.pod_uid, row.node, row.gpu_resource, row.gpu_count) == (p.pod_uid, p.node, p.gpu_resource, p.gpu_count)
        assert (row.owner_kind, row.owner_name, row.team, row.priority_class) == (
            p.owner_kind or None, p.owner_name or None, p.team or None, p.priority_class or None)
        assert json.loads(row.labels) == dict(p.labels)  # every pod label, by the name KSM gives it
        assert row.start_ts.timestamp() == round(p.start_ts)  # KSM times are whole seconds
        ended = p.end_ts is not None and p.end_ts < window[1]
        if ended:
            assert row.end_ts.timestamp() == round(p.end_ts), p.pod
        else:
            assert pd.isna(row.end_ts), p.pod
        assert set(row.device_ids.split(",")) == set(p.device_ids)


@pytest.mark.parametrize("analysis", ["idle_hoarding", "false_utilization"])
def test_findings_on_ingested_data_equal_those_on_the_bundle(fleet, window, fetched, tmp_path, analysis):
    bundle = tmp_path / "bundle"
    simulate.write_bundle(fleet, bundle)
    from_bundle, from_prom = store.connect(None), store.connect(None)
    store.load_bundle(from_bundle, bundle)
    store.load(from_prom, fetched | {"prices": simulate.prices_frame()}, source="prometheus")
    params = analysis_params(datetime.fromtimestamp(window[0], UTC), datetime.fromtimestamp(window[1], UTC))
    want = analyses.run(from_bundle, analysis, **params)
    got = analyses.run(from_prom, analysis, **params)
    assert len(want) > 0
    got, want = (f.sort_values(["namespace", "pod"]).reset_index(drop=True) for f in (got, want))
    columns = list(analyses.header(analysis).columns[:9])
    # GPU_UTIL is an integer % on the wire: a mean of (reported - effective) may move by < 0.5 points
    rounded = [c for c in columns if c in ("mean_gap", "gap_cost_usd", "mean_reported")]
    exact = [c for c in columns if c not in rounded]
    pd.testing.assert_frame_equal(got[exact], want[exact], check_dtype=False, atol=1e-6)
    pd.testing.assert_frame_equal(got[rounded], want[rounded], check_dtype=False, atol=0.005, rtol=0.01)


def test_chunked_and_sharded_reads_equal_one_big_query(prom, window, fetched):
    small = prometheus.fetch(prom.url, start=window[0], end=window[1], step=STEP, chunk=37 * 60, nodes_per_query=1)
    for name in ("samples", "devices", "pods"):
        pd.testing.assert_frame_equal(small[name], fetched[name], check_like=False)


def test_chunks_cover_the_grid_once_and_respect_the_point_limit():
    start, step = 1_000_000.0, 15.0
    chunks = prometheus.time_chunks(start, start + 86400 * 3, step=step, chunk=86400 * 7)
    points = np.concatenate([np.arange(a, b + step / 2, step) for a, b in chunks])
    assert (points == start + step * np.arange(86400 * 3 / step)).all()
    assert max((b - a) / step + 1 for a, b in chunks) <= prometheus.MAX_POINTS


def test_a_rejected_query_names_prometheus_error(prom, window):
    client = prometheus.Client(prom.url)
    with pytest.raises(prometheus.PrometheusError, match="11,000 points"):
        client.query_range("up", window[0], window[0] + 11_001 * 1.0, 1.0)
    with pytest.raises(prometheus.PrometheusError, match="bad_data"):
        client.query_range("sum(", window[0], window[1], STEP)


def test_missing_profiling_series_is_a_documented_skip(prom, window):
    frames = prometheus.fetch(prom.url, start=window[0], end=window[0] + 600, step=STEP)
    assert not any("SM_ACTIVE" in note for note in frames["samples"].attrs["notes"])
    empty = prometheus.fetch(prom.url, start=1.0e9, end=1.0e9 + 600, step=STEP)
    assert any("no DCGM_FI_PROF_SM_ACTIVE series" in n for n in empty["samples"].attrs["notes"])
    assert empty["samples"].empty


class _Broken(http.server.BaseHTTPRequestHandler):
    """Stand-in for a misbehaving Prometheus: replies from a script, one per request."""

    script: ClassVar[list] = []

    def do_GET(self):
        status, body = self.script.pop(0)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def broken():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Broken.script
    server.shutdown()


def test_retries_5xx_with_backoff_then_succeeds(broken):
    url, script = broken
    ok = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"b"},"values":[[1,"NaN"],[2,"3"]]}]}}'
    script[:] = [(503, b"upstream down"), (502, b""), (200, ok)]
    waits: list[float] = []
    client = prometheus.Client(url, sleep=waits.append)
    [(labels, ts, values)] = client.query_range("x", 1, 2, 1)
    assert waits == [0.5, 1.0] and labels == {"a": "b"} and list(ts) == [1, 2]
    assert np.isnan(values[0]) and values[1] == 3


def test_gives_up_after_retries_and_reports_truncated_json(broken):
    url, script = broken
    script[:] = [(503, b"")] * 5
    with pytest.raises(prometheus.PrometheusError, match="HTTP 503"):
        prometheus.Client(url, sleep=lambda s: None).query_range("x", 1, 2, 1)
    script[:] = [(200, b'{"status":"success","data":{"resultType":"matrix","resu')]
    with pytest.raises(prometheus.PrometheusError, match="truncated or invalid JSON"):
        prometheus.Client(url).query_range("x", 1, 2, 1)
    script[:] = [(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')]
    with pytest.raises(prometheus.PrometheusError, match="expected a matrix"):
        prometheus.Client(url).query_range("x", 1, 2, 1)


def test_live_exporter_scraped_by_prometheus_then_ingested(tmp_path):
    """(b) live: ``gpuwatch export --source simulate`` scraped every second, then ``fetch``."""
    import subprocess
    import sys
    import time

    from tests.support.prometheus import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-gpus", "24",
           "--simulate-seed", "2", "--simulate-kubelet", "--listen", f"127.0.0.1:{port}", "--interval", "1s"]
    exporter = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with running(tmp_path, targets=[f"127.0.0.1:{port}"], interval="1s") as server:
            server.wait_for("gpuwatch_gpu_allocation_info", timeout=60)
            began = time.time()
            time.sleep(6)
            frames = prometheus.fetch(server.url, start=began, end=time.time(), step=1.0)
    finally:
        exporter.terminate()
        exporter.wait(timeout=10)
    fleet = build_fleet(gpus=24, seed=2, days=7, topology=True)  # the exporter's default fleet span and layouts
    devices = frames["devices"]
    instances = devices[devices.mig_gi_id.notna()]
    assert set(devices.gpu_uuid) == {d.gpu_uuid for d in fleet.devices}
    assert len(instances) == sum(d.is_mig for d in fleet.devices)
    placements = {(d.gpu_uuid, d.mig_gi_id): (d.mig_profile_id, d.mig_placement_start, d.mig_placement_size)
                  for d in fleet.devices if d.is_mig}
    assert {(r.gpu_uuid, r.mig_gi_id): (r.mig_profile_id, r.mig_placement_start, r.mig_placement_size)
            for r in instances.itertuples()} == placements
    samples = frames["samples"]
    assert samples.gpu_util.dropna().between(0, 1).all() and len(samples.ts.unique()) >= 3
    # the GPU links the exporter serves (gpuwatch_gpu_link_info, both directions) are the fleet's layouts,
    # between GPUs not in MIG mode (a MIG-enabled GPU is never a whole-GPU block)
    mig = {d.gpu_uuid for d in fleet.devices if d.is_mig}
    served = {(r.node, frozenset((r.gpu_uuid, r.peer_gpu_uuid)), r.link, r.nvlinks if r.link == "NV" else None)
              for r in frames["topology"].itertuples()}
    assert served == {(t["node"], frozenset((t["gpu_uuid"], t["peer_gpu_uuid"])), t["link"], t["nvlinks"])
                      for t in fleet.topology if not {t["gpu_uuid"], t["peer_gpu_uuid"]} & mig}
    pods = frames["pods"]
    known = {(p.namespace, p.pod): p for p in fleet.pods}
    assert len(pods) > 0 and all((r.namespace, r.pod) in known for r in pods.itertuples())
    for r in pods.itertuples():  # allocation_info + mig_instance_info give the kubelet's exact device ids
        assert set(r.device_ids.split(",")) == set(known[(r.namespace, r.pod)].device_ids)


def _one(name: str, labels: dict, value: float, t: float = 100.0):
    from gpuwatch.ingest.promframes import Series

    return Series(name, labels, np.array([t]), np.array([value]))


def test_time_sliced_gpus_count_one_over_the_replicas_from_gpu_feature_discovery():
    from gpuwatch.ingest.promframes import Context, build

    gpu = {"gpu": "0", "UUID": "GPU-1", "hostname": "n1", "pod": "p", "namespace": "ns", "container": "c"}
    pod = {"namespace": "ns", "pod": "p", "uid": "u"}
    series = [_one("DCGM_FI_DEV_GPU_UTIL", gpu, 50),
              _one("kube_pod_container_resource_requests", pod | {"resource": "nvidia_com_gpu_shared"}, 1),
              _one("kube_pod_info", pod | {"node": "n1"}, 1)]
    labels = _one("kube_node_labels", {"node": "n1", "label_nvidia_com_gpu_replicas": "4"}, 1)
    assert build([*series, labels], Context())["pods"].gpu_count.tolist() == [0.25]
    assert build([*series, labels], Context(shared_replicas=2))["pods"].gpu_count.tolist() == [0.5]
    frames = build(series, Context())  # nothing says how many replicas: whole GPU, and a note
    assert frames["pods"].gpu_count.tolist() == [1.0]
    assert any("count as whole GPUs" in n for n in frames["samples"].attrs["notes"])


@pytest.mark.parametrize(("ksm", "resource"), [
    ("nvidia_com_gpu", "nvidia.com/gpu"), ("nvidia_com_gpu_shared", "nvidia.com/gpu.shared"),
    ("nvidia_com_mig_1g_10gb", "nvidia.com/mig-1g.10gb"), ("nvidia_com_mig_1g_10gb_me", "nvidia.com/mig-1g.10gb.me"),
    ("nvidia_com_mig_3g_40gb", "nvidia.com/mig-3g.40gb"), ("nvidia_com_a100", "nvidia.com/a100")])
def test_kube_state_metrics_resource_names_map_back(ksm, resource):
    from gpuwatch.ingest.openmetrics import ksm_resource
    from gpuwatch.ingest.promframes_pods import resource_name

    assert resource_name(ksm) == resource and ksm_resource(resource) == ksm


def test_gpuwatch_ingest_from_prometheus_url(prom, window, fetched, tmp_path):
    """``gpuwatch ingest --from prometheus://HOST:PORT`` goes through ``fetch`` into the store."""
    from gpuwatch import cli

    db = tmp_path / "gw.duckdb"
    iso = [datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in window]
    url = prom.url.replace("http://", "prometheus://")
    assert cli.main(["ingest", "--from", url, "--db", str(db), "--start", iso[0], "--end", iso[1], "--step", "60s"]) == 0
    con = store.connect(str(db), read_only=True)
    counts = [con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("samples", "devices", "pods")]
    con.close()
    assert counts == [len(fetched["samples"]), len(fetched["devices"]), len(fetched["pods"])]
