"""How a price finds its GPUs (gpuwatch/store/prices_match.py): whole model names, ignoring case and
surrounding spaces, the same rule in the load and in staging; a price row that matches no GPU model
is refused with the models seen and the closest; what nothing prices says "unpriced", never $0.00.

On the real CLI and real DuckDB stores; the GPU model names are DCGM's, as in the real captures.
"""

from __future__ import annotations

import pytest

from gpuwatch import cli, store
from gpuwatch.findings import command as findings_command
from gpuwatch.store import prices_match

H100 = "NVIDIA H100 80GB HBM3"


def _bundle(tmp_path, *, price: str | None = f"{H100},4.1"):
    """Two H100s on one node with an hour of samples, and the bundle's own price for them."""
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "devices.csv").write_text("node,gpu_uuid,gpu_index,gpu_model\n"
                                     f"n1,GPU-a,0,{H100}\nn1,GPU-b,1,{H100}\n")
    rows = [f"2026-11-09T00:{m:02d}:00Z,n1,GPU-{g},0.5" for m in range(0, 60, 5) for g in "ab"]
    (out / "samples.csv").write_text("ts,node,gpu_uuid,gpu_util\n" + "\n".join(rows) + "\n")
    if price is not None:
        (out / "prices.csv").write_text(f"gpu_model,usd_per_gpu_hour\n{price}\n")
    return out


def _prices(db) -> list[tuple]:
    con = store.connect(str(db), read_only=True)
    try:
        return [tuple(r) for r in store.price_coverage(con)[["gpu_model", "usd_per_gpu_hour", "price_source"]]
                .itertuples(index=False)]
    finally:
        con.close()


def _fingerprint(db) -> tuple:
    con = store.connect(str(db), read_only=True)
    try:
        return tuple(con.execute(f"SELECT count(*), sum(hash(t)) FROM {t} t").fetchone()
                     for t in ("devices", "prices", "ingest_log", "sample_readings"))
    finally:
        con.close()


@pytest.mark.parametrize("spelling", ["nvidia h100 80gb hbm3", "  NVIDIA H100 80GB HBM3 ", "Nvidia H100 80gb Hbm3"])
def test_the_clusters_price_wins_whatever_the_case(tmp_path, capsys, spelling):
    """--prices is loaded after the bundle so that it wins: the bundle's higher price for the same model,
    spelled in another case, must not stand beside it (before: max() of the two kept $4.10)."""
    db = tmp_path / "g.duckdb"
    mine = tmp_path / "mine.csv"
    mine.write_text(f"gpu_model,usd_per_gpu_hour\n{spelling},2.5\n")
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path)), "--prices", str(mine), "--db", str(db)]) == 0
    assert _prices(db) == [(H100, 2.5, "cluster price")]
    assert "$2.50/GPU-hour, cluster price" in capsys.readouterr().out
    # and again in a later load: the newest price of a model replaces the stored one, in any case
    again = tmp_path / "again.csv"
    again.write_text(f"gpu_model,usd_per_gpu_hour\n{H100.upper()},3\n")
    assert cli.main(["ingest", "--prices", str(again), "--db", str(db)]) == 0
    assert _prices(db) == [(H100, 3.0, "cluster price")]


def test_within_one_file_the_last_row_of_a_model_wins_whatever_its_case(tmp_path):
    db = tmp_path / "g.duckdb"
    mine = tmp_path / "mine.csv"
    mine.write_text(f"gpu_model,usd_per_gpu_hour\n{H100},9\n{H100.lower()},1.5\n")
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, price=None)), "--prices", str(mine), "--db", str(db)]) == 0
    assert _prices(db) == [(H100, 1.5, "cluster price")]


def test_a_price_row_matching_no_model_is_refused_naming_row_models_and_closest(tmp_path, capsys):
    """'H100' for "NVIDIA H100 80GB HBM3" was accepted with exit 0, every dollar then $0.00."""
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, price=None)), "--db", str(db)]) == 0
    before = _fingerprint(db)
    mine = tmp_path / "mine.csv"
    mine.write_text(f"gpu_model,usd_per_gpu_hour\n{H100},4\nH100,4.1\n")
    capsys.readouterr()
    assert cli.main(["ingest", "--prices", str(mine), "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert f"{mine}: column 'gpu_model', row 2: 'H100' matches no GPU model" in err
    assert f"models seen: '{H100}'" in err and f"closest: '{H100}'" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _fingerprint(db) == before  # not even the good first row landed
    # the same file with the bundle in one ingest: refused too, nothing loaded
    (tmp_path / "x").mkdir()
    other = tmp_path / "other.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path / "x", price=None)), "--prices", str(mine),
                     "--db", str(other)]) == 1
    assert "row 2: 'H100' matches no GPU model" in capsys.readouterr().err


def test_a_mig_profile_price_must_name_a_seen_model_and_a_profile(tmp_path, capsys):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, price=None)), "--db", str(db)]) == 0
    good = tmp_path / "good.csv"
    good.write_text(f"gpu_model,usd_per_gpu_hour\n{H100},4\n{H100.lower()}/1g.10gb,0.7\n")
    assert cli.main(["ingest", "--prices", str(good), "--db", str(db)]) == 0
    bad = tmp_path / "bad.csv"
    bad.write_text(f"gpu_model,usd_per_gpu_hour\n{H100}/1g.10GBx,0.7\n")
    capsys.readouterr()
    assert cli.main(["ingest", "--prices", str(bad), "--db", str(db)]) == 1
    assert "row 1:" in (err := capsys.readouterr().err) and "'1g.10GBx' is not a MIG profile" in err
    typo = tmp_path / "typo.csv"
    typo.write_text("gpu_model,usd_per_gpu_hour\nNVIDIA H10 80GB HBM3/1g.10gb,0.7\n")
    assert cli.main(["ingest", "--prices", str(typo), "--db", str(db)]) == 1
    assert f"closest: '{H100}'" in capsys.readouterr().err


def test_prices_before_any_gpu_are_kept_and_match_later(tmp_path, capsys):
    """A store without GPUs cannot check a price; the GPUs loaded later match it by the same rule."""
    db = tmp_path / "g.duckdb"
    mine = tmp_path / "mine.csv"
    mine.write_text(f"gpu_model,usd_per_gpu_hour\n{H100.lower()},2\n")
    assert cli.main(["ingest", "--prices", str(mine), "--db", str(db)]) == 0
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, price=None)), "--db", str(db)]) == 0
    assert _prices(db) == [(H100, 2.0, "cluster price")]


@pytest.mark.parametrize(("key", "expected"), [
    ("h100", "nvidia h100 80gb hbm3"), ("nvidia h100 80gb", "nvidia h100 80gb hbm3"),
    ("l40", "nvidia l40s"), ("a100-sxm4-40gb", "nvidia a100-sxm4-80gb")])
def test_the_closest_model(key, expected):
    seen = ["nvidia a100-sxm4-80gb", "nvidia h100 80gb hbm3", "nvidia l40s"]
    assert prices_match.closest(key, seen) == expected


def test_an_unpriced_fleet_says_unpriced_never_zero_dollars(tmp_path, capsys):
    """Before: 'fleet cost $0.00', 'hoarders: ... $0.00', 'false utilization: ... $0.00'."""
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, price=None)), "--db", str(db)]) == 0
    capsys.readouterr()
    assert cli.main(["analyze", "--db", str(db), "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert "fleet cost: not judged: GPU prices missing" in out and "$0.00" not in out
    assert "false utilization: not judged" in out  # this bundle has no SM activity either


def test_summary_dollars_name_what_is_unpriced():
    import pandas as pd

    assert findings_command._usd(pd.Series([1.0, float("nan"), 2.0])) == "$3.00 (+1 unpriced)"
    assert findings_command._usd(pd.Series([float("nan")])) == "unpriced"
    assert findings_command._usd(pd.Series([], dtype=float)) == "$0.00"  # nothing found costs nothing
    assert findings_command._usd(pd.Series([5.0]), unpriced=True) == "unpriced"


def test_findings_find_a_price_spelled_in_another_case(tmp_path):
    """recommendations look a price up by the finding's gpu_model: the prices analysis names each
    model as the devices spell it (before: the price file's spelling, so a lower-case price file left
    every MIG repack at $0)."""
    import pandas as pd

    from gpuwatch import analyses, recommendations

    db = tmp_path / "g.duckdb"
    mine = tmp_path / "mine.csv"
    mine.write_text(f"gpu_model,usd_per_gpu_hour\n{H100.lower()},4\n")
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, price=None)), "--prices", str(mine), "--db", str(db)]) == 0
    con = store.connect(str(db), read_only=True)
    try:
        prices = analyses.run(con, "prices")
    finally:
        con.close()
    assert prices[["gpu_model", "usd_per_gpu_hour"]].values.tolist() == [[H100, 4.0]]
    mig = pd.DataFrame([{"gpu_uuid": "GPU-a", "gpu_model": H100, "node": "n1", "stranded_slices": 2, "instances": "",
                         "repack_layout": "1g.10gb@0", "repack_stranded_slices": 0, "repack_moves": 1}])
    rows = recommendations.repack_mig(mig, prices=prices, rate=recommendations.RunRate(hours=168.0, hours_per_month=730.0))
    assert rows and rows[0]["monthly_savings_usd"] > 0
