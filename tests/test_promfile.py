"""A saved /metrics page -> bundle frames (gpuwatch.ingest.promfile), on REAL dcgm-exporter captures.

Fixtures (tests/fixtures/promfile/, sources in its README.md): the L40S capture with dcgm-exporter
4.x labels (``Hostname``, ``pci_bus_id``, ``DCGM_FI_DRIVER_VERSION``), the A100 MIG capture from
NVIDIA's docs with the 2.x label set (no ``modelName``, a ``GPU_I_PROFILE``/``GPU_I_ID`` instance),
and a variant DERIVED from both by us: lower-case ``hostname`` and the labels a Prometheus
``/federate`` dump carries when dcgm-exporter is scraped with ``honorLabels: false``
(``exported_pod``..., the exporter pod's own ``pod``/``namespace``, millisecond timestamps).
Expected values below are read off the captures by hand, with the documented conversions
(GPU_UTIL % / 100, FB MiB x 2**20). Bad files must fail naming the file and line.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from gpuwatch import fields
from gpuwatch.ingest import promfile
from tests.conftest import FIXTURES

HERE = FIXTURES / "promfile"
MIB = 1 << 20
AT = pd.Timestamp("2026-11-20T08:00:00Z")
L40S = "GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43"
A100 = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"


def _row(frame: pd.DataFrame, **where) -> pd.Series:
    match = frame
    for key, value in where.items():
        match = match[match[key].isna()] if value is None else match[match[key] == value]
    assert len(match) == 1, (where, frame)
    return match.iloc[0]


def test_l40s_4x_capture_with_Hostname_label():
    frames = promfile.read_file(HERE / "l40s-dcgm-exporter-4x-Hostname.prom", at=AT.to_pydatetime())
    device = _row(frames["devices"])
    assert (device.node, device.gpu_uuid, device.gpu_index, device.gpu_model) == ("gpu1-wl8sg", L40S, 0, "NVIDIA L40S")
    assert device.fb_total_bytes == (0 + 45459 + 608) * MIB  # FB_USED + FB_FREE + FB_RESERVED
    assert pd.isna(device.mig_gi_id) and device.mig_profile is None
    sample = _row(frames["samples"])
    assert sample.ts == AT and sample.pod is None and sample.namespace is None
    assert (sample.gpu_util, sample.gr_engine_active, sample.tensor_active) == (0.0, 0.0, 0.0)
    assert (sample.dram_active, sample.fb_used_bytes, sample.power_watts) == (0.000131, 0.0, 35.686)
    # SM_ACTIVE/SM_OCCUPANCY are not in dcgm-exporter's default counters: unknown, never 0
    assert np.isnan(sample.sm_active) and np.isnan(sample.sm_occupancy)
    assert any("no DCGM_FI_PROF_SM_ACTIVE series" in n for n in frames["samples"].attrs["notes"])
    assert frames["pods"].empty


def test_a100_mig_2x_capture_gives_gpu_and_instance_rows():
    frames = promfile.read_file(HERE / "a100-mig-dcgm-exporter-2x.prom", at=AT)
    devices = frames["devices"]
    assert len(devices) == 2
    gpu, gi = _row(devices, mig_gi_id=None), _row(devices, mig_gi_id=13)
    assert gpu.fb_total_bytes == (4845 + 35690) * MIB and gpu.node == "ub20-a100-k8s"
    assert (gi.gpu_uuid, gi.gpu_index, gi.mig_profile) == (A100, 0, "1g.5gb")
    assert pd.isna(gi.fb_total_bytes)  # no FB fields on the instance in this capture
    assert set(devices.gpu_model) == {"unknown"}  # 2.x has no modelName label
    samples = frames["samples"]
    whole, inst = _row(samples, mig_gi_id=None), _row(samples, mig_gi_id=13)
    assert (whole.gr_engine_active, whole.tensor_active, whole.dram_active) == (0.995630, 0.929260, 0.690789)
    assert (whole.fb_used_bytes, whole.power_watts) == (4845 * MIB, 409.692)
    assert (inst.gr_engine_active, inst.tensor_active, inst.dram_active) == (0.995687, 0.930433, 0.800339)
    assert np.isnan(inst.gpu_util) and np.isnan(inst.power_watts)  # GPU_UTIL does not exist on MIG


def test_federated_lowercase_hostname_and_exported_pod():
    frames = promfile.read_file(HERE / "federate-hostname-exported-pod.prom", at=AT)
    samples = frames["samples"]
    train = _row(samples, gpu_uuid=L40S)
    assert (train.node, train.namespace, train.pod, train.container) == ("gpu1-wl8sg", "ml-team", "train-0", "trainer")
    assert train.ts == pd.Timestamp("2025-11-09T10:00:00Z")  # the file's own timestamp wins over --at
    notebook = _row(samples, mig_gi_id=13)
    assert (notebook.namespace, notebook.pod, notebook.container) == ("research", "notebook-0", "jupyter")
    assert notebook.ts == pd.Timestamp("2025-11-09T10:00:15Z")
    whole = _row(samples, gpu_uuid=A100, mig_gi_id=None)
    assert whole.pod is None, "the exporter's own pod label is not a workload"
    pods = frames["pods"].set_index("pod")
    assert sorted(pods.index) == ["notebook-0", "train-0"]
    assert pods.loc["train-0", "device_ids"] == L40S and pods.loc["notebook-0", "device_ids"] == f"{A100}/13"
    assert pods.loc["train-0", "node"] == "gpu1-wl8sg" and pods["end_ts"].isna().all()


def test_old_namespace_names_and_labels(tmp_path):
    path = tmp_path / "old.prom"
    path.write_text(
        "# HELP dcgm_gpu_utilization GPU utilization (in %).\n# TYPE dcgm_gpu_utilization gauge\n"
        'dcgm_gpu_utilization{gpu="0",uuid="GPU-1",Hostname="n1",pod_name="p",pod_namespace="ns",container_name="c"} 37\n'
        'dcgm_fb_used{gpu="0",uuid="GPU-1",Hostname="n1",pod_name="",pod_namespace="",container_name=""} 100\n')
    samples = promfile.read_file(path, at=0)["samples"].set_index("pod", drop=False)
    assert samples.loc["p", "gpu_util"] == pytest.approx(0.37)
    # empty pod labels = the device-level series: at the same instant as a pod's series of that GPU, its
    # device-wide values are the pod's row's (promframes_shared), not a second, unattributed row
    assert samples.loc["p", "fb_used_bytes"] == 100 * MIB and samples.pod.notna().all()


def test_sample_time_defaults_to_the_files_mtime(tmp_path):
    path = tmp_path / "m.prom"
    path.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n1"} 5\n')
    os.utime(path, (1_700_000_000, 1_700_000_000))
    assert promfile.read_file(path)["samples"].ts.tolist() == [pd.Timestamp(1_700_000_000, unit="s", tz="UTC")]


@pytest.mark.parametrize(("text", "line", "message"), [
    ('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5\nthis is not a metric line\n',
     3, "unparseable line 'this is not a metric line'"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5\nDCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1" 5\n', 2, "unparseable"),
    ('# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n'
     'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1"} 5\n', 1, "in 'MB', expected 'MiB'"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n'
     'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 7\n', 3, "duplicate series DCGM_FI_DEV_GPU_UTIL"),
])
def test_bad_files_name_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "bad.prom"
    path.write_text(text)
    with pytest.raises(promfile.PromFileError) as error:
        promfile.read_file(path, at=0)
    assert str(error.value).startswith(f"{path}:{line}: ") and message in str(error.value)


def test_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(promfile.PromFileError, match="cannot read"):
        promfile.read_file(tmp_path / "missing.prom", at=0)


def test_gpuwatch_ingest_from_a_prom_file(tmp_path):
    """``gpuwatch ingest --from FILE.prom --db DB --at TIME`` loads the frames into the store."""
    from gpuwatch import cli, store

    db = tmp_path / "gw.duckdb"
    path = HERE / "l40s-dcgm-exporter-4x-Hostname.prom"
    assert cli.main(["ingest", "--from", str(path), "--db", str(db), "--at", "2026-11-20T08:00:00Z"]) == 0
    con = store.connect(str(db), read_only=True)
    ts, uuid, power = con.execute("SELECT ts, gpu_uuid, power_watts FROM samples").fetchone()
    model, total = con.execute("SELECT gpu_model, fb_total_bytes FROM devices").fetchone()
    con.close()
    assert (str(ts), uuid, power) == ("2026-11-20 08:00:00", L40S, 35.686)
    assert (model, total) == ("NVIDIA L40S", 46067 * MIB)


def test_an_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.prom"
    path.write_text("\n")
    with pytest.raises(promfile.PromFileError, match=r"empty\.prom: empty file"):
        promfile.read_file(path, at=1794182400.0)


def test_a_page_without_gpu_series_is_an_error():
    with pytest.raises(promfile.PromFileError, match="no GPU series"):
        promfile.parse("# TYPE up gauge\nup 1\n", at=1794182400.0, source="node.prom")


def test_gpu_series_without_uuid_or_hostname_are_counted_and_reported(caplog):
    text = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",modelName="X"} 50\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",modelName="X",Hostname="n1"} 50\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-c",modelName="X"} 50\n')
    frames = promfile.parse(text, at=1794182400.0, source="m.prom")
    assert frames["samples"]["gpu_uuid"].tolist() == ["GPU-a"]
    assert any("2 GPU series without a GPU UUID or a hostname/node label" in n for n in frames["samples"].attrs["notes"])


# --- dcgm-exporter naming generations (gpuwatch/fields.py) -------------------------------------

_PAGE_49 = """\
# HELP DCGM_FI_DEV_GPU_UTIL_RATIO GPU utilization (in ratio).
# TYPE DCGM_FI_DEV_GPU_UTIL_RATIO gauge
DCGM_FI_DEV_GPU_UTIL_RATIO{gpu="0",UUID="GPU-1",hostname="n1",DCGM_FI_SYSTEM_DRIVER_VERSION="595.58.03",pod="p",namespace="ns",container="c"} 0.37
# HELP DCGM_FI_DEV_FB_USED_BYTES Framebuffer memory used (in B).
# TYPE DCGM_FI_DEV_FB_USED_BYTES gauge
DCGM_FI_DEV_FB_USED_BYTES{gpu="0",UUID="GPU-1",hostname="n1",pod="p",namespace="ns",container="c"} 1073741824
# TYPE DCGM_FI_DEV_FB_FREE_BYTES gauge
DCGM_FI_DEV_FB_FREE_BYTES{gpu="0",UUID="GPU-1",hostname="n1",pod="p",namespace="ns",container="c"} 3221225472
DCGM_FI_DEV_BOARD_POWER_WATTS{gpu="0",UUID="GPU-1",hostname="n1",pod="p",namespace="ns",container="c"} 250.5
DCGM_FI_PROF_SM_UTIL_RATIO{gpu="0",UUID="GPU-1",hostname="n1",pod="p",namespace="ns",container="c"} 0.25
DCGM_FI_PROF_TENSOR_UTIL_RATIO{gpu="0",UUID="GPU-1",hostname="n1",pod="p",namespace="ns",container="c"} 0.125
"""


def test_a_49_page_is_read_in_its_own_units():
    """dcgm-exporter 4.9 (DCGM 4.7) serves ratios and bytes: nothing is divided by 100 or scaled by MiB.
    Expected values are the page's own numbers, read by hand."""
    frames = promfile.parse(_PAGE_49, at=AT.timestamp())
    sample = _row(frames["samples"])
    assert (sample.gpu_util, sample.fb_used_bytes, sample.power_watts) == (0.37, 1 << 30, 250.5)
    assert (sample.sm_active, sample.tensor_active) == (0.25, 0.125)
    assert (sample.pod, sample.namespace) == ("p", "ns")
    assert _row(frames["devices"]).fb_total_bytes == 4 << 30  # used + free, both bytes
    notes = frames["samples"].attrs["notes"]
    assert not any("GPU_UTIL series" in n for n in notes)
    assert any(n.startswith("no DCGM_FI_PROF_GR_ENGINE_ACTIVE series (nor ") and "GR_ENGINE_UTIL_RATIO" in n
               for n in notes)


def _in_generation(text: str, generation: str) -> str:
    """A 4.8 page rewritten the way ``generation`` serves it: each field's name and HELP, the
    value converted from the 4.8 unit to that generation's (1.x also renames the labels)."""
    names = {n.field.name: n for n in fields.served(generation).values()}
    out = []
    for line in text.splitlines():
        head = line.split(" ", 3)
        name = head[2] if line.startswith("#") else line.split("{", 1)[0]
        target = names.get(name)
        if target is None:
            continue  # a field this generation does not serve
        if line.startswith("# HELP"):
            out.append(f"# HELP {target.name} {target.help}")
        elif line.startswith("# TYPE"):
            out.append(f"# TYPE {target.name} {target.type}")
        else:
            series, value = line.rsplit(" ", 1)
            converted = float(value) * target.field.to_base / target.to_base
            series = target.name + series[len(name):]
            if generation == "1.x":
                series = series.replace("UUID=", "uuid=")
            out.append(f"{series} {converted!r}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("generation", ["1.x", "4.9"])
def test_every_generation_of_the_same_page_gives_the_same_frames(generation):
    """The real L40S capture, renamed and re-united as dcgm-exporter 1.x / 4.9 would serve it (derived
    here, not captured), loads to the frames of the original, field by field."""
    text = (HERE / "l40s-dcgm-exporter-4x-Hostname.prom").read_text()
    base = promfile.parse(text, at=AT.timestamp())
    other = promfile.parse(_in_generation(text, generation), at=AT.timestamp())
    served = {n.field.column for n in fields.served(generation).values()}
    columns = [c for c in base["samples"].columns if c in served]
    assert columns, generation
    pd.testing.assert_frame_equal(base["samples"][columns], other["samples"][columns], rtol=1e-12)
    if generation == "4.9":  # FB_USED + FREE + RESERVED in bytes equals the MiB sum x 2**20
        pd.testing.assert_frame_equal(base["devices"], other["devices"])


@pytest.mark.parametrize(("text", "message"), [
    ('# HELP DCGM_FI_DEV_GPU_UTIL_RATIO GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL_RATIO gauge\n'
     'DCGM_FI_DEV_GPU_UTIL_RATIO{gpu="0",UUID="GPU-1",hostname="n1"} 37\n', "in '%', expected 'ratio'"),
    ('# HELP DCGM_FI_DEV_FB_USED_BYTES Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED_BYTES gauge\n'
     'DCGM_FI_DEV_FB_USED_BYTES{gpu="0",UUID="GPU-1",hostname="n1"} 5\n', "in 'MiB', expected 'B'"),
    ('# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in ratio).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
     'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",hostname="n1"} 0.37\n', "in 'ratio', expected '%'"),
])
def test_a_help_unit_other_than_the_generations_is_refused(text, message):
    """A page whose HELP names a unit other than the one its names' generation declares (a 4.8-era
    percentage under a 4.9 ``_RATIO`` name, say) is refused, never converted by a guess."""
    with pytest.raises(promfile.PromFileError, match=message.replace("(", r"\(")):
        promfile.parse(text, at=0)


def test_help_units_may_be_spelled_out():
    text = ('# HELP DCGM_FI_DEV_FB_USED_BYTES Framebuffer memory used (in bytes).\n'
            'DCGM_FI_DEV_FB_USED_BYTES{gpu="0",UUID="GPU-1",hostname="n1"} 1024\n')
    assert _row(promfile.parse(text, at=0)["samples"]).fb_used_bytes == 1024
