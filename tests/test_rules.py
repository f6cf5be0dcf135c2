"""dashboards/gpuwatch-rules.yaml, with Debian's promtool (/usr/bin/promtool).

`promtool check rules` passes; `promtool test rules` passes on tests/fixtures/rules/gpuwatch-rules.test.yaml
and gpuwatch-topology-rules.test.yaml, and those files have, for every alert, a case where it fires and one where it does not,
fed with gpuwatch-exporter-style series (`hostname`, honorLabels) and NVIDIA dcgm-exporter-style
series (`Hostname`, `exported_pod`, the exporter's own pod on unattributed GPUs); the recording
rules normalise both. Every alert carries summary, description and runbook. Every metric a rule
names is served by the exporter (gpuwatch.exporter.metrics.METRICS), a recording rule, the
derived findings (gpuwatch.findings.exporter.METRICS), kube-state-metrics or Prometheus itself.
The topology alert compares each block size k with a free-GPU threshold of k, for sizes the exporter serves.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.support.prometheus import binary
from tests.support.promql_names import ROOT, RULES, metric_names, unknown

UNIT_TEST_FILES = tuple(ROOT / "tests" / "fixtures" / "rules" / name
                        for name in ("gpuwatch-rules.test.yaml", "gpuwatch-topology-rules.test.yaml"))
UNIT_TESTS = UNIT_TEST_FILES[0]
ALERTS = {"GpuwatchIdleAllocatedGPU", "GpuwatchFalseUtilization", "GpuwatchExporterDown",
          "GpuwatchSourceDown", "GpuwatchGPULost", "GpuwatchXidErrors", "GpuwatchRowRemapFailure",
          "GpuwatchDriverDrift", "GpuwatchGpuPodCrashLooping", "GpuwatchOrphanedGpuMemory", "GpuwatchFreeGpusNoBlock",
          "GpuwatchOrphanedProcessMemory", "GpuwatchGangStalled", "GpuwatchMigProfileTooSmall"}
# Alerts whose fired labels name no node, or that only gpuwatch's exporter can raise: tested with both
# exporters' series (group names), but not required to fire on both.
NODELESS = {"GpuwatchSourceDown": "gpuwatch_source_up has no dcgm-exporter equivalent",
            "GpuwatchDriverDrift": "labelled by GPU model only",
            "GpuwatchGpuPodCrashLooping": "kube-state-metrics series only",
            "GpuwatchOrphanedGpuMemory": "needs gpuwatch_gpu_allocation_info (dcgm-exporter: quiet)",
            "GpuwatchFreeGpusNoBlock": "per GPU pool; needs gpuwatch's free-GPU, block and link series (dcgm-exporter: quiet)",
            "GpuwatchOrphanedProcessMemory": "needs gpuwatch_process_memory_bytes (--proc-root; dcgm-exporter: quiet)",
            "GpuwatchGangStalled": "export-derived findings, per job",
            "GpuwatchMigProfileTooSmall": "export-derived findings, per pod"}


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
    result = subprocess.run([promtool(), "test", "rules", *(p.name for p in UNIT_TEST_FILES)], capture_output=True,
                            text=True, timeout=120, cwd=UNIT_TESTS.parent)
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


def unit_test_groups() -> list[dict]:
    return [group for path in UNIT_TEST_FILES for group in yaml.safe_load(path.read_text())["tests"]]


def cases() -> dict[str, dict[str, set[str]]]:
    """alert -> {"fires": test-group names, "quiet": test-group names} from the unit-test file."""
    out: dict[str, dict[str, set[str]]] = {a: {"fires": set(), "quiet": set()} for a in ALERTS}
    for group in unit_test_groups():
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
    for group in unit_test_groups():
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


def test_the_topology_alert_asks_for_k_free_gpus_per_block_size_k():
    from gpuwatch import topology

    rule = next(r for r in rules() if r.get("alert") == "GpuwatchFreeGpusNoBlock")
    pairs = re.findall(r'gpuwatch:pool_free_gpus:sum\{k="(\d+)"\} >= (\d+)', rule["expr"])
    assert pairs and all(k == threshold for k, threshold in pairs), pairs
    assert {int(k) for k, _ in pairs} <= set(topology.BLOCK_SIZES) - {1}
    assert rule["for"] == "15m"
    # the per-node eligibility rule names the same block sizes as the alert
    eligible = next(r for r in rules() if r.get("record") == "gpuwatch:node_nvlink_block_free:bool")
    assert set(re.findall(r'\{k="(\d+)"\}', eligible["expr"])) == {k for k, _ in pairs}
    assert all(f">= {k})" in eligible["expr"] for k, _ in pairs)


def test_the_topology_alert_is_tested_while_pending_and_firing():
    """It waits its 15 minutes: a case before them expects nothing, one after them expects the alert."""
    times = {}
    for group in unit_test_groups():
        for case in group.get("alert_rule_test", []):
            if case["alertname"] == "GpuwatchFreeGpusNoBlock":
                times.setdefault(group["name"], []).append((case["eval_time"], bool(case.get("exp_alerts"))))
    firing = [t for t in times.values() if any(f for _, f in t) and any(not f for _, f in t)]
    assert firing, times
