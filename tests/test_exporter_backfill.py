"""Backfilled history (``backfill.write_openmetrics``) is accepted by promtool and queryable in a
REAL Prometheus, with the same series and values the live exporter serves (``render_at``)."""

from __future__ import annotations

import re

import pytest

from gpuwatch.exporter.collector import render_at
from gpuwatch.fleet import build_fleet
from tests.support.exporter_history import write_openmetrics
from tests.support.prometheus import backfill, running

pytestmark = pytest.mark.slow


def test_backfilled_history_matches_live_render(tmp_path):
    fleet = build_fleet(gpus=24, seed=0)
    node = "gpu-node-002"
    times = [fleet.start + 86400 + 60 * i for i in range(30)]
    path = tmp_path / "history.om"
    n = write_openmetrics(path, fleet, times, node=node)
    text = path.read_text()
    assert text.endswith("# EOF\n") and text.count("# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE ") == 1
    assert n == sum(1 for x in text.splitlines() if not x.startswith("#"))
    tsdb = backfill(path, tmp_path / "tsdb")
    t = times[17]
    live = render_at(fleet, t, node=node)
    expected = {}
    for line in live.splitlines():
        if line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{") and 'pod="' in line:
            key = (re.search(r'UUID="([^"]+)"', line)[1], re.search(r'GPU_I_ID="(\d+)"', line)[1] if "GPU_I_ID" in line else "")
            expected[key] = float(line.rsplit(" ", 1)[1])
    assert expected
    with running(tmp_path, tsdb=tsdb) as prom:
        got = prom.query('DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""}', at=t)
        got = {(r["metric"]["UUID"], r["metric"].get("GPU_I_ID", "")): float(r["value"][1]) for r in got}
        assert got == pytest.approx(expected)
