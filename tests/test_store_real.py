"""Ingest of a REAL trace: Alibaba's GenAI serving trace (GenTD26, shared_data) as a bundle, duty
cycle (%) as gpu_util and GPU memory as fb_used_bytes, container_ip as pod. The idle findings must
match an independent pandas computation on the raw CSV, the README's "21 containers average <1%
duty cycle while holding >1 GiB" must be among the hoarders, and effective utilization must be
unknown (the trace has no SM activity), never 0.
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params, window
from tests.support.bundles import genai_frames


@pytest.fixture(scope="module")
def genai(shared_data):
    con = store.connect(None)
    store.load(con, genai_frames(shared_data), source="alibaba_v2026_genai")
    p = params(*window(store.data_range(con)[1]))
    yield con, p, shared_data / "alibaba_v2026_genai"
    con.close()


def _raw_idle(base) -> pd.DataFrame:
    """Idle share and observed time per container, from the raw duty-cycle CSV alone."""
    duty = pd.read_csv(base / "pod_gpu_duty_cycle_anon.csv")
    duty = duty.groupby(["container_ip", "timestamp_anon"], as_index=False)["value"].max()
    rows = []
    for pod, g in duty.sort_values("timestamp_anon").groupby("container_ip"):
        step = g["timestamp_anon"].diff().median() if len(g) > 1 else 60.0
        idle = int((g["value"] < 5).sum())  # duty cycle is in percent: 5% = the 0.05 threshold
        rows.append({"pod": pod, "idle_share": idle / len(g), "observed_seconds": len(g) * step})
    return pd.DataFrame(rows).set_index("pod")


def test_idle_share_matches_raw_computation(genai):
    con, p, base = genai
    found = analyses.run(con, "idle_hoarding", **p).set_index("pod")
    raw = _raw_idle(base)
    assert set(found.index) == set(raw.index)
    joined = raw.join(found[["idle_share", "observed_seconds", "hoarder"]].add_suffix("_found"))
    assert (joined["idle_share"] - joined["idle_share_found"]).abs().max() < 1e-9
    assert (joined["observed_seconds"] - joined["observed_seconds_found"]).abs().max() < 1e-6
    by_share = (joined["idle_share"] >= 0.9) & (joined["observed_seconds"] >= 3600)
    assert joined.loc[by_share, "hoarder_found"].all()  # every share-based hoarder is found (plus reclaimable-now ones)


def test_readme_idle_memory_holders_are_hoarders(genai):
    con, p, base = genai
    duty = pd.read_csv(base / "pod_gpu_duty_cycle_anon.csv").groupby("container_ip")["value"].mean()
    memory = pd.read_csv(base / "pod_gpu_memory_used_bytes_anon.csv").groupby("container_ip")["value"].mean()
    holders = set(duty[duty < 1].index) & set(memory[memory > 1 << 30].index)
    assert len(holders) == 21  # the trace README's own figure
    found = analyses.run(con, "idle_hoarding", **p).set_index("pod").loc[sorted(holders)]
    assert (found["idle_share"] >= 0.9).all() and (found["max_fb_used_bytes_idle"] > 1 << 30).all()
    # hoarders, except the 5 short-lived containers with < 1 h observed (e.g. one lived 6 samples)
    enough = (found["observed_seconds"] >= 3600) | found["reclaimable_now"]
    assert (found["hoarder"] == enough).all() and enough.sum() == 16


def test_effective_utilization_is_unknown_not_zero(genai):
    con, p, _ = genai
    util = analyses.run(con, "utilization", **p)
    assert util["mean_sm_active"].isna().all() and util["mean_effective"].isna().all()
    assert (util["mean_gpu_util"] <= 1).all()  # percent became a ratio
    false = analyses.run(con, "false_utilization", **p)
    assert not false["effective_known"].any() and false["false_share"].isna().all()
