"""A store holding several clusters (`gpuwatch ingest --cluster NAME`): the same node and namespace
names in two clusters never collide (they are stored as NAME/<node>, NAME/<namespace>), teams span
clusters, chargeback has a cluster column, the report and the app show spend by cluster, and the
reclaim controller leaves another cluster's pods alone. On real DuckDB stores and the real CLI."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import cli
from tests.support.bundles import SAMPLE_DATA, other_gpus

ONE_WEEK = 62092.80


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """sample_data loaded twice, as clusters prod-a and prod-b (its GPUs renamed), analysed."""
    base = tmp_path_factory.mktemp("clusters")
    db = base / "g.duckdb"
    copy = other_gpus(SAMPLE_DATA, base / "prod-b", tag="b")  # one GPU UUID is one GPU: prod-b's are its own
    for name, bundle in (("prod-a", SAMPLE_DATA), ("prod-b", copy)):
        assert cli.main(["ingest", "--from", str(bundle), "--cluster", name, "--db", str(db)]) == 0
    assert cli.main(["analyze", "--db", str(db), "--out", str(base / "out")]) == 0
    return db, base / "out"


def test_two_clusters_with_the_same_names_do_not_collide(two):
    _, out = two
    charge = pd.read_csv(out / "chargeback.csv")
    assert round(charge["cost_usd"].sum(), 2) == round(2 * ONE_WEEK, 2)  # chargeback.csv repeats no total
    teams = charge[charge["kind"] == "team"]
    by_cluster = teams.groupby("cluster")["cost_usd"].sum().round(2).to_dict()
    # the same week twice: the same pods, each rounded to the cent once
    assert set(by_cluster) == {"prod-a", "prod-b"} and by_cluster["prod-a"] == pytest.approx(by_cluster["prod-b"], abs=0.05)
    assert set(teams["team"]) == {"nlp", "platform", "recsys", "research", "vision"}  # teams span clusters
    assert all(ns.split("/", 1)[0] == c for ns, c in zip(teams["namespace"], teams["cluster"], strict=True))
    idle = pd.read_csv(out / "idle_hoarding.csv")
    assert int(idle["hoarder"].sum()) == 2 * 69  # sample_data's 69 hoarders, in each cluster


def test_the_report_shows_spend_by_cluster(two, tmp_path):
    db, _ = two
    assert cli.main(["report", "weekly", "--db", str(db), "--out", str(tmp_path / "r")]) == 0
    html = (tmp_path / "r" / "fleet.html").read_text()
    assert '<h3 id="clusters">Spend by cluster</h3>' in html
    assert "<td>prod-a</td>" in html and "<td>prod-b</td>" in html


def test_reclaim_leaves_a_multi_cluster_store_alone(two, capsys):
    db, _ = two
    capsys.readouterr()
    assert cli.main(["reclaim", "--once", "--db", str(db), "--assume-opted-in", "--no-cluster"]) == 0
    out = capsys.readouterr().out
    assert "reclaim acts on one cluster's store" in out
    assert "would_act" not in out and "would_warn" not in out  # every hoarder is skipped, none acted on


@pytest.mark.parametrize(("args", "message"), [
    (["--cluster", "Prod_A"], "--cluster: 'Prod_A' is not a cluster name"),
    (["--cluster", "a/b"], "--cluster: 'a/b' is not a cluster name"),
    (["--cluster", "prod", "--link"], "--cluster: not with --link"),
])
def test_a_bad_cluster_flag_is_refused_before_the_store_opens(tmp_path, capsys, args, message):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(SAMPLE_DATA), *args, "--db", str(db)]) == 2
    assert message in capsys.readouterr().err and not db.exists()
