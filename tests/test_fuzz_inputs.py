"""Fuzzing the analyzer's inputs (hypothesis, bounded): valid-looking and hostile bundle CSVs and
`.prom` pages. Laws: never a traceback — only gpuwatch's DataError (one line naming the file)
escapes; on an error the store is exactly as it was (row counts and a checksum per table); on
success each table's rows loaded, rows held and summed column equal an independent count of the
CSV text (last row of a key wins; samples replace the seed's sample only at a timestamp they carry), a
page's GPU series with a UUID and a host are exactly the devices added, and the chargeback of what
loaded reconciles (Σ parts = fleet cost) with every device priced or reported unpriced."""

from __future__ import annotations

import math
import re

import pandas as pd
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuwatch import analyses, store, units
from gpuwatch.analyses.params import params
from gpuwatch.ingest import promfile

T0 = pd.Timestamp("2026-11-09T00:00:00")
FUZZ = settings(max_examples=18, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
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


# cells a valid bundle holds: half the bundles are drawn from these, so loads succeed often enough
# for the exact-count law to be exercised, not only the refusals
valid = {"text": st.sampled_from(["n1", "n2", "n0", "GPU-a", "GPU-0", "ns", "p", "=cmd", "é"]),
         "ratio": st.one_of(st.floats(0, 1), st.just("")), "count": st.integers(0, 10**11),
         "time": st.sampled_from([(T0 + pd.Timedelta(minutes=m)).isoformat() + "Z" for m in range(-2, 4)] + ["1794182400"]),
         "gpus": st.floats(0.1, 8), "price": st.floats(0, 20), "mig": st.sampled_from(["", "1", "2.0"]),
         "end": st.sampled_from(["", (T0 + pd.Timedelta(minutes=10)).isoformat() + "Z"]),
         "model": st.sampled_from(["H100", "a100", "B200"])}
hostile = {"text": text_cell, "ratio": number_cell, "count": number_cell, "time": time_cell, "gpus": number_cell,
           "price": number_cell, "mig": number_cell, "end": time_cell, "model": st.sampled_from(["H100", "A100", "", "?"])}


def _row(table: str, cells: dict):
    text, ratio, count, time = cells["text"], cells["ratio"], cells["count"], cells["time"]
    if table == "samples":
        return st.fixed_dictionaries({"ts": time, "node": text, "gpu_uuid": text, "gpu_util": ratio,
                                      "sm_active": ratio, "fb_used_bytes": count, "pod": text})
    if table == "devices":
        return st.fixed_dictionaries({"node": text, "gpu_uuid": text, "gpu_model": cells["model"],
                                      "fb_total_bytes": count, "mig_gi_id": cells["mig"]})
    if table == "pods":
        return st.fixed_dictionaries({"namespace": text, "pod": text, "gpu_count": cells["gpus"],
                                      "node": text, "start_ts": time, "end_ts": cells["end"]})
    return st.fixed_dictionaries({"gpu_model": cells["model"], "usd_per_gpu_hour": cells["price"]})


def _bundle(cells: dict):
    return st.dictionaries(st.sampled_from(TABLES), st.integers(0, 6), min_size=1).flatmap(
        lambda sizes: st.fixed_dictionaries({t: st.lists(_row(t, cells), min_size=n, max_size=n) for t, n in sizes.items()}))


bundle_strategy = st.one_of(_bundle(valid), _bundle(hostile))


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
        event("refused")
        return
    event("loaded")
    # loaded: the store holds the seed plus exactly the input, counted here from the CSV text
    expected = _oracle(root, bundle)
    for name in TABLES:
        assert counts[name] == expected[name]["loaded"], name
        held = con.execute(f"SELECT count(*), sum({SUMMED[name]}) FROM {name}").fetchall()[0]
        assert held[0] == expected[name]["held"], name
        assert math.isclose(held[1] or 0.0, expected[name]["total"], rel_tol=1e-9, abs_tol=1e-9), name
    _chargeback_reconciles(con)


# the seed's rows, and the numeric column each table's total is taken over
SEED = {"devices": {("n0", "GPU-0", None): 0.0}, "prices": {("H100",): 2.0},
        "samples": {("n0", "GPU-0", None): 0.5}, "pods": {}}
SUMMED = {"devices": "coalesce(fb_total_bytes, 0)", "samples": "coalesce(gpu_util, 0)",
          "pods": "coalesce(gpu_count, 0)", "prices": "usd_per_gpu_hour"}
KEYED = {"devices": ("node", "gpu_uuid", "mig_gi_id"), "pods": ("namespace", "pod", "pod_uid"), "prices": ("gpu_model",)}
NA = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA",
      "NULL", "NaN", "None", "n/a", "nan", "null"}  # the bundle contract's empty cells (pandas' defaults)


def _oracle(root, bundle) -> dict:
    """Rows loaded, rows held and the summed column per table, from the CSV files as text: keyed
    tables keep the last row of each key, samples replace the seed's sample only where they carry
    its device at its timestamp."""
    out = {}
    for name in TABLES:
        rows = _csv_rows(root / f"{name}.csv") if name in bundle else []
        if name == "samples":
            value = [_number(r["gpu_util"]) or 0.0 for r in rows]
            covered = {_epoch(r["ts"]) for r in rows if (r["node"], r["gpu_uuid"]) == ("n0", "GPU-0")}
            seed_kept = T0.timestamp() not in covered  # a load replaces the timestamps it carries, no others
            out[name] = {"loaded": len(rows), "held": len(rows) + seed_kept, "total": sum(value) + 0.5 * seed_kept}
            continue
        final = {tuple(_key(r.get(k), k) for k in KEYED[name]): _number(r[_summed(name)]) or 0.0 for r in rows}
        held = {**SEED[name], **final}
        out[name] = {"loaded": len(final), "held": len(held), "total": sum(held.values())}
    return out


def _summed(name: str) -> str:
    return {"devices": "fb_total_bytes", "pods": "gpu_count", "prices": "usd_per_gpu_hour"}[name]


def _csv_rows(path) -> list[dict]:
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return [{k: (None if v in NA else v) for k, v in row.items()} for row in csv.DictReader(f)]


def _key(cell, column: str):
    if cell is None or column != "mig_gi_id":
        return cell
    return round(float(cell))


def _number(cell) -> float | None:
    return None if cell is None else float(cell.strip())


def _epoch(cell: str) -> float:
    return float(cell) if cell.strip().isdigit() else pd.Timestamp(cell).timestamp()


def _chargeback_reconciles(con) -> None:
    window = params(T0.to_pydatetime(), (T0 + pd.Timedelta(hours=1)).to_pydatetime())
    charge = analyses.run(con, "chargeback", **window)
    priced = charge[~charge["kind"].isin(["unpriced", "unpriced_capacity", "over_allocated"])]
    fleet = charge["fleet_cost_usd"].iloc[0]
    assert round(priced["cost_usd"].sum(), 2) == round(fleet, 2)
    assert charge[charge["kind"].isin(["unpriced", "unpriced_capacity"])]["cost_usd"].isna().all()
    # no device billed outside its evidence: a GPU present in the window has samples or a pod on its node
    present = set(con.execute("SELECT DISTINCT node, gpu_uuid FROM stg_gpu_presence($lo, $hi) JOIN stg_gpus USING (node, gpu_uuid)",
                              {"lo": window["start"], "hi": window["end"]}).fetchall())
    evidence = set(con.execute("SELECT DISTINCT node, gpu_uuid FROM stg_streams UNION SELECT g.node, g.gpu_uuid "
                               "FROM stg_gpus g JOIN stg_pods p USING (node) WHERE p.gpu_count > 0").fetchall())
    assert present <= evidence
    unpriced = charge[charge["kind"] == "unpriced_capacity"]["pods"].sum()
    # a GPU's model is its whole-GPU row's where it has one (README: MIG instances do not reprice it)
    priced_gpus = sum(1 for node, gpu in present if con.execute(
        "WITH g AS (SELECT node, gpu_uuid, coalesce(min(gpu_model) FILTER (WHERE mig_gi_id IS NULL), min(gpu_model)) "
        "AS gpu_model FROM stg_devices WHERE node = $n AND gpu_uuid = $g GROUP BY ALL) "
        "SELECT count(*) FROM g JOIN stg_prices p ON p.model_key = model_key(g.gpu_model)",
        {"n": node, "g": gpu}).fetchall()[0][0])
    assert priced_gpus + unpriced == len(present)  # every device present is priced or reported unpriced
    fleet_hours = charge.loc[charge["kind"] == "fleet", "gpu_hours"].sum() if "fleet" in set(charge["kind"]) else 0.0
    assert fleet_hours <= len(present) * 1.0 + 1e-9  # none billed beyond the window


GPU_LINE = re.compile(r'^(?:DCGM_FI_\w+|dcgm_gpu_utilization)\{gpu="0",UUID="(?P<uuid>[^"]*)",Hostname="(?P<host>[^"]*)"')
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
        event("refused")
        return
    event("loaded")
    # every device named by a GPU series with a UUID and a host is known, and no other device is
    # (samples: only those with a reading; a NaN-only series is no sample)
    named = {(m["host"], m["uuid"]) for m in map(GPU_LINE.match, lines) if m and m["uuid"] and m["host"]}
    held = {table: set(con.execute(f"SELECT DISTINCT node, gpu_uuid FROM {table} WHERE node <> 'n0'").fetchall())
            for table in ("devices", "samples")}
    assert held["devices"] == named and held["samples"] <= named
    util = con.execute("SELECT max(gpu_util) FROM samples").fetchall()[0][0]
    assert util is None or util <= 1.05 or math.isnan(util)  # percent became a ratio, never a 45 "ratio"
