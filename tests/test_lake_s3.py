"""`gpuwatch lake put/get` against a real S3 server (moto's server mode on 127.0.0.1, IAM auth on):
a simulated fleet put into s3:// and got back equals a direct ingest row for row; putting a window
again overwrites the same objects; overlapping windows dedupe on get; a window get fetches only its
days' objects (counted in the server's request log); a local directory root works the same; bad
buckets, credentials, endpoints, objects and flags are one line, exit 1 or 2, never a traceback.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwatch import fleet, store
from gpuwatch.cli import build_parser, main
from gpuwatch.fleet.command import write_bundle
from gpuwatch.lake import layout, storage
from gpuwatch.model import BUNDLE_COLUMNS
from tests.support.bundles import other_gpus

pytest.importorskip("moto", reason="moto[server] (dev extra) is not installed")
boto3 = pytest.importorskip("boto3")

BUCKET, CLUSTER = "lake", "prod-eu"
DAY0 = datetime(2026, 11, 9)  # the simulator's default start
READ_POLICY = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_OBJECT_GET = re.compile(r'"GET /([^? ]+\.parquet) HTTP')


@dataclass
class S3:
    url: str
    key: str
    secret: str
    log: Path

    def client(self):
        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id=self.key,
                            aws_secret_access_key=self.secret, region_name="us-east-1")

    def keys(self, prefix: str) -> dict[str, str]:
        """Object key -> ETag under ``prefix``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}

    def gets(self) -> list[str]:
        """The objects fetched so far (GET requests for .parquet keys), from the server's log."""
        time.sleep(0.3)  # the server logs a request after answering it
        return _OBJECT_GET.findall(_ANSI.sub("", self.log.read_text()))


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on a free 127.0.0.1 port; IAM auth on after the first three calls, which
    make the user, its key and its policy; then the bucket."""
    moto_server = shutil.which("moto_server", path=os.path.dirname(sys.executable))
    if moto_server is None:
        pytest.skip("moto_server not found (pip install 'moto[server]')")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "requests.log"
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3", "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        server = subprocess.Popen([moto_server, "-H", "127.0.0.1", "-p", str(port)], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url)
        iam = boto3.client("iam", endpoint_url=url, aws_access_key_id="x", aws_secret_access_key="x",
                           region_name="us-east-1")
        iam.create_user(UserName="gpuwatch")
        key = iam.create_access_key(UserName="gpuwatch")["AccessKey"]
        iam.put_user_policy(UserName="gpuwatch", PolicyName="lake", PolicyDocument=READ_POLICY)
        server_s3 = S3(url, key["AccessKeyId"], key["SecretAccessKey"], log)
        server_s3.client().create_bucket(Bucket=BUCKET)
        yield server_s3
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _aws_env(env, s3: S3) -> None:
    """The standard AWS variables pointing at the server (what a pod gets from its Secret)."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        env.delenv(name, raising=False)
    env.setenv("AWS_ACCESS_KEY_ID", s3.key)
    env.setenv("AWS_SECRET_ACCESS_KEY", s3.secret)
    env.setenv("AWS_DEFAULT_REGION", "us-east-1")
    env.setenv("AWS_EC2_METADATA_DISABLED", "true")
    env.setenv("AWS_ENDPOINT_URL", s3.url)


@pytest.fixture
def aws(s3, monkeypatch) -> S3:
    _aws_env(monkeypatch, s3)
    return s3


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """Two days of a small simulated fleet (every table: MIG, shared GPUs, failures, topology), 5-minute samples."""
    out = tmp_path_factory.mktemp("fleet")
    write_bundle(fleet.build_fleet(gpus=8, days=2, failures=True, topology=True), out, step=300)
    return out


@pytest.fixture(scope="module")
def direct(bundle, tmp_path_factory) -> Path:
    """The bundle ingested straight into a store, as `gpuwatch ingest --cluster` does."""
    db = tmp_path_factory.mktemp("direct") / "direct.duckdb"
    assert main(["ingest", "--from", str(bundle), "--db", str(db), "--cluster", CLUSTER]) == 0
    return db


@pytest.fixture(scope="module")
def shared(s3, bundle) -> str:
    """The bundle put once into s3://lake/shared (the tests below only read it)."""
    with pytest.MonkeyPatch.context() as env:
        _aws_env(env, s3)
        assert lake("put", "--from", str(bundle), "--to", f"s3://{BUCKET}/shared", "--cluster", CLUSTER) == 0
    return f"s3://{BUCKET}/shared"


def tables(db: Path, *, where: dict[str, str] | None = None) -> dict[str, list[tuple]]:
    """Every bundle table of a store, rows sorted (``where``: a filter per table)."""
    con = store.connect(str(db), read_only=True)
    try:
        return {name: con.execute(f"SELECT {', '.join(cols)} FROM {name} "
                                  f"{'WHERE ' + where[name] if where and name in where else ''} ORDER BY ALL").fetchall()
                for name, cols in BUNDLE_COLUMNS.items()}
    finally:
        con.close()


def lake(*argv: str) -> int:
    return main(["lake", *argv])


# --- round trip ---------------------------------------------------------------------------------

def test_put_then_get_equals_a_direct_ingest_row_for_row_however_often(aws, shared, direct, tmp_path):
    keys = aws.keys("shared/")
    pattern = re.compile(rf"shared/(\w+)/cluster={CLUSTER}/date=(2026-11-\d\d)/part-[0-9a-f]{{16}}\.parquet")
    assert all(pattern.fullmatch(k) for k in keys), sorted(keys)
    assert {m.group(2) for m in map(pattern.fullmatch, keys) if m.group(1) == "samples"} == {"2026-11-09", "2026-11-10"}
    db = tmp_path / "got.duckdb"
    for _ in range(2):  # a second get of the same window replaces, never adds
        assert lake("get", "--from", shared, "--db", str(db), "--endpoint-url", aws.url) == 0
    got, want = tables(db), tables(direct)
    assert {n for n, rows in want.items() if rows} >= {"samples", "devices", "pods", "pod_status", "topology", "health"}
    for name in BUNDLE_COLUMNS:
        assert got[name] == want[name], name


def test_putting_the_same_window_again_overwrites_the_same_objects(aws, shared, bundle):
    first = aws.keys("shared/")
    assert lake("put", "--from", str(bundle), "--to", shared, "--cluster", CLUSTER) == 0
    again = aws.keys("shared/")
    assert set(again) == set(first) and again != first  # the same names, rewritten (a newer put time)


def test_a_newer_put_of_part_of_a_day_wins_over_the_older_whole_day(direct, tmp_path):
    root, fixed = tmp_path / "lake", tmp_path / "fixed.duckdb"
    assert lake("put", "--db", str(direct), "--to", str(root), "--cluster", CLUSTER) == 0
    shutil.copyfile(direct, fixed)
    con = store.connect(str(fixed))
    con.execute("UPDATE sample_readings SET gpu_util = 0.125 WHERE ts >= TIMESTAMP '2026-11-09 12:00'")
    con.close()
    assert lake("put", "--db", str(fixed), "--to", str(root), "--cluster", CLUSTER,
                "--start", "2026-11-09T12:00:00Z", "--end", "2026-11-10T00:00:00Z") == 0  # the same window end
    assert lake("get", "--from", str(root), "--db", str(tmp_path / "got.duckdb")) == 0
    got, want = tables(tmp_path / "got.duckdb"), tables(direct)
    afternoon = [BUNDLE_COLUMNS["samples"].index(c) for c in ("ts", "gpu_util")]
    corrected = [r[afternoon[1]] for r in got["samples"] if datetime(2026, 11, 9, 12) <= r[afternoon[0]] < DAY0 + timedelta(days=1)]
    assert corrected and set(corrected) == {0.125}
    assert len(got["samples"]) == len(want["samples"])  # replaced, not added
    assert [r for r in got["samples"] if r[afternoon[0]] < datetime(2026, 11, 9, 12)] == \
        [r for r in want["samples"] if r[afternoon[0]] < datetime(2026, 11, 9, 12)]


def test_overlapping_windows_append_objects_and_get_keeps_one_row_each(aws, direct, tmp_path):
    root = f"s3://{BUCKET}/overlap"
    assert lake("put", "--db", str(direct), "--to", root, "--cluster", CLUSTER) == 0
    before = aws.keys("overlap/")
    assert lake("put", "--db", str(direct), "--to", root, "--cluster", CLUSTER,
                "--start", "2026-11-09T12:00:00Z", "--end", "2026-11-10T12:00:00Z") == 0
    after = aws.keys("overlap/")
    assert set(before) < set(after) and all(after[k] == etag for k, etag in before.items())  # append-only
    assert lake("get", "--from", root, "--db", str(tmp_path / "got.duckdb")) == 0
    assert tables(tmp_path / "got.duckdb") == tables(direct)  # the store's own names come back as they were


@pytest.mark.parametrize("listing", ["per day", "recursive"])
def test_a_window_get_fetches_only_the_objects_of_its_days(aws, shared, direct, tmp_path, listing, monkeypatch):
    if listing == "recursive":  # a long window lists the cluster's prefix once instead of each day's
        monkeypatch.setattr(storage, "MAX_DAY_LISTINGS", 0)
    seen = len(aws.gets())
    db = tmp_path / "day2.duckdb"
    assert lake("get", "--from", shared, "--db", str(db), "--start", "2026-11-10T00:00:00Z",
                "--end", "2026-11-11T00:00:00Z") == 0
    fetched = set(aws.gets()[seen:])
    assert fetched == {f"{BUCKET}/{k}" for k in aws.keys("shared/") if "/date=2026-11-10/" in k}
    in_day = "ts >= TIMESTAMP '2026-11-10' AND ts < TIMESTAMP '2026-11-11'"
    got, want = tables(db), tables(direct, where=dict.fromkeys(layout.TIME_TABLES, in_day))
    for name in layout.TIME_TABLES:
        assert got[name] == want[name], name
    assert got["samples"] and got["devices"] == want["devices"]


def test_a_local_directory_root_is_the_same_layout_and_the_same_rows(aws, shared, bundle, direct, tmp_path):
    root = tmp_path / "lake"
    assert lake("put", "--from", str(bundle), "--to", str(root), "--cluster", CLUSTER) == 0
    on_disk = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert on_disk == {k.removeprefix("shared/") for k in aws.keys("shared/")}
    assert lake("get", "--from", f"file://{root}", "--db", str(tmp_path / "got.duckdb")) == 0
    assert tables(tmp_path / "got.duckdb") == tables(direct)


def test_days_puts_whole_days_before_today_and_skips_days_without_data(direct, tmp_path, capsys):
    from gpuwatch.lake import command

    root = tmp_path / "lake"
    args = build_parser("lake").parse_args(["lake", "put", "--db", str(direct), "--to", str(root), "--cluster",
                                            CLUSTER, "--days", "3"])
    assert command.run(args, now=datetime(2026, 11, 12, 5, 30)) == 0  # the window: Nov 9, 10 and 11
    assert "2026-11-09T00:00:00Z to 2026-11-12T00:00:00Z" in capsys.readouterr().out
    days = {p.parent.name for p in root.rglob("part-*.parquet")}
    assert days == {"date=2026-11-09", "date=2026-11-10"}  # Nov 11 has no data: no objects, not even snapshots


def test_clusters_load_side_by_side_and_one_can_be_picked(bundle, tmp_path):
    root = str(tmp_path / "fleet")
    us = other_gpus(bundle, tmp_path / "us", tag="us")  # one GPU UUID is one GPU: us has its own
    for name, source in (("eu", bundle), ("us", us)):
        assert lake("put", "--from", str(source), "--to", root, "--cluster", name,
                    "--start", "2026-11-10T00:00:00Z", "--end", "2026-11-10T06:00:00Z") == 0
    both, one = tmp_path / "both.duckdb", tmp_path / "one.duckdb"
    assert lake("get", "--from", root, "--db", str(both)) == 0
    assert lake("get", "--from", root, "--db", str(one), "--cluster", "us") == 0
    query = ("SELECT split_part(node, '/', 1) AS c, count(*), min(ts), max(ts) FROM samples GROUP BY c ORDER BY c")
    got = {db: store.connect(str(db), read_only=True).execute(query).fetchall() for db in (both, one)}
    assert [c for c, *_ in got[both]] == ["eu", "us"] and got[both][0][1] == got[both][1][1] > 0
    assert got[one] == got[both][1:]
    assert all(lo >= datetime(2026, 11, 10) and hi < datetime(2026, 11, 10, 6) for _, _, lo, hi in got[both])


def test_put_from_prometheus_stores_its_5_minute_means(aws, tmp_path):
    """Prometheus keeps the raw (1-minute) samples; the lake gets avg_over_time per 5-minute step."""
    from gpuwatch.ingest import openmetrics
    from tests.support.prometheus import backfill, require_prometheus, running

    require_prometheus()
    import numpy as np
    import pandas as pd

    raw = tmp_path / "raw"
    write_bundle(fleet.build_fleet(gpus=8, days=1), raw, step=60)
    start, end = DAY0 + timedelta(hours=12), DAY0 + timedelta(hours=15)
    frames = {n: pd.read_parquet(raw / f"{n}.parquet") for n in ("devices", "samples", "pods")}
    ts = frames["samples"]["ts"]  # UTC-aware in the bundle
    margin = pd.Timedelta(minutes=10)
    samples = frames["samples"][(ts >= pd.Timestamp(start, tz="UTC") - margin) & (ts <= pd.Timestamp(end, tz="UTC") + margin)]
    grid = np.arange((start - DAY0).total_seconds() - 600, (end - DAY0).total_seconds() + 600, 60) + DAY0.timestamp()
    om = tmp_path / "fleet.om"
    openmetrics.write(om, openmetrics.sample_families(frames["devices"], samples),
                      openmetrics.ksm_families(frames["pods"], grid))
    window = ["--start", f"{start:%Y-%m-%dT%H:%M:%SZ}", "--end", f"{end:%Y-%m-%dT%H:%M:%SZ}"]
    with running(tmp_path, tsdb=backfill(om, tmp_path / "tsdb")) as prom:
        source = prom.url.replace("http://", "prometheus://")
        assert lake("put", "--from", source, "--to", f"s3://{BUCKET}/prom", "--cluster", CLUSTER, *window) == 0
        direct = tmp_path / "direct.duckdb"
        assert main(["ingest", "--from", source, "--step", "5m", "--db", str(direct), "--cluster", CLUSTER,
                     *window]) == 0
    got = tmp_path / "got.duckdb"
    assert lake("get", "--from", f"s3://{BUCKET}/prom", "--db", str(got)) == 0
    in_window = f"ts < TIMESTAMP '{end:%Y-%m-%d %H:%M:%S}'"  # the lake's window excludes its end
    want = tables(direct, where=dict.fromkeys(layout.TIME_TABLES, in_window))
    assert tables(got)["samples"] == want["samples"] and want["samples"]
    con = store.connect(str(got), read_only=True)
    steps = con.execute("SELECT DISTINCT ts FROM samples ORDER BY ts").fetchall()
    node, uuid = samples.loc[samples["mig_gi_id"].isna() & samples["pod"].notna(), ["node", "gpu_uuid"]].iloc[0]
    lake_power = dict(con.execute("SELECT ts, power_watts FROM samples WHERE node = $n AND gpu_uuid = $g",
                                  {"n": f"{CLUSTER}/{node}", "g": uuid}).fetchall())
    con.close()
    assert [t for (t,) in steps] == [start + timedelta(minutes=5 * i) for i in range(36)] and len(lake_power) == 36
    one = samples[(samples["node"] == node) & (samples["gpu_uuid"] == uuid)]
    raw = pd.Series(one["power_watts"].to_numpy(), index=one["ts"].dt.tz_localize(None))
    for t, watts in lake_power.items():  # avg_over_time over the step: the raw minutes in (t - 5m, t]
        assert watts == pytest.approx(raw[(raw.index > t - timedelta(minutes=5)) & (raw.index <= t)].mean()), t


# --- errors: one line, never a traceback --------------------------------------------------------

def _fails(capsys, argv: list[str], *, code: int, says: str) -> None:
    assert lake(*argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "Traceback" not in err[0], err


def test_a_missing_bucket_is_one_line(aws, bundle, tmp_path, capsys):
    _fails(capsys, ["put", "--from", str(bundle), "--to", "s3://no-such-bucket/x", "--cluster", CLUSTER],
           code=1, says="s3://no-such-bucket/x: the bucket does not exist")
    _fails(capsys, ["get", "--from", "s3://no-such-bucket/x", "--db", str(tmp_path / "s.duckdb")],
           code=1, says="the bucket does not exist")
    assert not (tmp_path / "s.duckdb").exists()  # checked before the store is created


def test_bad_credentials_are_one_line(aws, bundle, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    _fails(capsys, ["get", "--from", f"s3://{BUCKET}/shared", "--db", str(tmp_path / "s.duckdb")],
           code=1, says="access denied (SIGNATURE_DOES_NOT_MATCH)")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY")
    _fails(capsys, ["put", "--from", str(bundle), "--to", f"s3://{BUCKET}/x", "--cluster", CLUSTER],
           code=1, says="access denied (INVALID_ACCESS_KEY_ID)")


def test_an_unreachable_endpoint_is_one_line_and_quick(aws, tmp_path, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()
    _fails(capsys, ["get", "--from", f"s3://{BUCKET}/x", "--db", str(tmp_path / "s.duckdb"), "--endpoint-url", dead],
           code=1, says="cannot reach the S3 endpoint")
    assert time.monotonic() - started < 20


def test_nothing_there_is_one_line(aws, tmp_path, capsys):
    _fails(capsys, ["get", "--from", f"s3://{BUCKET}/empty", "--db", str(tmp_path / "s.duckdb")],
           code=1, says="no lake partitions here")
    _fails(capsys, ["get", "--from", f"s3://{BUCKET}/empty", "--db", str(tmp_path / "s.duckdb"),
                    "--cluster", "nowhere"], code=1, says="nothing for cluster nowhere")
    _fails(capsys, ["get", "--from", str(tmp_path / "missing"), "--db", str(tmp_path / "s.duckdb")],
           code=1, says="no such directory")


def test_a_missing_source_is_one_line_and_touches_no_lake(tmp_path, capsys):
    _fails(capsys, ["put", "--from", str(tmp_path / "nope"), "--to", str(tmp_path / "lake"), "--cluster", CLUSTER],
           code=1, says="no such file or directory")
    _fails(capsys, ["put", "--db", str(tmp_path / "nope.duckdb"), "--to", str(tmp_path / "lake"), "--cluster",
                    CLUSTER], code=1, says="not a gpuwatch store")
    assert not (tmp_path / "nope.duckdb").exists() and not (tmp_path / "lake").exists()


def test_an_object_that_is_not_its_table_is_named(aws, tmp_path, capsys):
    root = tmp_path / "lake"
    day = layout.DayWindow(DAY0.date(), DAY0, DAY0 + timedelta(hours=1))
    part = root / "samples" / "cluster=x" / "date=2026-11-09" / layout.part_name("samples", "x", day)
    part.parent.mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"ts": ["yesterday"], "node": ["n"], "gpu_uuid": ["g"]}), part)
    _fails(capsys, ["get", "--from", str(root), "--db", str(tmp_path / "s.duckdb")], code=1, says=str(part))


@pytest.mark.parametrize(("argv", "says"), [
    (["put", "--from", "x", "--to", "/tmp/l", "--cluster", "Prod_EU"], "--cluster: 'Prod_EU' is not a cluster name"),
    (["get", "--from", "/tmp/l", "--db", "s", "--days", "2", "--start", "2026-11-09"], "--days: not with --start/--end"),
    (["get", "--from", "/tmp/l", "--db", "s", "--start", "2026-11-10", "--end", "2026-11-09"], "is before --start"),
    (["get", "--from", "gs://b/x", "--db", "s"], "expected s3://BUCKET[/PREFIX] or a directory"),
    (["get", "--from", "s3://bkt/x", "--db", "s", "--endpoint-url", "minio:9000"], "--endpoint-url: 'minio:9000'"),
])
def test_bad_flags_are_usage_errors(argv, says, capsys):
    _fails(capsys, argv, code=2, says=says)


# --- the chart's lake CronJob ---------------------------------------------------------------------

LAKE = {"enabled": True, "root": "s3://gpu-lake/fleet", "cluster": "prod-eu", "existingSecret": "lake-s3",
        "endpointUrl": "http://minio.storage:9000"}


@pytest.mark.parametrize("source", ["prometheus", "db"])
def test_the_chart_puts_each_day_with_credentials_from_a_secret(source):
    from tests.support.helm_chart import CHART, container, find, helm, pod_spec, render, with_choice

    values = {"lake": {**LAKE, "source": source}}
    report = helm().lint(CHART, with_choice(values), strict=True, namespace="gpuwatch")
    assert report["errors"] == [] and not [m for m in report["messages"] if m["severity"] >= 2], report
    docs = render(values)
    kv = pytest.importorskip("kubernetes_validate")
    for doc in (d for d in docs if d.component == "lake"):
        kv.validate(doc.obj, kv.utils.latest_version(), strict=True)
    cron = find(docs, "CronJob", "lake")
    spec = pod_spec(cron)
    lake_container = container(spec, "lake")
    args = build_parser("lake").parse_args(lake_container["args"])  # the real CLI parser
    assert (args.action, args.root, args.cluster, args.days) == ("put", "s3://gpu-lake/fleet", "prod-eu", 2)
    assert (args.db == "/data/gpuwatch.duckdb") == (source == "db") and (args.source is None) == (source == "db")
    assert args.endpoint_url == "http://minio.storage:9000"
    secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in lake_container["env"] if "valueFrom" in e}
    assert secret == {k: {"name": "lake-s3", "key": k} for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    assert spec["automountServiceAccountToken"] is False and lake_container["securityContext"]["readOnlyRootFilesystem"]
    mounts = {m["name"]: m.get("readOnly", False) for m in lake_container["volumeMounts"]}
    assert mounts == ({"data": True, "tmp": False} if source == "db" else {"tmp": False})
    egress = find(docs, "NetworkPolicy", "lake")["spec"]["egress"]
    ports = [sorted(p["port"] for p in rule["ports"]) for rule in egress]
    assert ports == [[53, 53], [9000]] + ([[9090]] if source == "prometheus" else [])
    assert not [d for d in render() if d.component == "lake"]  # off by default


def test_the_chart_refuses_a_lake_without_root_or_cluster():
    from tests.support.helm_chart import helm, render

    for missing in ("root", "cluster"):
        with pytest.raises(helm().HelmValuesError, match=f"/lake/{missing}|lake.*{missing}"):
            render({"lake": {**LAKE, missing: ""}})


# --- the layout's arithmetic ----------------------------------------------------------------------

@given(st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31)),
       st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=9)))
def test_day_windows_tile_the_window_one_day_each(start, length):
    windows = layout.day_windows(start, start + length)
    assert windows[0].start == start and windows[-1].end == start + length
    assert all(a.end == b.start for a, b in itertools.pairwise(windows))
    for w in windows:  # inside its day: from its start up to the next midnight at most
        assert w.start.date() == w.day and w.start <= w.end <= datetime.combine(w.day, datetime.min.time()) + layout.DAY
    assert len({layout.part_name("samples", "c", w) for w in windows}) == len(windows)
