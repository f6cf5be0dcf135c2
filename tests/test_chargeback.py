"""Chargeback reconciles to the cent: for random fleets, prices, MIG layouts, time-sliced and
unlabeled pods (hypothesis), on sample_data, and on the real Alibaba DLRM allocation trace
(allocations only, app_name as team). Also the cent law itself (fleet_cents: parts as rounded, unallocated the remainder).
"""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch import analyses, store
from gpuwatch.analyses.chargeback import PARTS, cents, fleet_cents
from gpuwatch.analyses.params import params
from tests.support.bundles import DLRM_T0, dlrm_frames, loaded

T0 = pd.Timestamp("2026-11-09T00:00:00")
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")


def _check_reconciles(charge: pd.DataFrame) -> None:
    fleet = charge["fleet_cost_usd"].iloc[0]
    assert round(charge["cost_usd"].sum(), 2) == round(fleet, 2)
    teams = charge[charge["kind"] == "team"]
    assert (teams[list(PARTS)].sum(axis=1).round(2) == teams["cost_usd"].round(2)).all()
    for column in ("cost_usd", *PARTS):  # every part is a whole number of cents
        assert ((charge[column].dropna() * 100).round(6) % 1 == 0).all(), column  # NaN: unpriced, no cents


@given(st.lists(st.floats(0, 1e6), max_size=40), st.floats(0, 1e4), st.floats(0, 1e3))
def test_fleet_cents_sum_exactly_and_move_a_part_by_a_cent_at_most(parts, stranded, spare):
    """For a fleet that covers its parts: the parts in cents sum exactly to the fleet's cents, unallocated
    is the remainder and never negative, each part is its own cents (or one less, only where the parts'
    rounding overdraws a fully allocated fleet)."""
    fleet = math.fsum([*parts, stranded, spare])
    out = fleet_cents(parts, fleet=fleet, stranded=stranded)
    assert sum(out) == cents(fleet) and out[-2] >= 0 and out[-1] == cents(stranded)
    assert all(cents(p) - 1 <= c <= cents(p) for p, c in zip(parts, out, strict=False))


pod_strategy = st.fixed_dictionaries({
    "gpu": st.integers(0, 5), "start_h": st.floats(-24, 160), "hours": st.floats(0.1, 200),
    "kind": st.sampled_from(["whole", "shared", "mig"]), "team": st.sampled_from(["a", "b", ""]),
    "busy": st.floats(0, 1), "sm": st.one_of(st.none(), st.floats(0, 1)),
})


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prices=st.lists(st.one_of(st.none(), st.floats(0.01, 50)), min_size=2, max_size=2),
       profile_share=st.one_of(st.none(), st.floats(0.01, 1)),
       pods=st.lists(pod_strategy, max_size=12))
def test_chargeback_reconciles_for_random_fleets(prices, profile_share, pods):
    devices, pod_rows, samples = [], [], []
    for g in range(6):
        devices.append({"node": f"n{g // 3}", "gpu_uuid": f"GPU-{g}", "gpu_model": MODELS[g % 2]})
        if g == 5:  # one MIG GPU: a 3g and a 1g instance, slices left free
            devices += [{"node": "n1", "gpu_uuid": "GPU-5", "gpu_model": MODELS[1], "mig_gi_id": 1,
                         "mig_profile": "3g.40gb", "mig_profile_id": 9, "mig_placement_start": 0, "mig_placement_size": 4},
                        {"node": "n1", "gpu_uuid": "GPU-5", "gpu_model": MODELS[1], "mig_gi_id": 7,
                         "mig_profile": "1g.10gb", "mig_profile_id": 19, "mig_placement_start": 4, "mig_placement_size": 1}]
    for i, p in enumerate(pods):
        start = T0 + pd.Timedelta(hours=p["start_h"])
        end = start + pd.Timedelta(hours=p["hours"])
        resource, count = {"whole": ("nvidia.com/gpu", 1.0), "shared": ("nvidia.com/gpu.shared", 0.25),
                           "mig": ("nvidia.com/mig-3g.40gb", 1.0)}[p["kind"]]
        gpu = 5 if p["kind"] == "mig" else p["gpu"] % 5
        pod_rows.append({"namespace": f"ns{i % 3}", "pod": f"pod{i}", "node": f"n{gpu // 3}", "team": p["team"],
                         "start_ts": start, "end_ts": end, "gpu_resource": resource, "gpu_count": count,
                         "device_ids": f"GPU-{gpu}"})
        for k in range(int(min(p["hours"], 6) * 4)):  # a few 15-minute samples
            samples.append({"ts": start + pd.Timedelta(minutes=15 * k), "node": f"n{gpu // 3}", "gpu_uuid": f"GPU-{gpu}",
                            "mig_gi_id": 1 if p["kind"] == "mig" else None, "namespace": f"ns{i % 3}", "pod": f"pod{i}",
                            "gpu_util": p["busy"], "sm_active": p["sm"]})
    price_rows = [{"gpu_model": m, "usd_per_gpu_hour": v} for m, v in zip(MODELS, prices, strict=True) if v is not None]
    if profile_share is not None:  # the 3g and the 1g beside it cost at most their GPU (a fixed $1 on an unpriced one)
        profile_price = 1.0 if prices[1] is None else prices[1] * profile_share * 6 / 7
        price_rows.append({"gpu_model": f"{MODELS[1]}/3g.40gb", "usd_per_gpu_hour": profile_price})
    frames = {"devices": pd.DataFrame(devices), "prices": pd.DataFrame(price_rows, columns=["gpu_model", "usd_per_gpu_hour"])}
    if pod_rows:
        frames["pods"] = pd.DataFrame(pod_rows)
    if samples:
        frames["samples"] = pd.DataFrame(samples)
    con = store.connect(None)
    store.load(con, frames, source="hypothesis")
    charge = analyses.run(con, "chargeback", **params(T0, T0 + pd.Timedelta(days=7)))
    _check_reconciles(charge)
    hours = _present_hours(pod_rows, samples, lo=T0, hi=T0 + pd.Timedelta(days=7))
    # a GPU costs money only while it is known to exist (its samples, pods on its node), priced GPUs
    # only, never the whole window for all six
    expected_fleet = sum(prices[g % 2] * h for g, h in hours.items() if prices[g % 2] is not None)
    assert charge["fleet_cost_usd"].iloc[0] == round(expected_fleet, 2)
    _check_every_device_priced_or_reported(charge, prices=prices, pods=pod_rows, present=set(hours))
    con.close()


def _present_hours(pods: list[dict], samples: list[dict], *, lo: pd.Timestamp, hi: pd.Timestamp) -> dict[int, float]:
    """Per GPU index, the hours inside [lo, hi) it is known to exist, computed apart from the SQL by the
    documented rule: runs of its samples (gaps up to an hour bridged) widened by their median step on
    either side (never before the data's first sample), and the intervals of pods on its node."""
    out = {}
    for gpu in range(6):
        spans = [(p["start_ts"], p["end_ts"]) for p in pods if p["node"] == f"n{gpu // 3}"]
        times = sorted({s["ts"] for s in samples if s["gpu_uuid"] == f"GPU-{gpu}"})
        runs = [[times[0]]] if times else []
        for t in times[1:]:
            if (t - runs[-1][-1]).total_seconds() <= 3600:
                runs[-1].append(t)
            else:
                runs.append([t])
        for run in runs:
            gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(run)]
            step = pd.Timedelta(seconds=float(pd.Series(gaps).median()) if gaps else 60.0)
            spans.append((max(run[0] - step, min(s["ts"] for s in samples)), run[-1] + step))
        total, reach = 0.0, None
        for a, b in sorted((max(a, lo), min(b, hi)) for a, b in spans):
            if b <= a:
                continue
            a = a if reach is None else max(a, reach)
            if reach is None or b > reach:
                total += max((b - a).total_seconds(), 0.0)
                reach = b
        if total > 0:
            out[gpu] = total / 3600
    return out


def _check_every_device_priced_or_reported(charge: pd.DataFrame, *, prices: list, pods: list[dict],
                                           present: set[int]) -> None:
    """Unpriced GPUs present in the window are one unpriced_capacity row; a pod on one is never $0 in a team."""
    unpriced_gpus = sum(prices[g % 2] is None for g in present)
    assert charge.loc[charge["kind"] == "unpriced_capacity", "pods"].sum() == unpriced_gpus
    assert charge.loc[charge["kind"].isin(["unpriced", "unpriced_capacity"]), "cost_usd"].isna().all()
    assert charge.loc[charge["kind"] == "unallocated", "cost_usd"].iloc[0] >= 0
    in_window = [p for p in pods if p["end_ts"] > T0 and p["start_ts"] < T0 + pd.Timedelta(days=7)]
    on_unpriced = {(p["team"] or p["namespace"], p["namespace"]) for p in in_window
                   if prices[int(p["device_ids"][4:]) % 2] is None}  # GPU-5, the MIG one, is MODELS[1]
    reported = set(zip(*(charge.loc[charge["kind"] == "unpriced", c] for c in ("team", "namespace")), strict=True))
    assert on_unpriced <= reported


def test_sample_data_reconciles():
    con, p = loaded()
    charge = analyses.run(con, "chargeback", **p)
    _check_reconciles(charge)
    idle = analyses.run(con, "idle_hoarding", **p)
    # chargeback's idle part is idle_hoarding's idle cost, rounded
    assert abs(charge["idle_usd"].sum() - idle["idle_cost_usd"].sum()) < 0.01 * len(charge)
    con.close()


def test_dlrm_allocation_trace_reconciles(shared_data):
    frames = dlrm_frames(shared_data, usd_per_gpu_hour=1.0)
    con = store.connect(None)
    store.load(con, frames, source="alibaba_gpu_v2025_dlrm")
    end = DLRM_T0 + pd.Timedelta(days=31)
    charge = analyses.run(con, "chargeback", **params(DLRM_T0.to_pydatetime(), end.to_pydatetime()))
    _check_reconciles(charge)
    # independent: GPU-hours per app inside the window, straight from the pods frame ($1 per GPU-hour)
    pods = frames["pods"]
    lo = pods["start_ts"].clip(lower=DLRM_T0, upper=end)
    hi = pods["end_ts"].fillna(end).clip(lower=DLRM_T0, upper=end)
    exact = (hi - lo).dt.total_seconds() / 3600 * pods["gpu_count"]
    expected = exact.groupby(pods["team"]).sum()
    teams = charge[charge["kind"] == "team"].groupby("team")["cost_usd"].sum()
    assert set(teams.index) == set(expected[expected > 0].index)
    # a team pays the sum of its pods' charges, each rounded to the cent once (half to even), as an
    # invoice sums its rounded lines: exactly that, and within half a cent per pod of the exact cost
    lines = exact.map(lambda usd: cents(usd) / 100).groupby(pods["team"]).sum()
    assert (teams - lines[teams.index]).abs().max() < 1e-6
    pods_per_team = pods.groupby("team").size()[teams.index]
    assert ((teams - expected[teams.index]).abs() <= 0.005 * pods_per_team + 1e-6).all()
    assert (charge.loc[charge["kind"] == "team", "unobserved_usd"] == charge.loc[charge["kind"] == "team", "cost_usd"]).all()
    assert charge.loc[charge["kind"] == "unallocated", "cost_usd"].iloc[0] >= 0
    con.close()


def test_pods_claiming_one_gpu_at_once_share_it_and_the_excess_is_reported():
    """Regression (found by the property test above): two pods listing the same whole GPU for the
    same day, and two 3g pods on a GPU with one 3g instance, were each charged in full, so the teams'
    cost exceeded the fleet's and `unallocated` went negative. Now each over-claimed GPU's cost is
    split pro rata and the excess is an over_allocated row: here 24 GPU-hours on each GPU."""
    devices = [{"node": "n0", "gpu_uuid": "GPU-0", "gpu_model": MODELS[0]},
               {"node": "n0", "gpu_uuid": "GPU-1", "gpu_model": MODELS[0]},
               {"node": "n0", "gpu_uuid": "GPU-1", "gpu_model": MODELS[0], "mig_gi_id": 1, "mig_profile": "3g.40gb",
                "mig_profile_id": 9, "mig_placement_start": 0, "mig_placement_size": 4}]
    day = pd.Timedelta(days=1)
    pods = [{"namespace": "ns", "pod": f"p{i}", "node": "n0", "team": "a", "start_ts": T0, "end_ts": T0 + day,
             "gpu_resource": resource, "gpu_count": 1.0, "device_ids": gpu}
            for i, (resource, gpu) in enumerate([("nvidia.com/gpu", "GPU-0"), ("nvidia.com/gpu", "GPU-0"),
                                                  ("nvidia.com/mig-3g.40gb", "GPU-1"), ("nvidia.com/mig-3g.40gb", "GPU-1")])]
    con = store.connect(None)
    store.load(con, {"devices": pd.DataFrame(devices), "pods": pd.DataFrame(pods),
                     "prices": pd.DataFrame([{"gpu_model": MODELS[0], "usd_per_gpu_hour": 7.0}])}, source="overlap")
    charge = analyses.run(con, "chargeback", **params(T0, T0 + day))
    con.close()
    _check_reconciles(charge)
    teams = charge[charge["kind"] == "team"]
    # GPU-0: 24 h x $7 once, not twice; GPU-1's 3g instance: 24 h x 3/7 x $7 once
    assert teams["cost_usd"].sum() == (24 * 7 + 24 * 3)
    over = charge[charge["kind"] == "over_allocated"]
    assert over["gpu_hours"].sum() == pytest.approx(24 + 24 * 3 / 7)
    assert charge.loc[charge["kind"] == "unallocated", "cost_usd"].iloc[0] >= 0
