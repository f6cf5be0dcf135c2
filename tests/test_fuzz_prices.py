"""Fuzzing ``ingest --prices FILE`` (hypothesis, bounded): model names in any case and spacing, names
that match no GPU (a short name, a typo, another model), per-MIG-profile rows, hostile prices.

Laws: never a traceback, only gpuwatch's DataError, one line naming the file; on an error the store
is exactly as it was; a load succeeds exactly when every row is a plausible price for a model the
store holds (matched whole, ignoring case and surrounding spaces), and then each GPU's price is the
last such row for its model, else the price it had, else it is named unpriced; the chargeback of
what loaded reconciles (Σ parts = fleet cost) with every device priced or named unpriced.
"""

from __future__ import annotations

import csv
import math
import re

import pandas as pd
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuwatch import analyses, store, units
from gpuwatch.analyses.params import params

T0 = pd.Timestamp("2026-11-09T00:00:00")
FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
SEEN = {H100.lower(): H100, L40S.lower(): L40S}
SEED_PRICES = {H100.lower(): 4.1}  # the bundle's own price; L40S starts unpriced
PROFILE = re.compile(r"^(?:\d+c\.)?\d+g\.\d+(?:\.\d+)?gb(?:[+.]me)?$")


def _spelling(name: str):
    """``name`` in another case, with spaces around it."""
    return st.tuples(st.sampled_from([str.lower, str.upper, str.title, lambda s: s]),
                     st.sampled_from(["", " ", "  "]), st.sampled_from(["", " "])).map(
        lambda t: t[1] + t[0](name) + t[2])


model_cell = st.one_of(
    _spelling(H100), _spelling(L40S),
    st.sampled_from(["H100", "L40", "NVIDIA H200", "NVIDIA H100", "NVIDIA H100 80GB HBM3e", "A100"]),  # match nothing
    st.builds(lambda m, p: f"{m}/{p}", st.sampled_from([H100, H100.lower()]), st.sampled_from(["1g.10gb", "3g.40gb", "x"])))
price_cell = st.one_of(st.floats(0, 50).map(lambda x: f"{x:.4f}"),
                       st.sampled_from(["0", "-1", "1e9", "inf", "nan", "abc"]))
rows_strategy = st.lists(st.tuples(model_cell, price_cell), min_size=1, max_size=5)


def _seed(con) -> None:
    store.load(con, {
        "devices": pd.DataFrame([{"node": "n0", "gpu_uuid": "GPU-0", "gpu_model": H100},
                                 {"node": "n1", "gpu_uuid": "GPU-1", "gpu_model": L40S}]),
        "prices": pd.DataFrame([{"gpu_model": H100, "usd_per_gpu_hour": 4.1}]),
        "samples": pd.DataFrame([{"ts": T0 + pd.Timedelta(minutes=m), "node": n, "gpu_uuid": g, "gpu_util": 0.5}
                                 for m in range(0, 60, 10) for n, g in (("n0", "GPU-0"), ("n1", "GPU-1"))])},
        source="seed")


def _fingerprint(con) -> tuple:
    return tuple(con.execute(f"SELECT count(*), sum(hash(t)) FROM {name} t").fetchall()[0]
                 for name in ("devices", "prices", "ingest_log", "stg_prices"))


def _oracle(rows: list[tuple[str, str]]) -> dict | None:
    """model key -> price after the load, or None when the file must be refused."""
    out = dict(SEED_PRICES)
    for model, price in rows:
        value = float(price) if re.fullmatch(r"-?[0-9.e]+|inf|nan", price) else None
        if value is None or not math.isfinite(value) or not 0 <= value <= 1000:
            return None
        key = model.strip().lower()
        base, _, profile = key.rpartition("/")
        if key in SEEN:
            out[key] = value
        elif not (base in SEEN and PROFILE.match(profile)):
            return None
    return out


@FUZZ
@given(rows=rows_strategy)
def test_price_files_load_exactly_or_fail_cleanly(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("prices") / "prices.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("gpu_model", "usd_per_gpu_hour"), *rows])
    con = store.connect(None)
    try:
        _seed(con)
        before = _fingerprint(con)
        expected = _oracle(rows)
        try:
            store.load(con, {}, source="--prices", prices=[str(path)])
        except units.DataError as exc:
            assert "\n" not in str(exc).strip() and str(path) in str(exc)
            assert _fingerprint(con) == before  # untouched
            assert expected is None, f"refused a good file: {exc}"
            event("refused")
            return
        assert expected is not None, "loaded a file with a bad or unmatched row"
        event("loaded")
        coverage = {r.gpu_model.lower(): r for r in store.price_coverage(con).itertuples(index=False)}
        for key, name in SEEN.items():
            row = coverage[key]
            if key in expected:
                assert (row.usd_per_gpu_hour, row.price_source) == (expected[key], "cluster price"), name
            else:
                assert row.price_source == "unpriced" and pd.isna(row.usd_per_gpu_hour), name
        _chargeback_reconciles(con, priced=len(expected))
    finally:
        con.close()


def _chargeback_reconciles(con, *, priced: int) -> None:
    charge = analyses.run(con, "chargeback", **params(T0.to_pydatetime(), (T0 + pd.Timedelta(hours=1)).to_pydatetime()))
    problems = charge["kind"].isin(["unpriced", "unpriced_capacity", "over_allocated"])
    assert round(charge.loc[~problems, "cost_usd"].sum(), 2) == round(charge["fleet_cost_usd"].iloc[0], 2)
    assert charge.loc[problems, "cost_usd"].isna().all()  # never $0 for unknown
    unpriced = charge.loc[charge["kind"] == "unpriced_capacity", "pods"].sum()
    assert priced + unpriced == len(SEEN)  # every device priced or named unpriced
