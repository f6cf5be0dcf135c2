"""Grafana dashboards in dashboards/*.json.

Each parses, has a fixed unique uid, a `datasource` variable of type prometheus that every panel
and query uses (`${datasource}`), non-overlapping panels; the files are exactly what
dashboards/build.py writes (so edits go through it); and every metric a query names is served
by the exporter (gpuwatch.exporter.metrics.METRICS), a recording rule, the derived findings
(gpuwatch.findings.exporter.METRICS), kube-state-metrics (kube_pod_labels only) or Prometheus itself, so
a renamed metric fails here instead of leaving an empty panel. Raw per-pod panels query both
label spellings (`pod` and dcgm-exporter's `exported_pod`).
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from tests.support.promql_names import ROOT, metric_names, unknown

DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
UIDS = {"gpuwatch-fleet-efficiency.json": "gpuwatch-fleet", "gpuwatch-idle-by-team.json": "gpuwatch-idle-teams",
        "gpuwatch-pod-detail.json": "gpuwatch-pod", "gpuwatch-mig.json": "gpuwatch-mig",
        "gpuwatch-exporter-health.json": "gpuwatch-exporter"}


def load(path):
    return json.loads(path.read_text())


def queries(board: dict) -> list[tuple[str, str]]:
    """(panel title, expr) for every panel target and query variable."""
    out = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        if var["type"] == "query":  # Grafana's label_values(SERIES, LABEL): only SERIES is PromQL
            series = re.fullmatch(r"label_values\((.*),\s*\w+\)", var["query"]["query"]).group(1)
            out.append((f"variable {var['name']}", series))
    return out


def test_the_five_dashboards_with_fixed_unique_uids():
    assert {p.name: load(p)["uid"] for p in DASHBOARDS} == UIDS
    assert len(set(UIDS.values())) == len(UIDS)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_templated_prometheus_datasource_everywhere(path):
    board = load(path)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for item in board["panels"] + [v for v in variables.values() if v["type"] == "query"]:
        assert item["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, item.get("title")
        for target in item.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
    assert "${DS_PROMETHEUS}" not in path.read_text() and "__inputs" not in board


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_have_unique_ids_and_do_not_overlap(path):
    panels = load(path)["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_queried_metric_exists(path):
    pytest.importorskip("gpuwatch.exporter.metrics", reason="the exporter's METRICS table is not written yet")
    for title, expr in queries(load(path)):
        names = metric_names(expr)
        assert names, f"{path.name}: {title}: no metric found in {expr!r}"
        assert unknown(names) == set(), f"{path.name}: {title}: unknown metric(s) in {expr!r}"


def test_raw_pod_queries_accept_dcgm_exporter_labels():
    board = load(ROOT / "dashboards" / "gpuwatch-pod-detail.json")
    for title, expr in queries(board):
        if "DCGM_FI_" in expr:
            assert 'exported_pod="$pod"' in expr and 'pod="$pod"' in expr, title


def test_team_join_uses_kube_state_metrics_with_namespace_fallback():
    exprs = [e for _, e in queries(load(ROOT / "dashboards" / "gpuwatch-idle-by-team.json"))]
    joined = [e for e in exprs if "kube_pod_labels" in e]
    assert joined and all('"team", "$1", "namespace"' in e for e in joined)


def test_files_are_what_build_py_writes():
    spec = importlib.util.spec_from_file_location("dashboards_build", ROOT / "dashboards" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    rendered = build.render()
    assert set(rendered) == {p.name for p in DASHBOARDS}
    for name, text in rendered.items():
        assert (ROOT / "dashboards" / name).read_text() == text, f"{name} drifted: run python dashboards/build.py"
