"""Reclaim never acts on stale data or data of unknown age (issue 12, defect 2).

Findings from `--findings CSV` carry their as-of time in the ``data_as_of`` column; the checks run
`gpuwatch reclaim --once --apply` (and run_once) against the FAKE Kubernetes API server of
tests/support/fake_kube.py through the real client: a 3-day-old CSV scales nothing (this failed
on the code before the fix, which read no as-of time from a CSV and so never applied
max_data_age_seconds); a CSV without the column, with an empty cell or an unparseable time
acts on nothing and says why in the log and in an audit row; and the re-check right before a
write reads the clock again, so data that turns stale during a pass is not written on.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pandas as pd
import pytest

from gpuwatch.cli import main
from gpuwatch.reclaim import controller, kube
from gpuwatch.reclaim.freshness import csv_as_of, stale_reason
from tests.support.fake_kube import FakeKube, namespace, pod, workload

NOW = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)
WARNED = {"gpuwatch.io/reclaim-warning": "2026-11-15T08:00:00Z"}  # long expired


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def server():
    with FakeKube() as fake:
        fake.add(namespace("ml"))
        fake.add(workload("Deployment", "ml", "web", replicas=2))
        fake.add(workload("ReplicaSet", "ml", "web-6d4f", owner=("Deployment", "web")))
        fake.add(pod("ml", "web-6d4f-x", owner=("ReplicaSet", "web-6d4f"), annotations=WARNED))
        yield fake


def write_csv(tmp_path, *, as_of="__omit__", idle_since=NOW - timedelta(days=3, hours=2)) -> str:
    row = {"namespace": "ml", "pod": "web-6d4f-x", "team": "ml", "idle_since": idle_since.isoformat(),
           "reclaimable_now": True, "gpu_count": 1.0, "usd_per_hour": 3.0}
    if as_of != "__omit__":
        row["data_as_of"] = as_of
    path = tmp_path / "idle_hoarding.csv"
    pd.DataFrame([row]).to_csv(path, index=False)
    return str(path)


def run_cli(server, tmp_path, csv: str, *extra: str) -> int:
    return main(["reclaim", "--once", "--apply", "--no-leader-elect", "--findings", csv,
                 "--db", str(tmp_path / "audit.duckdb"), "--kube-host", server.url,
                 "--now", NOW.isoformat(), *extra])


def audit(tmp_path) -> list[tuple[str, str]]:
    with duckdb.connect(str(tmp_path / "audit.duckdb")) as con:
        return con.execute("SELECT decision, reason FROM reclaim_audit ORDER BY ts").fetchall()


def test_a_three_day_old_csv_with_apply_scales_nothing(server, tmp_path, capsys):
    csv = write_csv(tmp_path, as_of=stamp(NOW - timedelta(days=3)))
    assert run_cli(server, tmp_path, csv) == 0
    assert server.writes() == [], "a 3-day-old findings file must not lead to any write"
    assert server.get("Deployment", "ml", "web")["spec"]["replicas"] == 2
    [(decision, reason)] = audit(tmp_path)
    assert decision == "skipped" and "data is stale" in reason and "4320 min old" in reason


def test_the_same_csv_when_fresh_does_scale(server, tmp_path):
    """The control: only the as-of time differs from the test above."""
    csv = write_csv(tmp_path, as_of=stamp(NOW - timedelta(minutes=5)))
    assert run_cli(server, tmp_path, csv) == 0
    assert server.get("Deployment", "ml", "web")["spec"]["replicas"] == 0


@pytest.mark.parametrize(("as_of", "why"), [
    ("__omit__", "no data_as_of column"),
    ("", "column data_as_of is empty on 1 row(s)"),
    ("yesterday", "column data_as_of, row 2: not an ISO-8601 time: 'yesterday'"),
])
def test_no_as_of_time_means_no_action_a_log_line_and_an_audit_row(server, tmp_path, caplog, as_of, why):
    csv = write_csv(tmp_path, as_of=as_of)
    assert run_cli(server, tmp_path, csv) == 0
    assert server.writes() == []
    assert any(why in r.getMessage() and r.levelname == "ERROR" for r in caplog.records), caplog.text
    [(decision, reason)] = audit(tmp_path)
    assert decision == "skipped" and why in reason


def test_unknown_age_with_no_idle_rows_still_records_the_pass(server, tmp_path):
    path = tmp_path / "idle_hoarding.csv"
    pd.DataFrame([{"namespace": "ml", "pod": "web-6d4f-x", "idle_since": None, "reclaimable_now": False}]
                 ).to_csv(path, index=False)
    assert run_cli(server, tmp_path, str(path)) == 0
    assert server.writes() == []  # not even clearing the warning: the data's age is unknown
    [(decision, reason)] = audit(tmp_path)
    assert decision == "skipped" and "no data_as_of column" in reason


def test_data_turning_stale_during_the_pass_is_not_written_on(server, tmp_path):
    """The pre-write re-check reads the clock again instead of trusting the re-read file."""
    csv = write_csv(tmp_path, as_of=stamp(NOW - timedelta(minutes=10)))
    ticks = iter([NOW] + [NOW + timedelta(minutes=30)] * 10)  # the pass starts fresh, then time passes
    settings = controller.Settings(findings_csv=csv, apply=True, leader_elect=False, clock=lambda: next(ticks))
    result = controller.run_once(settings, duckdb.connect(), kube.connect(host=server.url))
    [row] = result.rows
    assert row["decision"] == "skipped" and "data is stale" in row["detail"], row
    assert server.get("Deployment", "ml", "web")["spec"]["replicas"] == 2
    assert [r for r in server.writes() if "/events" not in r.path] == []


def test_freshness_rule():
    assert stale_reason(NOW, NOW + timedelta(minutes=15), max_age_seconds=900) == ""
    assert "stale" in stale_reason(NOW, NOW + timedelta(minutes=16), max_age_seconds=900)
    assert "unknown" in stale_reason(None, NOW, max_age_seconds=900)
    assert "future" in stale_reason(NOW + timedelta(hours=1), NOW, max_age_seconds=900)
    frame = pd.DataFrame({"data_as_of": ["2026-11-18T09:59:00Z", "2026-11-18T09:00:00Z"]})
    assert csv_as_of(frame, source="f.csv") == (datetime(2026, 11, 18, 9, 0, tzinfo=UTC), "")  # the oldest
