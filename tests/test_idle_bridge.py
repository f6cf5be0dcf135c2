"""The idle bridge (gpuwatch/idle_bridge.py): one answer to "what does giving idle GPUs back save".

On sample_data the four surfaces - ``gpuwatch analyze``'s summary, the app's Idle hoarding page, the
weekly report and ``gpuwatch export-derived`` - print the same five steps, and each step is checked
against what the analyses say on their own (chargeback's idle to the cent, the reclaimable pods'
GPUs and $/h, the reclaim_idle recommendations' total). A pod's monthly saving is its own idle rate:
it does not jump between a 7-day and a 24-hour window. Hand-made frames pin each step's rule.
"""

from __future__ import annotations

import datetime as dt
import re

import pandas as pd
import pytest

from gpuwatch import idle_bridge, store
from gpuwatch.analyses.params import params, window
from gpuwatch.cli import main
from gpuwatch.findings import exporter as derived
from gpuwatch.findings import findings
from tests import app_support as support
from tests.conftest import ROOT

STEPS = ("idle", "hoarders", "holding", "reclaimable", "run_rate")


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    return support.load_sample(tmp_path_factory.mktemp("bridge") / "sample.duckdb")


@pytest.fixture(scope="module")
def week(sample_db):
    """The window every surface uses on sample_data by default (7 days ending the hour after the data)."""
    con = store.connect(str(sample_db), read_only=True)
    start, end = window(store.data_range(con)[1])
    frames = findings(con, params(start, end), only=("idle_hoarding", "chargeback", "recommendations"))
    con.close()
    assert (start, end) == (dt.datetime(2026, 11, 9), dt.datetime(2026, 11, 16))  # ISO week 2026-W46: the report's
    return frames


def _amounts(rows: list[dict]) -> dict[str, tuple[int, str]]:
    return {r["step"]: (r["pods"], r["amount"]) for r in rows}


def test_the_steps_are_what_the_analyses_say(week):
    idle, charge, recs = week["idle_hoarding"], week["chargeback"], week["recommendations"]
    steps = idle_bridge.bridge(idle, chargeback=charge)
    team_idle = charge.loc[charge["kind"] == "team", "idle_usd"].sum()
    assert steps.idle_usd == round(team_idle, 2)  # the chargeback's idle, to the cent
    assert steps.idle_usd == pytest.approx(idle["idle_cost_usd"].sum(), abs=0.01)  # = every pod's idle cost
    hoarders = idle[idle["hoarder"]]
    assert (steps.hoarder_pods, steps.hoarder_usd) == (len(hoarders), round(hoarders["idle_cost_usd"].sum(), 2))
    now = idle[idle["reclaimable_now"]]
    assert steps.reclaimable_pods == len(now) > 0 and steps.reclaimable_gpus == now["gpu_count"].sum()
    assert steps.reclaimable_usd_per_hour == round(now["usd_per_hour"].sum(), 2)
    assert 0 < steps.reclaimable_pods < steps.holding_pods < steps.hoarder_pods <= steps.idle_pods
    # step 5 is what the "give back" recommendations save, and never more than the GPUs' price
    give_back = recs[recs["kind"] == "reclaim_idle"]
    assert set(zip(give_back["namespace"], give_back["pod"], strict=True)) == set(zip(now["namespace"], now["pod"], strict=True))
    assert give_back["monthly_savings_usd"].sum() == pytest.approx(steps.run_rate_usd_per_month, abs=0.06)
    assert steps.run_rate_usd_per_month <= steps.reclaimable_usd_per_hour * 730
    # hoarders still holding GPUs but busy at the end: at stake, not counted
    asked = recs[recs["kind"] == "investigate_hoarder"]
    assert len(asked) == steps.holding_pods - steps.reclaimable_pods and not asked["counted"].any()


def test_four_surfaces_print_the_same_bridge(sample_db, week, tmp_path, capsys, monkeypatch):
    steps = idle_bridge.bridge(week["idle_hoarding"], chargeback=week["chargeback"])
    want = _amounts(steps.rows())
    # 1. gpuwatch analyze --format table
    assert main(["analyze", "--db", str(sample_db), "--format", "table"]) == 0
    text = capsys.readouterr().out
    for label, (pods, amount) in zip(("1. Idle in the window", "2. of which hoarders", "3. still holding their GPUs",
                                      "4. reclaimable now", "5. run-rate if given back"), want.values(), strict=True):
        assert re.search(rf"{re.escape(label)}\s+{pods:,} pods\s+{re.escape(amount)}\s", text), (label, text)
    # 2. the weekly report (ISO week 2026-W46 = the same window)
    assert main(["report", "weekly", "--db", str(sample_db), "--out", str(tmp_path / "report"), "--week", "2026-W46"]) == 0
    html = (tmp_path / "report" / "fleet.html").read_text()
    for step, (pods, amount) in want.items():
        row = re.search(rf'<tr id="bridge-{step}"><td>[^<]*</td><td class="n">([^<]*)</td><td class="n">([^<]*)</td>', html)
        assert row and row.groups() == (f"{pods:,}", amount), step
    # 3. export-derived's gauges
    con = store.connect(str(sample_db), read_only=True)
    metrics = derived.render(con, window="7d")
    con.close()
    served = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
              if line and not line.startswith("#")}
    assert served['gpuwatch_idle_bridge_usd{step="idle"}'] == steps.idle_usd
    assert served['gpuwatch_idle_bridge_usd{step="hoarders"}'] == steps.hoarder_usd
    assert served['gpuwatch_idle_bridge_usd{step="holding"}'] == steps.holding_usd
    assert [served[f'gpuwatch_idle_bridge_pods{{step="{s}"}}'] for s in STEPS[:4]] == [
        steps.idle_pods, steps.hoarder_pods, steps.holding_pods, steps.reclaimable_pods]
    assert served["gpuwatch_reclaimable_gpus"] == steps.reclaimable_gpus
    assert served["gpuwatch_reclaimable_usd_per_hour"] == steps.reclaimable_usd_per_hour
    assert served["gpuwatch_reclaimable_run_rate_usd_per_month"] == steps.run_rate_usd_per_month
    # 4. the app's Idle hoarding page (its default window: the same whole days)
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GPUWATCH_DB", str(sample_db))
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120)
    at.run()
    at.switch_page("views/idle_hoarding.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.table[0].value
    assert list(zip(table["Pods"], table["Amount"], strict=True)) == [(f"{p:,}", a) for p, a in want.values()]
    assert "When the window changes" in table.columns


def test_a_pods_saving_does_not_jump_between_7_day_and_24_hour_windows(sample_db):
    con = store.connect(str(sample_db), read_only=True)
    start, end = window(store.data_range(con)[1])
    week_recs = findings(con, params(start, end), only=("recommendations",))["recommendations"]
    day_recs = findings(con, params(end - dt.timedelta(hours=24), end), only=("recommendations",))["recommendations"]
    con.close()
    both = week_recs[week_recs["kind"] == "reclaim_idle"].merge(day_recs, on="id", suffixes=("_week", "_day"))
    assert len(both) >= 5
    ratio = both["monthly_savings_usd_day"] / both["monthly_savings_usd_week"]
    # the same pods, idle at the same rate: the saving is the pod's rate, not its share of the window
    assert ratio.between(0.75, 1.4).all(), both[["pod_week", "monthly_savings_usd_week", "monthly_savings_usd_day"]]


def _pod(pod: str, **overrides) -> dict:
    row = {"namespace": "ns", "pod": pod, "team": "t", "hoarder": True, "idle_share": 0.9, "idle_cost_usd": 36.0,
           "observed_seconds": 10 * 3600.0, "observed_gpu_hours": 10.0, "usd_per_hour": 4.0, "gpu_count": 1.0,
           "reclaimable_now": False, "held_at_end": False, "idle_since": pd.NaT, "end_ts": pd.NaT,
           "max_fb_used_bytes_idle": 1 << 30}
    return {**row, **overrides}


def test_each_step_keeps_its_rule():
    idle = pd.DataFrame([
        _pod("busy", hoarder=False, idle_cost_usd=2.0, idle_share=0.1),
        _pod("ended", end_ts=pd.Timestamp("2026-11-12")),                      # a hoarder that ended
        _pod("busy-now", held_at_end=True),                                    # still holding, busy at the end
        _pod("idle-now", held_at_end=True, reclaimable_now=True, gpu_count=2.0, usd_per_hour=8.0, idle_cost_usd=72.0,
             idle_since=pd.Timestamp("2026-11-15T20:00:00")),
        _pod("never", hoarder=False, idle_cost_usd=0.0, idle_share=0.0),
    ])
    steps = idle_bridge.bridge(idle)
    assert (steps.idle_pods, steps.idle_usd) == (4, 2.0 + 36 + 36 + 72)
    assert (steps.hoarder_pods, steps.hoarder_usd) == (3, 144.0)
    assert (steps.holding_pods, steps.holding_usd) == (2, 108.0)
    assert (steps.reclaimable_pods, steps.reclaimable_gpus, steps.reclaimable_usd_per_hour) == (1, 2.0, 8.0)
    assert steps.run_rate_usd_per_month == 72.0 / 10 * 730  # its idle cost per hour observed, not per window hour
    from gpuwatch.recommendations import recommend

    recs = recommend(idle=idle, window_hours=168.0)
    assert dict(zip(recs["pod"], recs["kind"], strict=True)) == {"idle-now": "reclaim_idle", "busy-now": "investigate_hoarder"}
    assert recs.set_index("pod").loc["idle-now", "monthly_savings_usd"] == pytest.approx(5256.0)
    assert recs.set_index("pod").loc["busy-now", "monthly_savings_usd"] == 0.0
    assert idle_bridge.bridge(None).rows()[-1]["amount"] == "$0.00/month"


def test_the_reclaim_pass_says_where_it_sits_on_the_bridge(sample_db, week, tmp_path, capsys):
    """`gpuwatch reclaim`'s "frees N GPUs = $X/h" is the part of step 4 its policy acts on, said next to step 4."""
    import shutil

    db = tmp_path / "reclaim.duckdb"
    shutil.copy(sample_db, db)  # the pass writes its audit rows
    assert main(["reclaim", "--once", "--db", str(db), "--assume-opted-in", "--no-cluster"]) == 0
    text = capsys.readouterr().out
    steps = idle_bridge.bridge(week["idle_hoarding"])
    frees = re.search(r"Acting now frees ([\d.]+) GPUs = \$([\d,.]+)/h", text)
    line = re.search(r"Idle bridge step 4: (\d+) pods reclaimable now \(([\d.]+) GPUs = \$([\d,.]+)/h\); "
                     r"this pass acts on (\d+) of them", text)
    assert frees and line, text
    assert (int(line[1]), float(line[2]), line[3]) == (steps.reclaimable_pods, steps.reclaimable_gpus,
                                                       f"{steps.reclaimable_usd_per_hour:,.2f}")
    assert float(frees[1]) <= steps.reclaimable_gpus and float(frees[2].replace(",", "")) <= steps.reclaimable_usd_per_hour
