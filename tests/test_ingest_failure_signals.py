"""The failure-mode signals, collected and ingested: driver versions, pod states, GPU health events.

- Exporter: ``gpuwatch_driver_info{hostname, driver_version, cuda_driver_version} 1`` from the nvml
  source (FAKE pynvml at the NVML boundary: ``nvmlSystemGetCudaDriverVersion_v2`` -> 12040), the dcgm
  source (stand-in bindings: global field 5, DCGM_FI_CUDA_DRIVER_VERSION) and the simulate source;
  an unknown version is an absent label, never a made-up one.
- Ingest (gpuwatch.ingest.promfile on ``.prom`` pages written here, with millisecond timestamps):
  kube-state-metrics series in every label generation accepted (KSM 2.7+, 2.0-2.6 without the
  exit-code family, 1.9 with 0/1 per reason and ``<none>`` owners, ``exported_*`` under
  ``honorLabels: false``) -> exactly the expected ``pod_status`` change rows, and the job-key
  precedence; exporter series (4.8 and 4.9 names, ``err_code`` labels, MIG copies) -> exactly the
  expected ``health`` events; the devices' driver and CUDA versions. NaN is missing, never 0.
- End to end (slow): a REAL Prometheus backfilled by promtool from an OpenMetrics file
  (gpuwatch.ingest.openmetrics.ksm_status_families for the pod states), read by
  gpuwatch.ingest.prometheus.fetch, loaded into the store and read back from stg_pod_status/stg_health.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exposition import render
from gpuwatch.exporter.families import Options
from gpuwatch.ingest import openmetrics, promfile
from gpuwatch.ingest.promframes_status import pod_status_frame
from gpuwatch.ingest.series import Context, Series, target_pods
from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.sources import SourceOptions, dcgm, nvml
from tests.conftest import FIXTURES, ROOT
from tests.fakes.fake_pynvml import FakeNvml

T0 = 1_794_182_400.0  # 2026-11-09T00:00:00Z
STEP = 60.0
STATUS = list(BUNDLE_COLUMNS["pod_status"])
GPU = 'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{uuid}",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",{host}="{node}"{extra}}} 0 {ms}'


def _ms(k: int) -> int:
    return int((T0 + k * STEP) * 1000)


def _driver_info(families) -> list[str]:
    return [line for line in render(families).decode().splitlines() if line.startswith("gpuwatch_driver_info{")]


# --- exporter --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cuda", "line"), [
    (12040, 'gpuwatch_driver_info{Hostname="n1",driver_version="590.48.01",cuda_driver_version="12.4"} 1'),
    (None, 'gpuwatch_driver_info{Hostname="n1",driver_version="590.48.01"} 1'),  # NVML cannot say: label absent
])
def test_nvml_source_serves_driver_info(cuda, line):
    scenario = json.loads((FIXTURES / "nvml" / "h100.json").read_text()) | {"cuda_driver_version": cuda}
    source = nvml.open_source(SourceOptions(node="n1"), nvml=FakeNvml(scenario))
    snap = source.read(T0)
    assert (snap.driver_version, snap.cuda_driver_version) == ("590.48.01", None if cuda is None else "12.4")
    collector = ExporterCollector(source, clock=lambda: T0, options=Options(hostname_label="Hostname"))
    assert _driver_info(collector.collect()) == [line]


@pytest.fixture
def dcgm_bindings():
    mods = dcgm.load_bindings(str(ROOT / "tests" / "fakes" / "dcgm"))
    import _fake_state

    return mods, _fake_state


def test_dcgm_source_serves_driver_info_from_global_field_5(dcgm_bindings):
    mods, state = dcgm_bindings
    scenario = json.loads((FIXTURES / "dcgm" / "l40s.json").read_text())
    scenario["values"]["1"]["0"]["5"] = 13020  # DCGM's int64: NVML's integer, CUDA 13.2 (driver 595)
    state.load(scenario)
    source = dcgm.open_source(SourceOptions(node="gpu1-wl8sg"), dcgm=mods)
    assert 5 in source.fields
    reading = source.read(T0).readings[0]
    assert 5 not in reading.values and reading.device.cuda_driver_version == "13.2"
    collector = ExporterCollector(source, clock=lambda: T0)
    assert _driver_info(collector.collect()) == [
        'gpuwatch_driver_info{hostname="gpu1-wl8sg",driver_version="595.58.03",cuda_driver_version="13.2"} 1']
    source.close()


def test_dcgm_cuda_version_blank_is_unknown_and_a_lost_gpu_stays_lost():
    blank = 0x7FFFFFFFFFFFFFF0 + 2  # NOT_SUPPORTED
    raw = {"gpus": [{"gpu_id": 0, "uuid": "GPU-a", "pci_bus_id": "", "model": "X"},
                    {"gpu_id": 1, "uuid": "GPU-b", "pci_bus_id": "", "model": "X"}], "instances": [],
           "values": {"1": {"0": {"5": blank, "100": 1410}, "1": {"5": 12040, "100": blank}}}}
    snap = dcgm.parse(raw, node="n")
    assert snap.cuda_driver_version == "12.4"  # the global field, from whichever GPU has it
    assert snap.lost == ("GPU-b",)  # field 5 is the node's: it does not make a lost GPU look alive
    raw["values"]["1"]["1"]["5"] = blank
    assert dcgm.parse(raw, node="n").cuda_driver_version is None


def test_simulate_source_serves_driver_info():
    from gpuwatch.fleet import build_fleet
    from gpuwatch.sources.simulate import SimulatedSource

    fleet = build_fleet(gpus=8, seed=0)
    source = SimulatedSource(fleet, node="gpu-node-000")
    collector = ExporterCollector(source, clock=lambda: fleet.start + 3600)
    assert _driver_info(collector.collect()) == [
        'gpuwatch_driver_info{hostname="gpu-node-000",driver_version="550.127.08",cuda_driver_version="12.4"} 1']


# --- pod_status from kube-state-metrics ------------------------------------------------------------

# The pod's story, one entry per sample k (ts T0 + k min): phase, restarts, last termination
# (reason, exit code), waiting reason; restarts None = no container status yet (Pending, unscheduled).
STORY = [("Pending", None, None, None), ("Running", 0, None, None), ("Running", 1, ("OOMKilled", 137), "CrashLoopBackOff"),
         ("Running", 1, ("OOMKilled", 137), None), ("Failed", 1, ("OOMKilled", 137), None)]
REASONS_19 = {"last_terminated_reason": ("OOMKilled", "Error", "Completed", "ContainerCannotRun"),
              "waiting_reason": ("ContainerCreating", "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff")}
KSM_OWN = {"namespace": "monitoring", "pod": "kube-state-metrics-0", "container": "kube-state-metrics",
           "instance": "10.0.0.9:8080", "job": "kube-state-metrics"}


def _labels(d: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _ksm_page(generation: str) -> str:
    """ml/train-0 (container ``trainer``, 2 GPUs, Kubeflow job ``llm-ft``) through STORY, and
    ml/web-1 (CPU only), as kube-state-metrics ``generation`` serves them, one sample per minute."""
    exported = generation == "exported"
    lines = [GPU.format(uuid="GPU-1", host="Hostname", node="n1", extra="", ms=_ms(0))]

    def add(name, pod, labels, value, k, container=None):
        ident = ({"exported_namespace": "ml", "exported_pod": pod} | KSM_OWN) if exported else {"namespace": "ml", "pod": pod}
        if container is not None:
            ident |= {"exported_container" if exported else "container": container}
        lines.append(f"{name}{_labels(ident | {'uid': 'u-' + pod} | labels)} {value} {_ms(k)}")

    for k, (phase, restarts, last, waiting) in enumerate(STORY):
        for pod in ("train-0", "web-1"):
            for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                add("kube_pod_status_phase", pod, {"phase": p}, int(p == phase), k)
        add("kube_pod_labels", "train-0", {"label_training_kubeflow_org_job_name": "llm-ft"}, 1, k)
        add("kube_pod_owner", "train-0", {"owner_kind": "<none>" if generation == "ksm-1.9" else "", "owner_name": "",
                                          "owner_is_controller": ""}, 1, k)
        add("kube_pod_container_resource_requests", "train-0", {"node": "n1", "resource": "nvidia_com_gpu", "unit": "integer"}, 2, k, "trainer")
        add("kube_pod_container_resource_requests", "train-0", {"node": "n1", "resource": "cpu", "unit": "core"}, 8, k, "trainer")
        add("kube_pod_container_resource_requests", "web-1", {"node": "n1", "resource": "cpu", "unit": "core"}, 1, k, "web")
        add("kube_pod_container_status_restarts_total", "web-1", {}, 0, k, "web")
        if restarts is None:
            continue
        add("kube_pod_container_status_restarts_total", "train-0", {}, restarts, k, "trainer")
        if generation == "ksm-1.9":  # a series per reason, 1 for the current one
            for column, reasons in REASONS_19.items():
                now = {"last_terminated_reason": last and last[0], "waiting_reason": waiting}[column]
                for reason in reasons:
                    add(f"kube_pod_container_status_{column}", "train-0", {"reason": reason}, int(reason == now), k, "trainer")
            continue
        if last:
            add("kube_pod_container_status_last_terminated_reason", "train-0", {"reason": last[0]}, 1, k, "trainer")
            if generation != "ksm-2.0":  # the exit-code family came with KSM 2.7
                add("kube_pod_container_status_last_terminated_exitcode", "train-0", {}, last[1], k, "trainer")
        if waiting:
            add("kube_pod_container_status_waiting_reason", "train-0", {"reason": waiting}, 1, k, "trainer")
    return "\n".join(lines) + "\n"


def _expected_story(*, exit_codes: bool) -> pd.DataFrame:
    rows = [(T0 + k * STEP, "ml", "train-0", "trainer", phase, restarts, last and last[0],
             last[1] if last and exit_codes else None, waiting, "llm-ft", 2.0)
            for k, (phase, restarts, last, waiting) in enumerate(STORY)]
    return _status_frame(rows)


def _status_frame(rows: list[tuple]) -> pd.DataFrame:
    """Change rows (ts .. gpu_request); the pending-demand columns of pods that request nvidia.com/gpu and
    carry no kube_pod_created/scheduled_time/unschedulable/nodeselectors series: unknown but the resource."""
    rows = [(*r, None, None, None, "nvidia.com/gpu" if r[10] is not None else None, None) for r in rows]
    frame = pd.DataFrame(rows, columns=STATUS).astype({"restarts": "Int64", "last_exit_code": "Int64", "gpu_request": float,
                                                       "created_ts": float, "scheduled_ts": float, "unschedulable": "Int64"})
    for column in ("ts", "created_ts", "scheduled_ts"):
        frame[column] = pd.to_datetime(frame[column], unit="s", utc=True)
    for column in ("namespace", "pod", "container", "phase", "last_terminated_reason", "waiting_reason", "job",
                   "gpu_resource", "node_selector"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def _pod_status(frames) -> pd.DataFrame:
    return frames["pod_status"].sort_values(["namespace", "pod", "ts", "container"]).reset_index(drop=True)


@pytest.mark.parametrize(("generation", "exit_codes"), [("ksm-2.7", True), ("ksm-2.0", False), ("ksm-1.9", False),
                                                         ("exported", True)])
def test_ksm_generations_give_exact_change_rows(generation, exit_codes):
    frames = promfile.parse(_ksm_page(generation), at=T0)
    pd.testing.assert_frame_equal(_pod_status(frames), _expected_story(exit_codes=exit_codes))  # web-1: no GPU


def test_nan_is_missing_never_zero():
    page = _ksm_page("ksm-2.7").replace(
        f'kube_pod_container_status_restarts_total{{namespace="ml",pod="train-0",container="trainer",uid="u-train-0"}} 1 {_ms(3)}',
        f'kube_pod_container_status_restarts_total{{namespace="ml",pod="train-0",container="trainer",uid="u-train-0"}} NaN {_ms(3)}')
    got = _pod_status(promfile.parse(page, at=T0))
    np.testing.assert_array_equal(got["restarts"].astype(float), [np.nan, 0, 1, np.nan, 1])


def test_job_key_precedence():
    """Volcano group (annotation or label) > volcano.sh/job-name > Kueue pod group > Kueue workload >
    Kubeflow job > JobSet > the controller owner; none: NULL."""
    pods = {
        "volcano": [("kube_pod_annotations", {"annotation_scheduling_k8s_io_group_name": "pg-a"}),
                    ("kube_pod_labels", {"label_volcano_sh_job_name": "vcjob-a"})],
        "vcjob": [("kube_pod_labels", {"label_volcano_sh_job_name": "vcjob-b"})],
        "kueue": [("kube_pod_labels", {"label_kueue_x_k8s_io_pod_group_name": "group-c"}),
                  ("kube_pod_owner", {"owner_kind": "LeaderWorkerSet", "owner_name": "lws", "owner_is_controller": "true"})],
        "kueue-wl": [("kube_pod_annotations", {"annotation_kueue_x_k8s_io_workload": "job-wl-d"})],
        "kubeflow": [("kube_pod_labels", {"label_training_kubeflow_org_job_name": "pytorch-e",
                                          "label_jobset_sigs_k8s_io_jobset_name": "js-e"})],
        "jobset": [("kube_pod_labels", {"label_jobset_sigs_k8s_io_jobset_name": "js-f", "label_app": "x"})],
        "owner": [("kube_pod_owner", {"owner_kind": "Node", "owner_name": "n1", "owner_is_controller": "false"}),
                  ("kube_pod_owner", {"owner_kind": "Job", "owner_name": "batch-g", "owner_is_controller": "true"})],
        "none": [("kube_pod_owner", {"owner_kind": "", "owner_name": "", "owner_is_controller": ""}),
                 ("kube_pod_labels", {"label_app": "y"})],
    }
    lines = [GPU.format(uuid="GPU-1", host="hostname", node="n1", extra="", ms=_ms(0))]
    for pod, series in pods.items():
        ident = {"namespace": "ml", "pod": pod, "uid": "u"}
        lines += [f"{name}{_labels(ident | labels)} 1" for name, labels in series]
        lines.append(f'kube_pod_container_resource_requests{_labels(ident | {"container": "c", "resource": "nvidia_com_mig_1g_10gb"})} 1')
    got = promfile.parse("\n".join(lines) + "\n", at=T0)["pod_status"].set_index("pod")["job"].to_dict()
    assert got == {"volcano": "pg-a", "vcjob": "vcjob-b", "kueue": "group-c", "kueue-wl": "job-wl-d",
                   "kubeflow": "pytorch-e", "jobset": "js-f", "owner": "Job/batch-g", "none": None}


def test_gpu_request_sums_containers_and_pods_without_status_keep_a_null_container():
    ident = {"namespace": "ml", "pod": "multi", "uid": "u"}
    page = "\n".join([GPU.format(uuid="GPU-1", host="hostname", node="n1", extra="", ms=_ms(0)),
                      f'kube_pod_container_resource_requests{_labels(ident | {"container": "a", "resource": "nvidia_com_gpu"})} 2',
                      f'kube_pod_container_resource_requests{_labels(ident | {"container": "b", "resource": "nvidia_com_gpu"})} 1',
                      f'kube_pod_status_phase{_labels(ident | {"phase": "Pending"})} 1',
                      f'kube_pod_status_phase{_labels(ident | {"phase": "Running"})} 0']) + "\n"
    got = promfile.parse(page, at=T0)["pod_status"]
    assert got[["container", "phase", "gpu_request"]].values.tolist() == [["a", "Pending", 3.0], ["b", "Pending", 3.0]]
    assert got["restarts"].isna().all()  # no container status yet: unknown, not 0


# --- health events from exporter series ------------------------------------------------------------

def _health_page() -> str:
    """n1/GPU-a (whole GPU, dcgm-exporter 4.8 names, Hostname, XID with err_code), n2/GPU-m (MIG:
    every field repeated on GIs 1 and 2, 4.9 names) and n1/GPU-l (gpuwatch_gpu_lost)."""
    a = 'gpu="0",UUID="GPU-a",device="nvidia0",Hostname="n1"'
    xid = [0, 0, 79, 79, "NaN", 79]  # NaN is missing: the 79 after it is no new event
    ecc = [2, 2, 5, 0, 1, 1]  # +3, reset (no event), +1
    remap = [0, 0, 0, 1, 1, 1]
    lines = [GPU.format(uuid=u, host=h, node=n, extra="", ms=_ms(0)) for u, h, n in (("GPU-a", "Hostname", "n1"),
                                                                                   ("GPU-m", "hostname", "n2"))]
    for k in range(6):
        code = 0 if xid[k] in (0, "NaN") else xid[k]
        lines.append(f'DCGM_FI_DEV_XID_ERRORS{{{a},err_code="{code}",err_msg="x"}} {xid[k]} {_ms(k)}')
        lines.append(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{a}}} {ecc[k]} {_ms(k)}")
        lines.append(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{a}}} {remap[k]} {_ms(k)}")
        for gi in (1, 2):
            m = f'gpu="1",UUID="GPU-m",device="nvidia1",GPU_I_PROFILE="3g.40gb",GPU_I_ID="{gi}",hostname="n2"'
            lines.append(f"DCGM_FI_DEV_XID_ERROR{{{m}}} {48 if k < 3 else 63} {_ms(k)}")  # first sample non-zero
            lines.append(f"DCGM_FI_DEV_ROW_REMAP_FAILED{{{m}}} 1 {_ms(k)}")
        if k >= 4:
            lines.append(f'gpuwatch_gpu_lost{{UUID="GPU-l",hostname="n1"}} 1 {_ms(k)}')
    return "\n".join(lines) + "\n"


def _health_frame(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["ts", "node", "gpu_uuid", "kind", "code"]).astype(
        {"node": object, "gpu_uuid": object, "kind": object, "code": "Int64"})
    frame["ts"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    return frame


def test_health_events_exact():
    got = promfile.parse(_health_page(), at=T0)["health"]
    t = [T0 + k * STEP for k in range(6)]
    expected = _health_frame([
        (t[0], "n2", "GPU-m", "row_remap_failure", None),  # 1 on the first sample
        (t[0], "n2", "GPU-m", "xid", 48),  # first sample's non-zero XID, once for both MIG instances
        (t[2], "n1", "GPU-a", "ecc_dbe", 3),
        (t[2], "n1", "GPU-a", "xid", 79),
        (t[3], "n1", "GPU-a", "row_remap_failure", None),
        (t[3], "n2", "GPU-m", "xid", 63),
        (t[4], "n1", "GPU-a", "ecc_dbe", 1),  # after the reset: what the counter restarted from
        (t[4], "n1", "GPU-l", "lost", None),
    ])
    pd.testing.assert_frame_equal(got, expected)


def test_devices_carry_driver_and_cuda_versions():
    lines = [GPU.format(uuid="GPU-1", host="Hostname", node="n1", extra=',DCGM_FI_DRIVER_VERSION="550.127.08"', ms=_ms(0)),
             GPU.format(uuid="GPU-2", host="hostname", node="n2", extra=',DCGM_FI_SYSTEM_DRIVER_VERSION="570.86.15"', ms=_ms(0)),
             GPU.format(uuid="GPU-3", host="hostname", node="n3", extra="", ms=_ms(0)),
             GPU.format(uuid="GPU-4", host="hostname", node="n4", extra="", ms=_ms(0)),
             f'gpuwatch_driver_info{{hostname="n2",driver_version="570.86.15",cuda_driver_version="12.8"}} 1 {_ms(0)}',
             f'gpuwatch_driver_info{{hostname="n4",driver_version="535.183.01"}} 1 {_ms(0)}']
    devices = promfile.parse("\n".join(lines) + "\n", at=T0)["devices"].set_index("node")
    assert devices[["driver_version", "cuda_driver_version"]].to_dict("index") == {
        "n1": {"driver_version": "550.127.08", "cuda_driver_version": None},
        "n2": {"driver_version": "570.86.15", "cuda_driver_version": "12.8"},
        "n3": {"driver_version": None, "cuda_driver_version": None},
        "n4": {"driver_version": "535.183.01", "cuda_driver_version": None}}


# --- end to end through a real Prometheus ----------------------------------------------------------

STEPS = 12


def _e2e_status() -> pd.DataFrame:
    """Change rows on the 1-minute grid: a gang of two (JobSet) whose second pod crash-loops, and a
    Deployment's pod (owner fallback) under honorLabels: false."""
    t = [T0 + k * STEP for k in range(STEPS)]
    return _status_frame([
        (t[0], "nlp", "gang-0", "worker", "Pending", None, None, None, None, "gang", 4.0),
        (t[2], "nlp", "gang-0", "worker", "Running", 0, None, None, None, "gang", 4.0),
        (t[0], "nlp", "gang-1", "worker", "Pending", None, None, None, None, "gang", 4.0),
        (t[3], "nlp", "gang-1", "worker", "Running", 0, None, None, "ContainerCreating", "gang", 4.0),
        (t[5], "nlp", "gang-1", "worker", "Running", 1, "Error", 1, "CrashLoopBackOff", "gang", 4.0),
        (t[8], "nlp", "gang-1", "worker", "Failed", 1, "Error", 1, None, "gang", 4.0),
    ]), _status_frame([
        (t[1], "web", "infer-7d9f-x", "server", "Running", 0, None, None, None, "ReplicaSet/infer-7d9f", 1.0),
        (t[6], "web", "infer-7d9f-x", "server", "Running", 2, "OOMKilled", 137, None, "ReplicaSet/infer-7d9f", 1.0),
    ])


def _e2e_exporter(grid: np.ndarray) -> openmetrics.Families:
    """DCGM series of n1/GPU-a (whole) and n2/GPU-m (MIG, two instances), the health fields, driver info."""
    out: openmetrics.Families = {}
    devices = [("n1", "GPU-a", None), ("n2", "GPU-m", 1), ("n2", "GPU-m", 2)]
    series = {"DCGM_FI_DEV_GPU_UTIL": lambda k: 50.0, "DCGM_FI_DEV_XID_ERRORS": lambda k: 0.0 if k < 4 else 94.0,
              "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda k: 0.0 if k < 7 else 2.0,
              "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda k: float(k >= 9)}
    for node, uuid, gi in devices:
        labels = {"gpu": "0", "UUID": uuid, "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3"}
        labels |= {"GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": str(gi)} if gi is not None else {}
        labels |= {"hostname": node, "DCGM_FI_DRIVER_VERSION": "550.127.08"}
        for name, value in series.items():
            if uuid == "GPU-a" or name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"):
                out.setdefault(name, []).append((labels, grid, np.array([value(k) for k in range(len(grid))])))
    lost = grid >= T0 + 10 * STEP
    out["gpuwatch_gpu_lost"] = [({"UUID": "GPU-b", "hostname": "n1"}, grid[lost], np.ones(lost.sum()))]
    out["gpuwatch_driver_info"] = [({"hostname": node, "driver_version": "550.127.08", "cuda_driver_version": "12.4"},
                                    grid, np.ones(len(grid))) for node in ("n1", "n2")]
    return out


@pytest.mark.slow
def test_real_prometheus_end_to_end(tmp_path):
    from gpuwatch.ingest import prometheus
    from tests.support.prometheus import backfill, running

    grid = T0 + STEP * np.arange(STEPS)
    plain, exported = _e2e_status()
    path = tmp_path / "backfill.om"
    openmetrics.write(path, openmetrics.ksm_status_families(plain, grid, job_label="jobset.sigs.k8s.io/jobset-name"),
                      openmetrics.ksm_status_families(exported, grid, exported=True), _e2e_exporter(grid))
    backfill(path, tmp_path / "tsdb")
    with running(tmp_path, tsdb=tmp_path / "tsdb") as server:
        frames = prometheus.fetch(server.url, start=T0, end=T0 + STEPS * STEP, step=STEP)
    expected = pd.concat([plain, exported]).sort_values(["namespace", "pod", "ts", "container"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(_pod_status(frames), expected)
    t = [T0 + k * STEP for k in range(STEPS)]
    events = _health_frame([(t[4], "n1", "GPU-a", "xid", 94), (t[4], "n2", "GPU-m", "xid", 94),
                            (t[7], "n1", "GPU-a", "ecc_dbe", 2), (t[9], "n1", "GPU-a", "row_remap_failure", None),
                            (t[10], "n1", "GPU-b", "lost", None)])
    pd.testing.assert_frame_equal(frames["health"], events)
    devices = frames["devices"].drop_duplicates("node").set_index("node")
    assert devices[["driver_version", "cuda_driver_version"]].to_dict("index") == {
        n: {"driver_version": "550.127.08", "cuda_driver_version": "12.4"} for n in ("n1", "n2")}

    con = store.connect(None)
    store.load(con, frames, source="prometheus")
    staged = con.execute("SELECT pod, container, phase, restarts, waiting_reason, job, gpu_request, "
                         "epoch(ts) AS ts, epoch(until_ts) AS until FROM stg_pod_status WHERE pod = 'gang-1' "
                         "ORDER BY ts").fetchall()
    assert staged == [("gang-1", "worker", "Pending", None, None, "gang", 4.0, t[0], t[3]),
                      ("gang-1", "worker", "Running", 0, "ContainerCreating", "gang", 4.0, t[3], t[5]),
                      ("gang-1", "worker", "Running", 1, "CrashLoopBackOff", "gang", 4.0, t[5], t[8]),
                      ("gang-1", "worker", "Failed", 1, None, "gang", 4.0, t[8], None)]
    health = con.execute("SELECT epoch(ts), node, gpu_uuid, kind, code FROM stg_health ORDER BY 1, 2, 4").fetchall()
    assert health == [(t[4], "n1", "GPU-a", "xid", 94), (t[4], "n2", "GPU-m", "xid", 94),
                      (t[7], "n1", "GPU-a", "ecc_dbe", 2), (t[9], "n1", "GPU-a", "row_remap_failure", None),
                      (t[10], "n1", "GPU-b", "lost", None)]


def test_status_writer_round_trips_through_the_reader():
    """ksm_status_families (the test writer) and the reader agree, without a server: the series it
    writes, read back as promframes would get them from Prometheus, give the same change rows."""
    grid = T0 + STEP * np.arange(STEPS)
    for status, exported in zip(_e2e_status(), (False, True), strict=True):
        families = openmetrics.ksm_status_families(status, grid, exported=exported, exitcode=True)
        series = [Series(name, labels, ts, values) for name, items in families.items() for labels, ts, values in items]
        got = pod_status_frame(series, Context(target_pods=target_pods(series)))
        for column in ("ts", "created_ts", "scheduled_ts"):
            got[column] = pd.to_datetime(got[column], unit="s", utc=True)
        pd.testing.assert_frame_equal(got.sort_values(["pod", "ts"]).reset_index(drop=True),
                                      status.sort_values(["pod", "ts"]).reset_index(drop=True))
