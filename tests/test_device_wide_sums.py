"""Every PromQL expression gpuwatch ships (the Prometheus rules, every dashboard panel) counts a
device-wide field once per GPU.

A device-wide DCGM field (fields.DEVICE_WIDE: power, energy, clocks, temperatures, ...) is served by
dcgm-exporter, and by gpuwatch's dcgm-exporter profiles, on every GPU-instance series of a MIG GPU,
each with the board's value (tests/test_exporter_mig_sums.py shows both shapes on a real Prometheus).
So no shipped expression may ``sum`` or ``avg`` such a field straight over its series (+300 % on a GPU
in four instances): it takes one value per UUID first, as in ``sum(max by (UUID) (...))``.
"""

from __future__ import annotations

import json
import re

import yaml

from gpuwatch import fields
from tests.support.promql_names import ROOT, RULES

DEVICE_WIDE_NAMES = sorted({n.name for n in fields.NAMES.values() if n.field.id in fields.DEVICE_WIDE}, key=len,
                           reverse=True)
# sum/avg (with or without grouping) applied to the field's series, directly or through a *_over_time/rate
_SUMMED = r"\b(sum|avg)\s*(?:(?:by|without)\s*\([^()]*\)\s*)?\(\s*(?:\w+\(\s*)?{name}\b"


def shipped_expressions() -> list[tuple[str, str]]:
    """(where, expr) for every rule and every dashboard target."""
    out = []
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        out += [(f"rule {r.get('record') or r.get('alert')}", r["expr"]) for r in group["rules"]]

    def targets(node, where):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                out.append((where, node["expr"]))
            for v in node.values():
                targets(v, where)
        elif isinstance(node, list):
            for v in node:
                targets(v, where)

    for path in sorted((ROOT / "dashboards").glob("*.json")):
        targets(json.loads(path.read_text()), path.name)
    return out


def summed_device_wide(expr: str) -> list[str]:
    return [n for n in DEVICE_WIDE_NAMES if re.search(_SUMMED.format(name=re.escape(n)), expr)]


def test_the_check_catches_a_plain_sum():
    assert summed_device_wide("sum(DCGM_FI_DEV_POWER_USAGE)") == ["DCGM_FI_DEV_POWER_USAGE"]
    assert summed_device_wide("avg by (hostname) (avg_over_time(DCGM_FI_DEV_GPU_TEMP[5m]))") == ["DCGM_FI_DEV_GPU_TEMP"]
    assert summed_device_wide("sum(max by (UUID) (DCGM_FI_DEV_POWER_USAGE))") == []
    assert summed_device_wide("sum(DCGM_FI_DEV_FB_USED)") == []  # per instance: a sum is right


def test_no_shipped_expression_sums_a_device_wide_field_over_its_series():
    found = shipped_expressions()
    assert len(found) > 50
    bad = [(where, n) for where, expr in found for n in summed_device_wide(expr)]
    assert not bad, f"sum/avg of a device-wide field per series (count it once per GPU: max by (UUID)): {bad}"
