"""The exporter's exposition FORMAT equals dcgm-exporter's, checked against real captures.

The L40S capture (tests/fixtures/dcgm-exporter/l40s-default-counters.prom, a real dcgm-exporter
scrape) is replayed through the stand-in DCGM bindings (tests/fakes/dcgm, a fake at the DCGM
boundary with DCGM's real call shapes) -> the real dcgm source -> collector -> renderer, with
``--hostname-label Hostname``: every line of the capture (HELP, TYPE, metric name, label names and
their order, value text incl. ``%f`` doubles) must appear verbatim in our output. The MIG capture
(NVIDIA docs, dcgm-exporter 2.x) checks the relative order of the MIG labels.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from gpuwatch.exporter import metrics
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exposition import format_value, render
from gpuwatch.exporter.families import Options
from gpuwatch.ingest import promfile
from gpuwatch.sources import SourceOptions, dcgm
from tests.conftest import FIXTURES

LINE = re.compile(r'^(?P<name>[A-Za-z_:][\w:]*)\{(?P<labels>.*)\} (?P<value>\S+)$')


def parse_lines(text: str) -> list[tuple[str, list[str], str]]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            names = re.findall(r'(\w+)="', m["labels"])
            out.append((m["name"], names, m["value"]))
    return out


@pytest.fixture
def fake_dcgm():
    mods = dcgm.load_bindings(str(FIXTURES.parent / "fakes" / "dcgm"))
    import _fake_state

    return mods, _fake_state


def scrape_fake_dcgm(fake_dcgm, scenario: str, *, hostname_label: str = "hostname", node: str = "gpu1-wl8sg",
                     naming: str = "4.8") -> str:
    mods, state = fake_dcgm
    state.load(json.loads((FIXTURES / "dcgm" / scenario).read_text()))
    source = dcgm.open_source(SourceOptions(node=node), dcgm=mods, nvml=_NoNvml())
    collector = ExporterCollector(source, options=Options(hostname_label=hostname_label, naming=naming))
    return render(collector.collect()).decode()


class _NoNvml:
    """Stands for a node where NVML is not importable: MIG UUIDs then unknown (logged)."""

    def nvmlInit(self):
        raise ImportError("no NVML here")


def test_l40s_capture_lines_reproduced_verbatim(fake_dcgm):
    capture = (FIXTURES / "dcgm-exporter" / "l40s-default-counters.prom").read_text()
    ours = set(scrape_fake_dcgm(fake_dcgm, "l40s.json", hostname_label="Hostname").splitlines())
    expected = [line for line in capture.splitlines() if line and (line[0] != "#" or line[:6] in ("# HELP", "# TYPE"))]
    missing = [line for line in expected if line not in ours]
    assert len(expected) == 54  # 18 families x (HELP, TYPE, sample)
    assert not missing, "lines of the real dcgm-exporter capture we do not reproduce:\n" + "\n".join(missing)


def test_49_naming_serves_base_units_under_the_new_names(fake_dcgm):
    """The L40S capture served in dcgm-exporter 4.9's naming: values converted from the capture's
    4.8 units by hand (210 MHz = 210e6 Hz, 5551899580 mJ = 5551899.58 J, 45459 MiB in bytes)."""
    text = scrape_fake_dcgm(fake_dcgm, "l40s.json", naming="4.9")
    values = {name: value for name, _, value in parse_lines(text)}
    assert float(values["DCGM_FI_DEV_SM_CLOCK_HERTZ"]) == 210e6
    assert float(values["DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"]) == pytest.approx(5551899.58)
    assert float(values["DCGM_FI_DEV_FB_FREE_BYTES"]) == 45459 * (1 << 20)
    assert float(values["DCGM_FI_DEV_GPU_UTIL_RATIO"]) == 0.0 and "DCGM_FI_DEV_GPU_UTIL" not in values
    assert float(values["DCGM_FI_DEV_BOARD_POWER_WATTS"]) == 35.686
    assert 'DCGM_FI_SYSTEM_DRIVER_VERSION="595.58.03"' in text and "DCGM_FI_DRIVER_VERSION" not in text
    assert "# HELP DCGM_FI_DEV_GPU_UTIL_RATIO GPU utilization (in ratio).\n" in text


def test_both_namings_ingest_to_the_same_frames(fake_dcgm):
    frames = [promfile.parse(scrape_fake_dcgm(fake_dcgm, "l40s.json", naming=n), at=0.0) for n in ("4.8", "4.9")]
    for name in ("samples", "devices"):
        pd.testing.assert_frame_equal(frames[0][name], frames[1][name], rtol=1e-12)


def test_not_supported_sentinels_never_exported(fake_dcgm):
    text = scrape_fake_dcgm(fake_dcgm, "l40s.json")
    assert "9223372036854775" not in text and "140737488355" not in text
    for name in ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_NVLINK_TX_BYTES"):
        assert f"\n{name}{{" not in text, f"{name} is NOT_SUPPORTED on the L40S and must be absent"
    assert 'DCGM_FI_PROF_PCIE_TX_BYTES{' in text and text.count("# TYPE DCGM_FI_PROF_SM_ACTIVE") == 0


def test_mig_label_order_matches_dcgm_exporter(fake_dcgm):
    doc = parse_lines((FIXTURES / "dcgm-exporter" / "a100-mig-docs.prom").read_text())
    doc_mig = next(labels for name, labels, _ in doc if "GPU_I_ID" in labels)
    ours = parse_lines(scrape_fake_dcgm(fake_dcgm, "h100-mig.json", hostname_label="Hostname"))
    our_mig = [labels for name, labels, _ in ours if name.startswith("DCGM_FI_") and "GPU_I_ID" in labels]
    assert our_mig, "no MIG series"
    for labels in our_mig:
        common = [x for x in labels if x in doc_mig]
        assert common == doc_mig, f"relative label order differs from dcgm-exporter's: {labels} vs {doc_mig}"
        assert labels[:5] == list(metrics.DEVICE_LABELS)


def test_mig_has_no_gpu_util_and_repeats_gpu_scoped_fields(fake_dcgm):
    text = scrape_fake_dcgm(fake_dcgm, "h100-mig.json")
    assert "DCGM_FI_DEV_GPU_UTIL{" not in text  # NOT_SUPPORTED on MIG instances
    temps = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == 4 and all(line.endswith(" 42") for line in temps)
    assert {re.search(r'GPU_I_PROFILE="([^"]+)"', t)[1] for t in temps} == {"3g.40gb", "2g.20gb", "1g.10gb"}


def test_every_metric_has_help_type_and_unique_name():
    names = [m.name for m in metrics.METRICS]
    assert len(names) == len(set(names))
    for m in metrics.METRICS:
        assert m.type in ("gauge", "counter") and m.help
        if m.name.startswith("DCGM_FI_"):
            assert m.field_id is not None and m.fmt in ("i", "d")
        else:
            assert m.name.startswith("gpuwatch_") and m.field_id is None
    table = metrics.markdown_table()
    assert all(f"`{n}`" in table for n in names)


@pytest.mark.parametrize(("value", "fmt", "text"), [
    (35.686, "d", "35.686000"), (0.000131, "d", "0.000131"), (0.0, "d", "0.000000"),
    (5551899580, "i", "5551899580"), (1.0, "g", "1"), (0.25, "g", "0.25"), (float("nan"), "g", "NaN")])
def test_value_formatting_follows_dcgm_types(value, fmt, text):
    assert format_value(value, fmt) == text


def test_emitted_labels_follow_the_metrics_table():
    """Every series' label names are its METRICS entry's labels, in order (gaps = optional ones)."""
    from gpuwatch.exporter.collector import render_at
    from gpuwatch.fleet import build_fleet

    fleet = build_fleet(gpus=40, seed=0)
    text = "".join(render_at(fleet, fleet.start + 2 * 86400, node=n) for n in ("gpu-node-002", "gpu-node-004"))
    seen = set()
    for name, labels, _ in parse_lines(text):
        spec = metrics.BY_NAME[name]
        it = iter(spec.labels)
        assert all(label in it for label in labels), f"{name}: {labels} not in the order of {spec.labels}"
        required = [x for x in spec.labels if x not in metrics.OPTIONAL or x in metrics.ALWAYS.get(name, ())]
        assert set(required) <= set(labels), f"{name} lacks {set(required) - set(labels)}"
        seen.add(name)
    assert len(seen) >= 18  # simulate serves 10 raw fields + the gpuwatch_ families with labels
