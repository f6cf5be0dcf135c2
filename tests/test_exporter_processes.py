"""gpuwatch_process_memory_bytes: each GPU compute process's memory and the pod its cgroup names, and
``-f`` on the nvml source.

The GPU side is the fake pynvml (tests/fakes/fake_pynvml.py, a fake at the NVML boundary) driving the
real nvml source; the host side is a real directory laid out as /proc (``--proc-root``), holding
cgroup files in the shapes the kubelet writes (systemd driver, cgroup v2; cgroupfs driver, cgroup v1)
and a host process's. A PID with no cgroup file (exited) is ``unknown``, never "host".
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch import fields
from gpuwatch.exporter import counters
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exposition import render
from gpuwatch.sources import SourceOptions, cgroup_pods, nvml, nvml_parse
from gpuwatch.units import UsageError
from tests.conftest import FIXTURES
from tests.fakes.fake_pynvml import FakeNvml

UID = "0f4c2a7e-6b1d-4c5e-9a3b-2d8e1f7c6a90"
CGROUPS = {
    # systemd cgroup driver, cgroup v2 (kubelet's kubepods.slice layout), containerd scope
    11327: f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
           "cri-containerd-4be1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1.scope\n",
    # a host process (a node agent run from systemd)
    11328: "0::/system.slice/node-agent.service\n",
}


@pytest.fixture
def proc_root(tmp_path):
    for pid, text in CGROUPS.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    return tmp_path


def _collector(proc_root, *, owner=True):
    scenario = json.loads((FIXTURES / "nvml" / "h100.json").read_text())
    source = nvml.open_source(SourceOptions(node="node-a"), nvml=FakeNvml(copy.deepcopy(scenario)))
    resolve = functools.partial(cgroup_pods.resolve_pid, proc_root=str(proc_root)) if owner else None
    return ExporterCollector(source, clock=lambda: 1_000_000.0, owner=resolve), scenario


def _series(collector) -> dict[str, float]:
    text = render(collector.collect()).decode()
    return {(s.labels["pid"], s.labels["owner"], s.labels["pod_uid"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "gpuwatch_process_memory_bytes"}


def test_each_process_is_served_with_its_pod_or_host_or_unknown(proc_root):
    collector, scenario = _collector(proc_root)
    served = _series(collector)
    processes = scenario["gpus"][0]["processes"]
    want = {}
    for p in processes:
        owner = {11327: ("pod", UID), 11328: ("host", "")}.get(p["pid"], ("unknown", ""))
        if p["used_memory"] is not None:  # NVML's own MiB, in bytes: the field's unit conversion
            want[(str(p["pid"]), *owner)] = float(p["used_memory"] // 2**20 * 2**20)
    assert served == want
    assert ("11327", "pod", UID) in served and ("11328", "host", "") in served
    assert any(owner == "unknown" for _, owner, _ in served), "a PID without a cgroup file is unknown"


def test_without_proc_root_no_process_series_is_served(proc_root):
    collector, _ = _collector(proc_root, owner=False)
    assert _series(collector) == {}


def test_a_resolver_that_raises_makes_that_pid_unknown_and_keeps_the_scrape(proc_root):
    collector, _ = _collector(proc_root)

    def broken(pid):
        if pid == 11327:
            raise RuntimeError("boom")
        return cgroup_pods.resolve_pid(pid, proc_root=str(proc_root))
    collector._owner = broken
    served = _series(collector)
    assert ("11327", "unknown", "") in served and ("11328", "host", "") in served


def test_proc_root_that_is_not_a_directory_is_a_usage_error(tmp_path):
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-gpus", "8",
           "--kubelet-socket", "", "--proc-root", str(tmp_path / "nope")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--proc-root" in out.stderr and "not a directory" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_counters_file_on_the_nvml_source_resolves_through_gpuwatch_fields(tmp_path):
    path = tmp_path / "counters.csv"
    path.write_text("# ECC and temperatures from NVML\nDCGM_FI_DEV_GPU_TEMP, gauge, temp C\n"
                    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, DBE\nDCGM_FI_DRIVER_VERSION, label, driver\n"
                    "DCGM_EXP_XID_ERRORS_COUNT, gauge, xids\n")
    rows = counters.read_counters(str(path), counters.gpuwatch_fields())
    counters.check_provided(rows, nvml_parse.PROVIDED_FIELD_IDS, path=str(path), source="nvml")
    assert [r.field_id for r in rows] == [150, 311, 1, None]


def test_counters_file_row_nvml_cannot_read_names_file_and_line(tmp_path):
    unreadable = [f for f in fields.FIELDS if f.id not in nvml_parse.PROVIDED_FIELD_IDS | set(counters.LABEL_FIELD_IDS)]
    assert unreadable, "gpuwatch declares fields only DCGM reads"
    field = unreadable[0]
    path = tmp_path / "counters.csv"
    path.write_text(f"DCGM_FI_DEV_GPU_TEMP, gauge, temp C\n{field.name}, gauge, x\n")
    rows = counters.read_counters(str(path), counters.gpuwatch_fields())
    with pytest.raises(UsageError, match=rf"counters.csv:2: {field.name}: the nvml source cannot read DCGM field {field.id}"):
        counters.check_provided(rows, nvml_parse.PROVIDED_FIELD_IDS, path=str(path), source="nvml")


def test_counters_file_on_the_nvml_source_refuses_a_field_gpuwatch_does_not_declare(tmp_path):
    path = tmp_path / "counters.csv"
    path.write_text("DCGM_FI_DEV_GPU_TEMPP, gauge, typo\n")
    with pytest.raises(UsageError, match=r"counters.csv:1: DCGM_FI_DEV_GPU_TEMPP: unknown DCGM field.*DCGM_FI_DEV_GPU_TEMP\?"):
        counters.read_counters(str(path), counters.gpuwatch_fields())


def test_the_served_page_ingests_into_the_processes_table(proc_root):
    """Exporter page -> saved /metrics reader -> store: in_pod 1 with the UID, 0 for the host process,
    NULL for an unreadable cgroup; memory in bytes."""
    from gpuwatch import store
    from gpuwatch.ingest import promfile

    collector, scenario = _collector(proc_root)
    text = render(collector.collect()).decode()
    frames = promfile.parse(text, at=1_794_182_400.0, source="page.prom")
    con = store.connect(None)
    store.load(con, frames, source="page.prom")
    rows = {pid: (uid, in_pod, fb) for pid, uid, in_pod, fb in
            con.execute("SELECT pid, pod_uid, in_pod, fb_used_bytes FROM stg_processes").fetchall()}
    memory = {p["pid"]: p["used_memory"] // 2**20 * 2**20 for p in scenario["gpus"][0]["processes"]
              if p["used_memory"] is not None}
    assert rows[11327] == (UID, 1, memory[11327]) and rows[11328] == (None, 0, memory[11328])
    assert {pid: r[1] for pid, r in rows.items() if pid not in CGROUPS} == dict.fromkeys(set(memory) - set(CGROUPS))
