"""Fail safe across clusters and re-reads (issue 31 items 3-5), on real DuckDB stores and the real CLI:

- the cluster is the load's (`ingest --cluster`, the lake's `cluster=` partition): a node or namespace
  name qualified with another cluster is an error naming file, column and row, and the other cluster's
  rows stay as they were (before: prod's utilization 0.673 -> 0.0, c1's 0.452 -> 0.0); `lake put`
  refuses to write such names under its --cluster;
- one GPU UUID is one GPU: a load that would hold one under two nodes at once (the same bundle with
  and without --cluster, one UUID listed under two nodes) is refused whole, in one line naming the UUID
  and both nodes and clusters; a GPU that moved between nodes is kept under each for its own time;
- a re-read replaces only the (device, timestamp) pairs it carries: a since-last reply lacking the
  middle of one GPU's series keeps the stored samples there (before: 60 -> 40 stored), and the
  incremental re-staging of such a load equals a full refresh.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from gpuwatch import cli, store
from gpuwatch.ingest import since
from gpuwatch.lake import put as lake_put
from gpuwatch.store import restage, staged

T0 = datetime(2026, 11, 9)
TABLES = ("devices", "samples", "pods", "nodes")


def _frames(node: str, uuids: list[str], minutes, util: float, *, namespace: str = "team-a",
            end: datetime | None = None) -> dict[str, pd.DataFrame]:
    samples = pd.DataFrame([{"ts": T0 + timedelta(minutes=m), "node": node, "gpu_uuid": u, "namespace": namespace,
                             "pod": f"p-{u}", "container": "main", "gpu_util": util} for u in uuids for m in minutes])
    devices = pd.DataFrame([{"node": node, "gpu_uuid": u, "gpu_model": "NVIDIA H100 80GB HBM3"} for u in uuids])
    pods = pd.DataFrame([{"namespace": namespace, "pod": f"p-{u}", "node": node, "gpu_count": 1.0,
                          "start_ts": T0, "end_ts": end, "device_ids": u} for u in uuids])
    return {"samples": samples, "devices": devices, "pods": pods}


def _bundle(path: Path, frames: dict[str, pd.DataFrame]) -> Path:
    path.mkdir()
    for name, frame in frames.items():
        frame.to_csv(path / f"{name}.csv", index=False)
    return path


def _query(db: Path, sql: str) -> list[tuple]:
    con = store.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _fingerprint(db: Path) -> tuple:
    return tuple(_query(db, f"SELECT count(*), sum(hash(t)) FROM {name} t")[0] for name in TABLES)


def _fails(capsys, args: list[str]) -> str:
    capsys.readouterr()
    assert cli.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


# ---- item 3: the flag or the partition decides the cluster


def test_ingest_cluster_refuses_names_of_another_cluster_and_leaves_it_as_it_was(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    prod = _bundle(tmp_path / "prod", _frames("n1", ["GPU-a"], range(60), 0.673, end=T0 + timedelta(hours=2)))
    assert cli.main(["ingest", "--from", str(prod), "--cluster", "prod", "--db", str(db)]) == 0
    before = _fingerprint(db)
    dev = _bundle(tmp_path / "dev", _frames("prod/n1", ["GPU-a"], range(60), 0.0, namespace="prod/team-a",
                                            end=T0 + timedelta(hours=9)))
    err = _fails(capsys, ["ingest", "--from", str(dev), "--cluster", "dev", "--db", str(db)])
    assert str(dev) in err and "column 'node', row 1: 'prod/n1' names cluster 'prod'" in err
    assert "this load is cluster 'dev'" in err
    assert _fingerprint(db) == before  # untouched
    assert _query(db, "SELECT node, round(avg(gpu_util), 3) FROM samples GROUP BY node") == [("prod/n1", 0.673)]
    assert _query(db, "SELECT namespace, end_ts FROM pods") == [("prod/team-a", T0 + timedelta(hours=2))]


def test_a_name_already_qualified_with_its_own_cluster_is_kept(tmp_path):
    db = tmp_path / "s.duckdb"
    dev = _bundle(tmp_path / "dev", _frames("dev/n1", ["GPU-a"], range(5), 0.5, namespace="team-a"))
    assert cli.main(["ingest", "--from", str(dev), "--cluster", "dev", "--db", str(db)]) == 0
    assert _query(db, "SELECT DISTINCT node, namespace FROM samples") == [("dev/n1", "dev/team-a")]


def _claiming_stores(tmp_path: Path) -> tuple[Path, Path]:
    """c1's store (names stored as c1/n1) and a store whose rows claim c1's names (loaded unqualified)."""
    c1, zz = tmp_path / "c1.duckdb", tmp_path / "zz.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path / "b1", _frames("n1", ["GPU-c"], range(60), 0.452))),
                     "--cluster", "c1", "--db", str(c1)]) == 0
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path / "bz", _frames("c1/n1", ["GPU-c"], range(60), 0.0))),
                     "--db", str(zz)]) == 0
    return c1, zz


def test_lake_put_refuses_a_store_whose_names_claim_another_cluster(tmp_path, capsys):
    _, zz = _claiming_stores(tmp_path)
    err = _fails(capsys, ["lake", "put", "--db", str(zz), "--to", str(tmp_path / "lake"), "--cluster", "zz"])
    assert "'c1/n1', a name of cluster 'c1': a put under --cluster zz may carry only its own names" in err
    assert not list((tmp_path / "lake").rglob("*.parquet"))  # nothing written


def test_lake_get_refuses_a_partition_whose_names_claim_another_cluster(tmp_path, capsys, monkeypatch):
    lake, out = tmp_path / "lake", tmp_path / "out.duckdb"
    c1, zz = _claiming_stores(tmp_path)
    assert cli.main(["lake", "put", "--db", str(c1), "--to", str(lake), "--cluster", "c1"]) == 0
    with monkeypatch.context() as older:  # zz's objects as a writer without put's check leaves them
        older.setattr(lake_put, "check_names", lambda con, cluster: None)
        assert cli.main(["lake", "put", "--db", str(zz), "--to", str(lake), "--cluster", "zz"]) == 0
    assert cli.main(["lake", "get", "--from", str(lake), "--db", str(out), "--cluster", "c1"]) == 0
    assert _query(out, "SELECT node, round(avg(gpu_util), 3), count(*) FROM samples GROUP BY node") == [("c1/n1", 0.452, 60)]
    before = _fingerprint(out)
    err = _fails(capsys, ["lake", "get", "--from", str(lake), "--db", str(out), "--cluster", "zz"])
    assert "cluster=zz" in err and "'c1/n1' names cluster 'c1', but this load is cluster 'zz'" in err
    assert _fingerprint(out) == before


# ---- item 4: one GPU UUID is one GPU


def test_the_same_bundle_with_and_without_cluster_is_refused_not_doubled(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    bundle = _bundle(tmp_path / "b", _frames("n1", ["GPU-x", "GPU-y"], range(60), 0.5))
    assert cli.main(["ingest", "--from", str(bundle), "--db", str(db)]) == 0
    before = _fingerprint(db)
    err = _fails(capsys, ["ingest", "--from", str(bundle), "--cluster", "prod", "--db", str(db)])
    assert err.startswith("gpuwatch ingest: ") and str(bundle) in err
    assert "GPU GPU-x would be held under two nodes at once, node n1 (no cluster) and node n1 (cluster prod)" in err
    assert _fingerprint(db) == before
    assert _query(db, "SELECT count(*), count(DISTINCT gpu_uuid) FROM devices") == [(2, 2)]


def test_one_uuid_listed_under_two_nodes_is_refused(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    devices = pd.DataFrame({"node": ["n1", "n2"], "gpu_uuid": ["GPU-x", "GPU-x"], "gpu_model": ["H100", "H100"]})
    bundle = _bundle(tmp_path / "b", {"devices": devices})
    err = _fails(capsys, ["ingest", "--from", str(bundle), "--db", str(db)])
    assert "GPU GPU-x would be held under two nodes at once, node n1 (no cluster) and node n2 (no cluster)" in err
    assert "without a sample to say when" in err
    assert not db.exists()  # nothing loaded: the failed first ingest leaves no store behind


def test_a_gpu_that_moved_to_another_node_is_kept_under_each_for_its_own_time():
    con = store.connect(None)
    store.load(con, _frames("n1", ["GPU-x"], range(60), 0.5), source="before the move")
    store.load(con, _frames("n2", ["GPU-x"], range(70, 130), 0.5), source="after the move")
    store.load(con, _frames("n1", ["GPU-x"], range(140, 150), 0.5), source="and back")
    spans = con.execute("SELECT node, min(ts), max(ts) FROM samples GROUP BY node ORDER BY node").fetchall()
    assert spans == [("n1", T0, T0 + timedelta(minutes=149)),
                     ("n2", T0 + timedelta(minutes=70), T0 + timedelta(minutes=129))]
    with pytest.raises(store.BundleError, match="GPU GPU-x would be held under two nodes at once"):
        store.load(con, _frames("n2", ["GPU-x"], range(100, 145), 0.5), source="both at once")


# ---- item 5: a re-read adds or corrects what it carries, never deletes


def _gappy_reply(lost: str):
    """A Prometheus reply (as prometheus.fetch returns it) for every step of the read, at 0.6, but
    lacking the middle of ``lost``'s series (an HA replica without it, a partial response)."""
    def fetch(url, *, start, end, step, team_label):
        first, last = int((start - T0).total_seconds() // 60), int((end - T0).total_seconds() // 60)
        kept = _frames("n1", ["GPU-a", "GPU-b"], range(first, last), 0.6)
        samples = kept["samples"]
        middle = (samples["gpu_uuid"] == lost) & samples["ts"].between(T0 + timedelta(minutes=first + 2),
                                                                       T0 + timedelta(minutes=last - 3))
        return {**kept, "samples": samples[~middle].reset_index(drop=True)}
    return fetch


def test_a_since_last_reply_with_a_gap_keeps_the_stored_samples_there():
    con = store.connect(None)
    store.load(con, _frames("n1", ["GPU-a", "GPU-b"], range(60), 0.5), source="first")
    _, read = since.ingest(con, "prometheus://x", end=T0 + timedelta(minutes=62), step=60.0, tail=1200,
                           fetch=_gappy_reply("GPU-b"))
    assert read.resume == T0 + timedelta(minutes=39)
    held = dict(con.execute("SELECT gpu_uuid, count(*) FROM samples GROUP BY ALL").fetchall())
    assert held == {"GPU-a": 62, "GPU-b": 62}  # 60 stored + 2 new each (before: GPU-b 60 -> 40)
    b = con.execute("SELECT ts, gpu_util FROM stg_samples WHERE gpu_uuid = 'GPU-b' ORDER BY ts").df()
    gap = b["ts"].between(T0 + timedelta(minutes=38), T0 + timedelta(minutes=59))
    assert (b.loc[gap, "gpu_util"] == 0.5).all() and gap.sum() == 22  # the reply lacked them: kept as stored
    carried = b.loc[~gap & (b["ts"] >= T0 + timedelta(minutes=36))]
    assert list(carried["gpu_util"]) == [0.6] * 4  # minutes 36, 37, 60, 61: what it carried, corrected or added


def test_a_load_with_gaps_restages_as_a_full_refresh_does(monkeypatch):
    con = store.connect(None)
    store.load(con, _frames("n1", ["GPU-a", "GPU-b"], range(240), 0.5), source="first")
    gappy = _frames("n1", ["GPU-a", "GPU-b"], list(range(100, 104)) + list(range(110, 112)) + [130], 0.9)
    gappy["samples"].loc[gappy["samples"]["gpu_uuid"] == "GPU-b", "pod"] = None  # and one pod's rows re-attributed
    full = []
    with monkeypatch.context() as patch:
        patch.setattr(restage, "refresh", lambda c: full.append(c))
        store.load(con, gappy, source="a resend with gaps")
    assert full == []  # re-staged incrementally
    assert con.execute("SELECT count(*) FROM samples").fetchall()[0][0] == 480
    queries = {t: f"SELECT * FROM {t} ORDER BY ALL" for t in ("stg_sample_rows", "stg_streams", "stg_stream_dts",
                                                               "stg_stream_aliases")}
    incremental = {t: con.execute(q).df() for t, q in queries.items()}
    staged.refresh(con)
    for table, query in queries.items():
        pd.testing.assert_frame_equal(incremental[table], con.execute(query).df(), check_exact=True, obj=table)
