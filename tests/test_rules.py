"""dashboards/gpuwatch-rules.yaml, with Debian's promtool (/usr/bin/promtool).

`promtool check rules` passes; `promtool test rules tests/fixtures/rules/gpuwatch-rules.test.yaml`
passes, and that file has, for every alert, a case where it fires and one where it does not,
fed with gpuwatch-exporter-style series (`hostname`, honorLabels) and NVIDIA dcgm-exporter-style
series (`Hostname`, `exported_pod`, the exporter's own pod on unattributed GPUs); the recording
rules normalise both. Every alert carries summary, description and runbook. Every metric a rule
names is served by the exporter (gpuwatch.exporter.metrics.METRICS), a recording rule, the
derived findings (gpuwatch.findings.exporter.METRICS), kube-state-metrics or Prometheus itself.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.support.prometheus import binary
from tests.support.promql_names import ROOT, RULES, metric_names, unknown

UNIT_TESTS = ROOT / "tests" / "fixtures" / "rules" / "gpuwatch-rules.test.yaml"
ALERTS = {"GpuwatchIdleAllocatedGPU", "GpuwatchFalseUtilization", "GpuwatchExporterDown",
          "GpuwatchSourceDown", "GpuwatchGPULost", "GpuwatchXidErrors", "GpuwatchRowRemapFailure",
          "GpuwatchDriverDrift", "GpuwatchGpuPodCrashLooping", "GpuwatchOrphanedGpuMemory"}
# Alerts whose fired labels name no node, or that only gpuwatch's exporter can raise: tested with both
# exporters' series (group names), but not required to fire on both.
NODELESS = {"GpuwatchSourceDown": "gpuwatch_source_up has no dcgm-exporter equivalent",
            "GpuwatchDriverDrift": "labelled by GPU model only",
            "GpuwatchGpuPodCrashLooping": "kube-state-metrics series only",
            "GpuwatchOrphanedGpuMemory": "needs gpuwatch_gpu_allocation_info (dcgm-exporter: quiet)"}


def promtool() -> str:
    tool = binary("promtool")
    if not tool:
        pytest.skip("promtool not installed (Debian package prometheus; `make system-deps`)")
    return tool


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_check_rules():
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass():
    result = subprocess.run([promtool(), "test", "rules", str(UNIT_TESTS)], capture_output=True, text=True,
                            timeout=120, cwd=UNIT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_the_shipped_alerts_with_their_annotations():
    alerts = {r["alert"]: r for r in rules() if "alert" in r}
    assert set(alerts) == ALERTS
    for name, rule in alerts.items():
        notes = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(notes), name
        assert len(notes["runbook"]) > 200, f"{name}: the runbook should say what to do"
        assert rule["labels"]["severity"] in ("warning", "critical"), name


def cases() -> dict[str, dict[str, set[str]]]:
    """alert -> {"fires": test-group names, "quiet": test-group names} from the unit-test file."""
    out: dict[str, dict[str, set[str]]] = {a: {"fires": set(), "quiet": set()} for a in ALERTS}
    for group in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            out[case["alertname"]]["fires" if case.get("exp_alerts") else "quiet"].add(group["name"])
    return out


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_every_alert_is_tested_firing_and_quiet_with_both_exporters(alert):
    seen = cases()[alert]
    assert seen["fires"] and seen["quiet"], f"{alert}: needs a firing and a quiet case: {seen}"
    every = seen["fires"] | seen["quiet"]
    assert any("gpuwatch" in g for g in every) and any("dcgm" in g for g in every), alert
    if alert not in NODELESS:
        fired = [yaml.safe_dump(labels) for labels in fired_labels(alert)]
        assert any("node-1" in f or "gpuwatch-exporter" in f for f in fired), \
            f"{alert}: never fires on gpuwatch-exporter-style input"
        assert any("node-2" in f or "dcgm-exporter" in f for f in fired), \
            f"{alert}: never fires on dcgm-exporter-style input"


def fired_labels(alert: str) -> list[dict]:
    labels = []
    for group in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            if case["alertname"] == alert:
                labels += [a["exp_labels"] for a in case.get("exp_alerts", [])]
    return labels


def test_dcgm_style_input_covers_both_label_spellings():
    text = UNIT_TESTS.read_text()
    assert 'Hostname="node-2"' in text and 'exported_pod="' in text
    assert 'hostname="node-1"' in text


def test_every_metric_in_the_rules_exists():
    pytest.importorskip("gpuwatch.exporter.metrics", reason="the exporter's METRICS table is not written yet")
    names = set().union(*(metric_names(str(r["expr"])) for r in rules()))
    assert "DCGM_FI_DEV_GPU_UTIL" in names and "up" in names  # the extractor finds names at all
    assert unknown(names) == set()


def test_metric_name_extraction():
    expr = ('max by (hostname, UUID) (label_replace(DCGM_FI_DEV_GPU_UTIL{pod!="", job=~"a.*"}, "hostname", '
            '"$1", "Hostname", "(.+)")) / 100 or on (namespace) avg_over_time(x:y:z[5m] offset 1h) > bool 0.5')
    assert metric_names(expr) == {"DCGM_FI_DEV_GPU_UTIL", "x:y:z"}
    assert metric_names('sum by (team) (rate(foo_total[$__rate_interval])) unless vector(0)') == {"foo_total"}
