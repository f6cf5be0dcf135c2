"""Fuzzing the analyzer's inputs (hypothesis, bounded): random valid-looking and broken bundle CSVs
and `.prom` pages. Laws: never a traceback — only gpuwatch's DataError (file, column/line named)
escapes; on an error the store is exactly as it was (row counts and a checksum); on success the
rows loaded equal an independent count of the input, and the chargeback of what loaded reconciles
(Σ parts = fleet cost) with every device priced or reported unpriced."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch import analyses, store, units
from gpuwatch.analyses.params import params
from gpuwatch.ingest import promfile

T0 = pd.Timestamp("2026-11-09T00:00:00")
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TABLES = ("devices", "samples", "pods", "prices")

# cells: mostly plausible, sometimes hostile
text_cell = st.one_of(st.sampled_from(["n1", "n2", "GPU-a", "GPU-b", "ns", "p", "=cmd", "", " ", "NaN", "é"]),
                      st.text(max_size=6))
number_cell = st.one_of(st.floats(-2, 2), st.integers(-5, 10**12),
                        st.sampled_from(["", "abc", "1e400", "-0", "0x10", "nan", "inf", "-inf"]))
time_cell = st.one_of(st.integers(0, 10).map(lambda m: (T0 + pd.Timedelta(minutes=m)).isoformat() + "Z"),
                      st.sampled_from(["", "yesterday", "9999-12-31", "1794182400", "1794182400000", "2100-01-01"]))


COLUMNS = {"samples": ("ts", "node", "gpu_uuid", "gpu_util", "sm_active", "fb_used_bytes", "pod"),
           "devices": ("node", "gpu_uuid", "gpu_model", "fb_total_bytes", "mig_gi_id"),
           "pods": ("namespace", "pod", "gpu_count", "node", "start_ts", "end_ts"),
           "prices": ("gpu_model", "usd_per_gpu_hour")}


def _row(table: str):
    if table == "samples":
        return st.fixed_dictionaries({"ts": time_cell, "node": text_cell, "gpu_uuid": text_cell, "gpu_util": number_cell,
                                      "sm_active": number_cell, "fb_used_bytes": number_cell, "pod": text_cell})
    if table == "devices":
        return st.fixed_dictionaries({"node": text_cell, "gpu_uuid": text_cell, "gpu_model": st.sampled_from(["H100", "A100", "", "?"]),
                                      "fb_total_bytes": number_cell, "mig_gi_id": number_cell})
    if table == "pods":
        return st.fixed_dictionaries({"namespace": text_cell, "pod": text_cell, "gpu_count": number_cell,
                                      "node": text_cell, "start_ts": time_cell, "end_ts": time_cell})
    return st.fixed_dictionaries({"gpu_model": st.sampled_from(["H100", "a100", "", "B200"]), "usd_per_gpu_hour": number_cell})


bundle_strategy = st.dictionaries(st.sampled_from(TABLES), st.integers(0, 6), min_size=1).flatmap(
    lambda sizes: st.fixed_dictionaries({t: st.lists(_row(t), min_size=n, max_size=n) for t, n in sizes.items()}))


def _fingerprint(con) -> tuple:
    return tuple(con.execute(f"SELECT count(*), sum(hash(t)) FROM {name} t").fetchall()[0] for name in TABLES)


def _seed(con) -> None:
    store.load(con, {"devices": pd.DataFrame([{"node": "n0", "gpu_uuid": "GPU-0", "gpu_model": "H100"}]),
                     "prices": pd.DataFrame([{"gpu_model": "H100", "usd_per_gpu_hour": 2.0}]),
                     "samples": pd.DataFrame([{"ts": T0, "node": "n0", "gpu_uuid": "GPU-0", "gpu_util": 0.5}])},
               source="seed")


@FUZZ
@given(bundle=bundle_strategy)
def test_bundles_load_exactly_or_fail_cleanly(tmp_path_factory, bundle):
    root = tmp_path_factory.mktemp("bundle")
    for name, rows in bundle.items():
        pd.DataFrame(rows, columns=list(COLUMNS[name])).to_csv(root / f"{name}.csv", index=False)
    con = store.connect(None)
    _seed(con)
    before = _fingerprint(con)
    try:
        counts = store.load_bundle(con, root)
    except units.DataError as exc:
        assert "\n" not in str(exc).strip() and str(root) in str(exc)
        assert _fingerprint(con) == before  # untouched
        return
    # loaded: what the store holds is the seed plus exactly the rows of the input (upserts collapse keys)
    assert counts["samples"] == len(bundle.get("samples", ()))
    held = con.execute("SELECT count(*) FROM samples").fetchall()[0][0]
    assert held >= counts["samples"]
    _chargeback_reconciles(con)


def _chargeback_reconciles(con) -> None:
    window = params(T0.to_pydatetime(), (T0 + pd.Timedelta(hours=1)).to_pydatetime())
    charge = analyses.run(con, "chargeback", **window)
    priced = charge[~charge["kind"].isin(["unpriced", "unpriced_capacity", "over_allocated"])]
    fleet = charge["fleet_cost_usd"].iloc[0]
    assert round(priced["cost_usd"].sum(), 2) == round(fleet, 2)
    assert charge[charge["kind"].isin(["unpriced", "unpriced_capacity"])]["cost_usd"].isna().all()
    devices = con.execute("SELECT count(DISTINCT (node, gpu_uuid)) FROM stg_devices").fetchall()[0][0]
    unpriced = charge[charge["kind"] == "unpriced_capacity"]["pods"].sum()
    priced_gpus = con.execute("SELECT count(DISTINCT (d.node, d.gpu_uuid)) FROM stg_devices d "
                              "JOIN stg_prices p ON p.model_key = model_key(d.gpu_model)").fetchall()[0][0]
    assert priced_gpus + unpriced == devices  # every device is priced or reported unpriced


metric_line = st.builds(
    lambda name, uuid, host, value, ts: (f'{name}{{gpu="0",UUID="{uuid}",Hostname="{host}",modelName="H100"}} {value}'
                                         + (f" {ts}" if ts is not None else "")),
    st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_POWER_USAGE",
                     "dcgm_gpu_utilization", "up"]),
    st.sampled_from(["GPU-a", "GPU-b", ""]), st.sampled_from(["n1", "n2", ""]),
    st.one_of(st.floats(-5, 200), st.sampled_from(["NaN", "+Inf", "x"])),
    st.one_of(st.none(), st.sampled_from([1794182400000, 1794182400, 4102444800000])))


@FUZZ
@given(lines=st.lists(st.one_of(metric_line, st.sampled_from(["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
                                                               "# TYPE DCGM_FI_DEV_GPU_UTIL gauge", "garbage{", ""])),
                      max_size=8))
def test_prom_pages_load_or_fail_cleanly(lines):
    con = store.connect(None)
    _seed(con)
    before = _fingerprint(con)
    try:
        frames = promfile.parse("\n".join(lines) + "\n", at=float(T0.timestamp()) + 60, source="page.prom")
        store.load(con, frames, source="page.prom")
    except units.DataError as exc:
        assert "\n" not in str(exc).strip() and "page.prom" in str(exc)
        assert _fingerprint(con) == before
        return
    util = con.execute("SELECT max(gpu_util) FROM samples").fetchall()[0][0]
    assert util is None or util <= 1.05 or math.isnan(util)  # percent became a ratio, never a 45 "ratio"
