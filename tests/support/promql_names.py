"""Metric names referenced by a PromQL expression, and the names gpuwatch's PromQL may use.

``metric_names(expr)`` strips what is not a metric (strings, label matchers, grouping label
lists, durations, Grafana variables, functions, keywords, numbers) and returns the rest.
``known_metrics()`` is every name a rule or dashboard may reference, by where it comes from.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "gpuwatch-rules.yaml"

# kube-state-metrics: the only series used from it (the `team` pod label for chargeback views)
KUBE_STATE_METRICS = frozenset({"kube_pod_labels", "kube_pod_container_resource_requests",
                                "kube_pod_container_status_waiting_reason", "kube_pod_status_phase"})
# Prometheus' own per-target series
PROMETHEUS = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
# the reclaim controller's series (gpuwatch/reclaim/metrics.py)
RECLAIM = frozenset({"gpuwatch_reclaim_actions_total", "gpuwatch_reclaim_reclaimable_gpus"})

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
             "offset", "bool", "inf", "nan", "atan2"}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGES = re.compile(r"\[[^\]]*\]")
_VARIABLES = re.compile(r"\$\{?\w+\}?")
_IDENT = re.compile(r"(?<![\w:.])[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in ``expr`` (functions, keywords, labels and numbers excluded)."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _GROUPING.sub("", text)
    text = _RANGES.sub("", text)
    text = _VARIABLES.sub("", text)
    # an identifier followed by "(" is a function call
    names = {m.group() for m in _IDENT.finditer(text) if not text[m.end():].lstrip().startswith("(")}
    return {n for n in names if n.lower() not in _KEYWORDS and not re.fullmatch(r"\d+[a-z]*", n)}


def recording_rules() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def known_metrics() -> dict[str, frozenset[str]]:
    """Source -> names. The exporter and derived tables are imported from the code that serves them."""
    from gpuwatch.exporter.metrics import METRICS
    from gpuwatch.findings import exporter as derived

    return {"exporter": frozenset(m.name for m in METRICS), "recording rules": frozenset(recording_rules()),
            "derived findings": frozenset(derived.METRICS), "kube-state-metrics": KUBE_STATE_METRICS,
            "prometheus": PROMETHEUS, "reclaim": RECLAIM}


def unknown(names: set[str]) -> set[str]:
    known = set().union(*known_metrics().values())
    return names - known
