"""Every analysis file keeps its header contract, and the analyzer's outputs on sample_data match
their golden CSVs (tests/golden/analyses/; rewrite with --update-golden and review the diff).

A new ``.sql`` file is tested by the header tests the moment it exists (names() is parametrised).
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import analyses
from gpuwatch.findings import FAILURES
from gpuwatch.findings.command import analyze
from tests.support.bundles import loaded

MINE = ("utilization", "idle_hoarding", "false_utilization", "chargeback", "rightsizing")


@pytest.fixture(scope="module")
def sample():
    con, params = loaded()
    yield con, params
    con.close()


def _extra_params(con, name: str) -> dict:
    """Params that some (app) analyses take beyond the common ones: a bucket, one real pod, one real GPU."""
    ns, pod = con.execute("SELECT namespace, pod FROM stg_pods ORDER BY namespace, pod LIMIT 1").fetchone()
    node, gpu = con.execute("SELECT node, gpu_uuid FROM stg_gpus ORDER BY node, gpu_uuid LIMIT 1").fetchone()
    return {"bucket_seconds": 3600, "namespace": ns, "pod": pod, "node": node, "gpu_uuid": gpu}


@pytest.mark.parametrize("name", analyses.names())
def test_header_params_match_the_body(name):
    header = analyses.header(name)
    assert header.title and header.columns, f"{name}.sql has no title or columns line"
    assert set(header.params) == analyses.body_params(name), f"{name}.sql: declared params differ from used $params"


@pytest.mark.parametrize("name", analyses.names())
def test_header_columns_match_the_result(sample, name):
    con, params = sample
    frame = analyses.run(con, name, **params, **_extra_params(con, name))
    assert tuple(frame.columns) == analyses.header(name).columns


@pytest.mark.parametrize("name", MINE)
def test_sql_follows_the_house_style(name):
    body = analyses.sql(name)
    assert "final AS (" in body and body.rstrip().splitlines()[-1].startswith("SELECT * FROM final")
    assert " FROM samples" not in body and " FROM pods" not in body  # analyses read stg_* only


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format="%.6g", date_format="%Y-%m-%dT%H:%M:%SZ", lineterminator="\n")


@pytest.fixture(scope="module")
def outputs(sample):
    con, params = sample
    return analyze(con, params)


@pytest.mark.parametrize("name", [*MINE[:4], *FAILURES, "recommendations"])
def test_golden_outputs_on_sample_data(outputs, golden, name):
    frame = outputs[name]
    if name == "recommendations":  # repack rows come from mig_fragmentation (tests/test_mig*.py own it)
        frame = frame[frame["kind"] != "repack_mig"]
    golden(f"analyses/{name}.csv", _csv(frame))


def test_golden_rightsizing(sample, golden):
    con, params = sample
    golden("analyses/rightsizing.csv", _csv(analyses.run(con, "rightsizing", **params)))


def test_design_leading_columns(outputs):
    assert tuple(outputs["utilization"].columns[:9]) == (
        "namespace", "pod", "team", "gpu_hours", "mean_gpu_util", "mean_gr_engine_active", "mean_sm_active",
        "mean_tensor_active", "max_fb_used_bytes")
    assert tuple(outputs["idle_hoarding"].columns[:9]) == (
        "namespace", "pod", "team", "idle_gpu_hours", "idle_share", "longest_idle_seconds", "max_fb_used_bytes_idle",
        "idle_cost_usd", "hoarder")
    assert tuple(outputs["recommendations"].columns[:8]) == (
        "id", "kind", "namespace", "pod", "team", "node", "evidence", "monthly_savings_usd")


def test_analyze_command_writes_every_file(tmp_path, capsys):
    from gpuwatch.cli import main
    from tests.support.bundles import SAMPLE_DATA

    out = tmp_path / "out"
    code = main(["analyze", "--db", str(tmp_path / "g.duckdb"), "--input", str(SAMPLE_DATA), "--out", str(out),
                 "--format", "table", "--idle-below", "0.05"])
    assert code == 0
    names = {p.name for p in out.iterdir()}
    assert {"utilization.csv", "idle_hoarding.csv", "false_utilization.csv", "chargeback.csv",
            "recommendations.csv"} <= names
    text = capsys.readouterr().out
    assert "fleet cost $" in text and "hoarders:" in text


def test_false_share_is_zero_when_judged_and_unknown_when_not():
    from gpuwatch import store
    from gpuwatch.analyses.params import params

    t0 = pd.Timestamp("2026-11-09T00:00:00")
    rows = [{"ts": t0 + pd.Timedelta(minutes=i), "node": "n1", "gpu_uuid": gpu, "namespace": "ns", "pod": pod,
             "gpu_util": 0.9, "sm_active": sm}
            for i in range(10) for gpu, pod, sm in (("GPU-a", "busy", 0.8), ("GPU-b", "blind", None),
                                                    ("GPU-c", "false", 0.1))]
    con = store.connect(None)
    store.load(con, {"samples": pd.DataFrame(rows)}, source="test")
    frame = analyses.run(con, "false_utilization", **params(t0, t0 + pd.Timedelta(hours=1))).set_index("pod")
    assert frame.loc["busy", "false_share"] == 0 and not frame.loc["busy", "offender"]
    assert pd.isna(frame.loc["blind", "false_share"]) and not frame.loc["blind", "effective_known"]
    assert frame.loc["false", "false_share"] == 1 and frame.loc["false", "offender"]
    assert frame.loc["false", "false_util_gpu_hours"] == pytest.approx(10 / 60)


def test_savings_never_exceed_the_observed_waste_they_remove(sample, outputs):
    """docs/architecture.md#savings, checked against the analyses' own waste figures (not the
    recommendations' columns): per kind, the monthly savings are at most the run-rate of the waste."""
    from gpuwatch.findings import observed_hours

    con, params = sample
    recs, idle, charge = outputs["recommendations"], outputs["idle_hoarding"], outputs["chargeback"]
    hours = observed_hours(analyses.run(con, "data_coverage"), params["start"], params["end"])
    window = (params["end"] - params["start"]).total_seconds() / 3600
    monthly = 730.0 / hours
    by_kind = recs.groupby("kind")["monthly_savings_usd"].sum()
    assert (recs["monthly_savings_usd"] <= recs["monthly_waste_usd"] + 0.005).all()
    # giving GPUs back saves the reclaimable pods' own idle rate (idle_bridge): never more than their price
    now = idle[idle["reclaimable_now"].fillna(False).astype(bool)]
    assert 0 < by_kind["reclaim_idle"] <= now["usd_per_hour"].sum() * 730 + 0.01
    assert by_kind.get("repack_mig", 0) <= charge.loc[charge["kind"] == "stranded", "cost_usd"].sum() / window * 730 + 0.01
    assert by_kind["investigate_false_util"] == 0  # at stake, not counted
    pods = charge[charge["kind"] == "team"]
    assert recs["monthly_savings_usd"].sum() <= (pods["idle_usd"].sum() + pods["productive_usd"].sum()) * monthly


def test_windows_holding_the_same_data_give_the_same_savings(sample):
    """A 7-day and a 14-day window ending at the same time over 7 days of data: same recommendations."""
    from datetime import timedelta

    from gpuwatch.analyses import params as defaults
    from gpuwatch.findings import findings

    con, params = sample
    week = findings(con, params, only=("recommendations",))["recommendations"]
    wider = defaults.params(params["end"] - timedelta(days=14), params["end"])
    fortnight = findings(con, wider, only=("recommendations",))["recommendations"]
    columns = ["id", "monthly_savings_usd", "monthly_waste_usd", "basis"]
    pd.testing.assert_frame_equal(week[columns], fortnight[columns])


def test_rightsizing_offers_mig_profiles_only_on_mig_capable_models():
    """A small pod on a whole L40S (no MIG) or an unknown model gets no MIG profile; on an H100 it does."""
    import pandas as pd

    from gpuwatch import store
    from gpuwatch.analyses.params import params

    t0 = pd.Timestamp("2026-11-09")
    models = {"GPU-h": "NVIDIA H100 80GB HBM3", "GPU-l": "NVIDIA L40S", "GPU-x": "Mystery Accelerator"}
    devices = [{"node": "n1", "gpu_uuid": g, "gpu_model": m, "fb_total_bytes": 81559 * 2**20} for g, m in models.items()]
    pods = [{"namespace": "ns", "pod": f"p-{g[-1]}", "node": "n1", "gpu_count": 1.0, "device_ids": g,
             "start_ts": t0, "gpu_resource": "nvidia.com/gpu"} for g in models]
    samples = [{"ts": t0 + pd.Timedelta(minutes=m), "node": "n1", "gpu_uuid": g, "namespace": "ns", "pod": f"p-{g[-1]}",
                "gpu_util": 0.3, "sm_active": 0.1, "fb_used_bytes": 4 * 2**30} for g in models for m in range(240)]
    prices = [{"gpu_model": m, "usd_per_gpu_hour": 2.0} for m in models.values()]
    con = store.connect(None)
    store.load(con, {"devices": pd.DataFrame(devices), "pods": pd.DataFrame(pods), "samples": pd.DataFrame(samples),
                     "prices": pd.DataFrame(prices)}, source="test")
    frame = analyses.run(con, "rightsizing", **params(t0, t0 + pd.Timedelta(days=1)))
    assert frame["pod"].tolist() == ["p-h"] and frame["profile"].tolist() == ["1g.10gb"]


def _rightsize(gpus: dict, *, sm_active: float, peak_mib: int, instances: tuple = ()):
    """rightsizing over one pod per whole GPU (uuid -> (model, FB MiB)) at ``sm_active`` with a flat
    ``peak_mib`` of memory, beside ``instances`` (model, profile id, name, FB MiB) seen on another node."""
    import pandas as pd

    from gpuwatch import store
    from gpuwatch.analyses.params import params

    t0 = pd.Timestamp("2026-11-09")
    devices = [{"node": "n1", "gpu_uuid": g, "gpu_model": m, "fb_total_bytes": mib * 2**20} for g, (m, mib) in gpus.items()]
    devices += [{"node": "n9", "gpu_uuid": f"GPU-m{i}", "gpu_model": m, "fb_total_bytes": mib * 2**20, "mig_gi_id": 7,
                 "mig_profile": name, "mig_profile_id": pid} for i, (m, pid, name, mib) in enumerate(instances)]
    pods = [{"namespace": "ns", "pod": f"p-{g}", "node": "n1", "gpu_count": 1.0, "device_ids": g, "start_ts": t0,
             "gpu_resource": "nvidia.com/gpu"} for g in gpus]
    samples = [{"ts": t0 + pd.Timedelta(minutes=m), "node": "n1", "gpu_uuid": g, "namespace": "ns", "pod": f"p-{g}",
                "gpu_util": 0.3, "sm_active": sm_active, "fb_used_bytes": peak_mib * 2**20} for g in gpus for m in range(240)]
    prices = [{"gpu_model": m, "usd_per_gpu_hour": 2.0} for m, _ in gpus.values()]
    con = store.connect(None)
    store.load(con, {"devices": pd.DataFrame(devices), "pods": pd.DataFrame(pods), "samples": pd.DataFrame(samples),
                     "prices": pd.DataFrame(prices)}, source="test")
    frame = analyses.run(con, "rightsizing", **params(t0, t0 + pd.Timedelta(days=1)))
    con.close()
    return dict(zip(frame["pod"], frame["profile"], strict=True))


H100, H200, A100 = ("NVIDIA H100 80GB HBM3", 81559), ("NVIDIA H200", 143771), ("NVIDIA A100-SXM4-40GB", 40960)


def test_rightsizing_fits_against_the_memory_and_sms_a_real_gpu_reported():
    """On a real H100 a 1g.10gb instance holds 9984 MiB and 16 of 132 SMs (tests/test_real_h100.py), not
    81559 / 8 = 10195 MiB and 1/7 of the SMs: a pod peaking at 8400 MiB (x 1.2 headroom = 10080) or
    keeping 13 % of the SMs busy does not fit it, and gets the 1g.20gb (20096 MiB, 26 SMs)."""
    assert _rightsize({"GPU-a": H100}, sm_active=0.05, peak_mib=8000) == {"p-GPU-a": "1g.10gb"}
    assert _rightsize({"GPU-a": H100}, sm_active=0.05, peak_mib=8400) == {"p-GPU-a": "1g.20gb"}
    assert _rightsize({"GPU-a": H100}, sm_active=0.13, peak_mib=4000) == {"p-GPU-a": "1g.20gb"}
    # NVIDIA's names, not a fraction's: an H200's 3g instance is 3g.71gb (143771 / 2 MiB would say 70)
    assert _rightsize({"GPU-b": H200}, sm_active=0.3, peak_mib=50_000) == {"p-GPU-b": "3g.71gb"}


def test_rightsizing_offers_no_profile_whose_instance_memory_nobody_reported():
    """An A100 40GB: no captured profile memory, so no offer (unknown, not a slice fraction); once the
    store has seen that model's 1g instances, their own FB total decides (4864 MiB fits 4000 x 1.2)."""
    assert _rightsize({"GPU-c": A100}, sm_active=0.05, peak_mib=4000) == {}
    seen = ((A100[0], 19, "1g.5gb", 4864),)
    assert _rightsize({"GPU-c": A100}, sm_active=0.05, peak_mib=4000, instances=seen) == {"p-GPU-c": "1g.5gb"}
    assert _rightsize({"GPU-c": A100}, sm_active=0.05, peak_mib=4100, instances=seen) == {}
    # an instance row claiming more than its slices' fraction of the GPU (40960 / 8 MiB) is not believed
    bogus = ((A100[0], 19, "1g.5gb", 10**9),)
    assert _rightsize({"GPU-c": A100}, sm_active=0.05, peak_mib=4400, instances=bogus) == {}
