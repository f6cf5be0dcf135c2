"""Price sources and their precedence, on real DuckDB stores and the real CLI.

The cluster's own prices (a bundle's prices.csv, ``ingest --prices FILE``, the chart's prices.models)
win; gpuwatch's shipped, dated list prices (gpuwatch/store/list_prices.csv) price only models the
cluster does not, and only where ``--prices list`` enabled them; a model with neither is unpriced and
says so. The list table itself is checked for what makes it usable: a date and a reference per row,
one row per model, plausible prices, and DCGM's spelling of the model names seen in real captures.
"""

from __future__ import annotations

import csv
import datetime as dt

import pytest

from gpuwatch import cli, store
from gpuwatch.store.load import LIST_PRICES_FILE
from tests.conftest import FIXTURES

L40S_PAGE = FIXTURES / "promfile" / "l40s-dcgm-exporter-4x-Hostname.prom"


def _coverage(db) -> dict:
    con = store.connect(str(db), read_only=True)
    try:
        frame = store.price_coverage(con)
    finally:
        con.close()
    return {r.gpu_model: (r.usd_per_gpu_hour, r.price_source) for r in frame.itertuples(index=False)}


def _list_row(model: str) -> dict:
    with LIST_PRICES_FILE.open(newline="") as handle:
        return next(r for r in csv.DictReader(handle) if r["gpu_model"] == model)


def test_a_scrape_without_prices_is_unpriced_and_says_so(tmp_path, capsys):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(L40S_PAGE), "--db", str(db)]) == 0
    assert "NVIDIA L40S: 1 GPU(s), UNPRICED" in capsys.readouterr().out
    price, source = _coverage(db)["NVIDIA L40S"]
    assert source == "unpriced" and price != price  # NULL, never 0


def test_list_prices_fill_in_and_the_clusters_price_wins_whatever_the_order(tmp_path, capsys):
    db = tmp_path / "g.duckdb"
    listed = _list_row("NVIDIA L40S")
    assert cli.main(["ingest", "--from", str(L40S_PAGE), "--prices", "list", "--db", str(db)]) == 0
    price, source = _coverage(db)["NVIDIA L40S"]
    assert price == float(listed["usd_per_gpu_hour"])
    assert source == f"list price as of {listed['as_of']} ({listed['reference']})"
    mine = tmp_path / "prices.csv"
    mine.write_text("gpu_model,usd_per_gpu_hour\nnvidia l40s ,1.25\n")  # DCGM's name, any case and spacing
    assert cli.main(["ingest", "--prices", str(mine), "--db", str(db)]) == 0
    assert _coverage(db)["NVIDIA L40S"] == (1.25, "cluster price")
    assert cli.main(["ingest", "--prices", "list", "--db", str(db)]) == 0  # re-enabling the list changes nothing
    assert _coverage(db)["NVIDIA L40S"] == (1.25, "cluster price")
    assert "$1.25/GPU-hour, cluster price" in capsys.readouterr().out


def test_list_prices_reach_the_chargeback(tmp_path):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(L40S_PAGE), "--prices", "list", "--db", str(db)]) == 0
    con = store.connect(str(db), read_only=True)
    try:
        devices = con.execute("SELECT usd_per_hour FROM stg_devices").fetchall()
    finally:
        con.close()
    assert devices == [(float(_list_row("NVIDIA L40S")["usd_per_gpu_hour"]),)]


def test_a_bad_prices_file_names_file_column_row_and_leaves_the_store(tmp_path, capsys):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(L40S_PAGE), "--db", str(db)]) == 0
    bad = tmp_path / "prices.csv"
    bad.write_text("gpu_model,usd_per_gpu_hour\nNVIDIA L40S,1.0\nNVIDIA H100 80GB HBM3,-3\n")
    capsys.readouterr()
    assert cli.main(["ingest", "--prices", str(bad), "--prices", "list", "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "usd_per_gpu_hour" in err and "row 2" in err and "Traceback" not in err
    assert _coverage(db)["NVIDIA L40S"][1] == "unpriced"  # neither the good row nor the list landed
    assert cli.main(["ingest", "--prices", str(tmp_path / "nope.csv"), "--db", str(db)]) == 1
    assert "--prices" in capsys.readouterr().err


def test_ingest_needs_a_source_or_prices(tmp_path, capsys):
    assert cli.main(["ingest", "--db", str(tmp_path / "g.duckdb")]) == 2
    assert "--from" in capsys.readouterr().err


def test_the_shipped_list_is_dated_referenced_and_plausible():
    with LIST_PRICES_FILE.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and len({r["gpu_model"].strip().lower() for r in rows}) == len(rows)
    for r in rows:
        assert 0.1 <= float(r["usd_per_gpu_hour"]) <= 30, r
        assert dt.date.fromisoformat(r["as_of"]) <= dt.date.today() and r["reference"].strip(), r
    names = {r["gpu_model"] for r in rows}
    # DCGM's modelName spelling, as in the real nvidia-smi / dcgm-exporter captures
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA L40S"} <= names


@pytest.mark.parametrize("model", ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
def test_newer_gpus_cost_more_than_older_ones_in_the_list(model):
    assert float(_list_row(model)["usd_per_gpu_hour"]) > float(_list_row("NVIDIA A100-SXM4-80GB")["usd_per_gpu_hour"])


def _spot_bundle(tmp_path, *, selector: str = "karpenter.sh/capacity-type=spot"):
    """sample_data plus a nodes file (gpu-node-000 is spot capacity) and a spot price for the H100."""
    from tests.support.bundles import SAMPLE_DATA

    out = tmp_path / "spot"
    out.mkdir()
    for name in ("devices.csv", "pods.csv", "teams.csv", "samples.parquet"):
        (out / name).symlink_to(SAMPLE_DATA / name)
    (out / "prices.csv").write_text((SAMPLE_DATA / "prices.csv").read_text() + f"NVIDIA H100 80GB HBM3,1.6,{selector}\n")
    (out / "nodes.csv").write_text('node,labels\ngpu-node-000,"{""karpenter_sh_capacity_type"": ""spot""}"\n'
                                   'gpu-node-003,"{""karpenter_sh_capacity_type"": ""on-demand""}"\n')
    return out


def test_a_price_per_node_label_prices_the_gpus_on_those_nodes(tmp_path, capsys):
    """Spot capacity: the H100s on gpu-node-000 (labelled spot) at $1.60, every other H100 at $4.10;
    the chargeback's fleet cost, the coverage lines and ingest's printout all follow."""
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_spot_bundle(tmp_path)), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3: 8 GPU(s), $1.60/GPU-hour, cluster price on nodes with karpenter.sh/capacity-type=spot" in out
    assert "NVIDIA H100 80GB HBM3: 40 GPU(s), $4.10/GPU-hour, cluster price" in out
    con = store.connect(str(db), read_only=True)
    try:
        prices = dict(con.execute("SELECT node, max(usd_per_gpu_hour) FROM stg_gpus WHERE gpu_model LIKE '%H100%' "
                                  "GROUP BY node").fetchall())
        from gpuwatch import analyses
        from gpuwatch.analyses.params import params, window

        start, end = window(store.data_range(con)[1])
        charge = analyses.run(con, "chargeback", **params(start, end))
        pods = con.execute("SELECT max(usd_per_hour / gpu_count) FROM stg_pods WHERE node = 'gpu-node-000' "
                           "AND mig_profile IS NULL AND gpu_count >= 1").fetchone()[0]
    finally:
        con.close()
    assert prices["gpu-node-000"] == 1.6 and all(p == 4.1 for n, p in prices.items() if n != "gpu-node-000")
    assert charge["fleet_cost_usd"].iloc[0] == round(62092.80 - 8 * (4.1 - 1.6) * 168, 2)  # sample_data/README.md
    assert round(charge["cost_usd"].sum(), 2) == charge["fleet_cost_usd"].iloc[0]  # still reconciles
    assert pods == 1.6  # a pod on a spot node is charged the spot price


@pytest.mark.parametrize(("selector", "message"), [
    ("spot", "is not a node label selector key=value"),
    ("=spot", "is not a node label selector key=value"),
])
def test_a_bad_node_label_selector_is_refused(tmp_path, capsys, selector, message):
    db = tmp_path / "g.duckdb"
    capsys.readouterr()
    assert cli.main(["ingest", "--from", str(_spot_bundle(tmp_path, selector=selector)), "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert "column 'node_label', row 5" in err and message in err and len(err.strip().splitlines()) == 1


def test_node_labels_come_from_kube_node_labels_for_gpu_nodes_only():
    import numpy as np

    from gpuwatch.ingest.promframes import nodes_frame
    from gpuwatch.ingest.series import Series

    one = np.array([1.0])
    series = [Series("kube_node_labels", {"node": "gpu-1", "label_karpenter_sh_capacity_type": "spot",
                                          "label_nvidia_com_gpu_replicas": ""}, one, one),
              Series("kube_node_labels", {"node": "cpu-1", "label_karpenter_sh_capacity_type": "spot"}, one, one)]
    frame = nodes_frame(series, {"gpu-1"})
    assert frame.to_dict("records") == [{"node": "gpu-1", "labels": '{"karpenter_sh_capacity_type": "spot"}'}]
