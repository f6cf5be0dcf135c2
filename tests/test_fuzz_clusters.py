"""Fuzzing clusters, lake objects and since-last replies with gaps (hypothesis, bounded; issue 31).

Each law runs real loads into a real DuckDB store and keeps, beside it, a model of the store written
here from the documented rules alone (README "Several clusters", "A load replaces only what it
carries"): a load's cluster qualifies its names and refuses a name of another cluster; one GPU UUID
is one GPU (held under two nodes at once -> refused); samples replace the stored ones of a device at
the timestamps the load carries, no others. Laws, for every drawn sequence of loads:
- never a traceback: only gpuwatch's DataError (one line, naming the source) escapes;
- a refusal exactly when the model refuses, for the model's reason, with the store untouched;
- otherwise the store's samples (rows, Σ utilization, per device and timestamp) and devices equal
  the model's, and no device is held outside its evidence: every stored device was loaded under that
  qualified node, and no GPU is under two nodes at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pandas as pd
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuwatch import store, units
from gpuwatch.ingest import since
from gpuwatch.lake import get as lake_get
from gpuwatch.lake import layout, storage

T0 = datetime(2026, 11, 9)
FUZZ = settings(max_examples=8, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CLUSTERS = ("prod", "dev")
NODES = ("n1", "n2", "prod/n1", "dev/n1", "dev/n2", "x/n1")
UUIDS = ("GPU-a", "GPU-b", "GPU-c")
TABLES = ("devices", "samples")


# ---- the model: the documented rules, written independently of the store


class Refused(Exception):
    """The model refuses the load; ``reason`` is a phrase the store's one-line error must carry."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Model:
    samples: list[tuple] = field(default_factory=list)  # (node, uuid, ts, pod, util)
    devices: dict[tuple, str] = field(default_factory=dict)  # (node, uuid) -> model

    def load(self, devices: list[tuple], samples: list[tuple], cluster: str | None) -> None:
        """Apply one load (devices (node, uuid, model); samples (node, uuid, minute, pod, util)) or
        raise Refused, leaving the model as it was."""
        devices = [(self.qualify(n, cluster), u, m) for n, u, m in devices]
        samples = [(self.qualify(n, cluster), u, T0 + timedelta(minutes=t), p, v) for n, u, t, p, v in samples]
        carried = {(n, u, ts) for n, u, ts, _, _ in samples}
        after = Model([s for s in self.samples if (s[0], s[1], s[2]) not in carried] + samples,
                      {**self.devices, **{(n, u): m for n, u, m in devices}})
        after.check_places({u for _, u, _ in devices} | {s[1] for s in samples})
        self.samples, self.devices = after.samples, after.devices

    @staticmethod
    def qualify(node: str, cluster: str | None) -> str:
        if cluster is None:
            return node
        if "/" in node:
            if not node.startswith(cluster + "/"):
                raise Refused("names cluster")
            return node
        return f"{cluster}/{node}"

    def check_places(self, touched: set[str]) -> None:
        for uuid in sorted(touched):
            times: dict[str, list[datetime]] = {n: [] for (n, u) in self.devices if u == uuid}
            for n, u, ts, _, _ in self.samples:
                if u == uuid:
                    times.setdefault(n, []).append(ts)
            nodes = sorted(times)
            for i, a in enumerate(nodes):
                for b in nodes[i + 1:]:
                    if not times[a] or not times[b] or (_inside(times[a], times[b]) and _inside(times[b], times[a])):
                        raise Refused("two nodes at once")


def _inside(these: list[datetime], those: list[datetime]) -> bool:
    return any(min(those) <= t <= max(those) for t in these)


# ---- the store's side


def _frames(devices: list[tuple], samples: list[tuple]) -> dict[str, pd.DataFrame]:
    frames = {}
    if devices:
        frames["devices"] = pd.DataFrame(devices, columns=["node", "gpu_uuid", "gpu_model"])
    if samples:
        rows = [{"ts": T0 + timedelta(minutes=t), "node": n, "gpu_uuid": u, "namespace": "ns", "pod": p, "gpu_util": v}
                for n, u, t, p, v in samples]
        frames["samples"] = pd.DataFrame(rows)
    return frames


def _fingerprint(con) -> tuple:
    return tuple(con.execute(f"SELECT count(*), sum(hash(t)) FROM {name} t").fetchall()[0] for name in TABLES)


def _assert_refused_cleanly(exc: Exception, expected: Refused | None, *, before: tuple, con, source: str) -> None:
    message = units.one_line(exc)
    assert isinstance(exc, units.DataError), f"not a DataError: {exc!r}"
    assert str(exc).strip() == message and source in message
    assert expected is not None, f"refused, but the rules accept it: {message}"
    assert expected.reason in message, message
    assert _fingerprint(con) == before  # untouched


def _assert_matches(con, model: Model) -> None:
    """The store holds exactly the model's samples and devices, and nothing outside their evidence."""
    got = con.execute("SELECT node, gpu_uuid, ts, count(*), sum(gpu_util) FROM samples GROUP BY ALL ORDER BY ALL").fetchall()
    expected: dict[tuple, list[float]] = {}
    for n, u, ts, _, v in model.samples:
        expected.setdefault((n, u, ts), []).append(v)
    assert [(n, u, ts, c) for n, u, ts, c, _ in got] == [(*k, len(v)) for k, v in sorted(expected.items())]
    for n, u, ts, _, total in got:
        assert math.isclose(total, math.fsum(expected[(n, u, ts)]), abs_tol=1e-12)
    devices = con.execute("SELECT node, gpu_uuid FROM devices ORDER BY ALL").fetchall()
    assert devices == sorted(model.devices)
    # no device outside its evidence: every stored device and sampled node was loaded under that
    # qualified name (the model's), and no GPU is under two nodes at once (samples of each inside the
    # other's span, or a listed device without a sample)
    times: dict[str, dict[str, list]] = {}
    for node, uuid, ts in con.execute("SELECT node, gpu_uuid, ts FROM samples").fetchall():
        times.setdefault(uuid, {}).setdefault(node, []).append(ts)
    for node, uuid in devices:
        times.setdefault(uuid, {}).setdefault(node, [])
    for uuid, nodes in times.items():
        names = sorted(nodes)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                assert nodes[a] and nodes[b] and not (_inside(nodes[a], nodes[b]) and _inside(nodes[b], nodes[a])), uuid


# ---- strategies

minute = st.integers(0, 11)
# a node's own GPU (GPU-<node name without its cluster>: the same GPU when a bundle is loaded with and
# without --cluster) or, less often, one of a few UUIDs any node may claim
node_gpu = st.tuples(st.sampled_from(NODES), st.one_of(st.none(), st.none(), st.sampled_from(UUIDS))).map(
    lambda x: (x[0], x[1] or "GPU-" + x[0].rsplit("/", 1)[-1]))
sample_row = st.tuples(node_gpu, minute, st.sampled_from(["p1", "p2", None]), st.floats(0, 1, allow_nan=False)).map(
    lambda x: (*x[0], *x[1:]))
device_row = st.tuples(node_gpu, st.sampled_from(["H100", "A100"])).map(lambda x: (*x[0], x[1]))
a_load = st.tuples(st.lists(device_row, max_size=3), st.lists(sample_row, max_size=8),
                   st.sampled_from([None, *CLUSTERS])).filter(lambda x: x[0] or x[1])


def _unique(samples: list[tuple]) -> list[tuple]:
    """One row per device, minute and pod (a load's duplicates are staging's concern, not this law's)."""
    seen, out = set(), []
    for row in samples:
        if row[:4] not in seen:
            seen.add(row[:4])
            out.append(row)
    return out


def _devices_unique(devices: list[tuple]) -> list[tuple]:
    last = {(n, u): m for n, u, m in devices}
    return [(n, u, m) for (n, u), m in last.items()]


@FUZZ
@given(loads=st.lists(a_load, min_size=1, max_size=3))
def test_loads_of_several_clusters_match_the_rules_or_are_refused_whole(loads):
    con, model = store.connect(None), Model()
    for i, (devices, samples, cluster) in enumerate(loads):
        devices, samples = _devices_unique(devices), _unique(samples)
        source = f"load-{i}"
        expected = None
        try:
            model.load(devices, samples, cluster)
        except Refused as refused:
            expected = refused
        before = _fingerprint(con)
        try:
            store.load(con, _frames(devices, samples), source=source, cluster=cluster)
        except Exception as exc:  # the law: only a clean DataError, and only where the rules refuse
            _assert_refused_cleanly(exc, expected, before=before, con=con, source=source)
            event(f"refused: {expected.reason}")
            continue
        assert expected is None, f"loaded, but the rules refuse ({expected.reason})"
        event("loaded")
        _assert_matches(con, model)


# ---- lake objects: the partition decides the cluster


def _put_object(lake, table: str, cluster: str, frame: pd.DataFrame, window: tuple[datetime, datetime]) -> None:
    """One lake object as any writer may leave it (the layout's path and window columns, only the
    columns it has): names as drawn, whatever its partition says."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lo, hi, at = layout.WINDOW_COLUMNS
    frame = frame.assign(**{lo: window[0], hi: window[1], at: window[1]})
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink)
    day = layout.day_windows(*window)[0]
    path = f"{layout.partition_dir(lake.base, table, cluster, day.day)}/{layout.part_name(table, cluster, day)}"
    storage.write_object(lake, path, sink.getvalue())


@FUZZ
@given(objects=st.dictionaries(st.sampled_from(["c1", "zz"]),
                               st.tuples(st.lists(device_row, max_size=2), st.lists(sample_row, min_size=1, max_size=6)),
                               min_size=1))
def test_lake_objects_load_by_their_partition_or_are_refused(tmp_path_factory, objects):
    lake = storage.open_lake(str(tmp_path_factory.mktemp("lake")))
    window = (T0, T0 + timedelta(hours=1))
    rename = {"prod/": "c1/", "dev/": "zz/"}  # names that claim the lake's clusters
    puts = {}
    for cluster, (devices, samples) in objects.items():
        devices = _devices_unique([(_renamed(n, rename), u, m) for n, u, m in devices])
        samples = _unique([(_renamed(n, rename), u, t, p, v) for n, u, t, p, v in samples])
        for table, frame in _frames(devices, samples).items():
            _put_object(lake, table, cluster, frame, window)
        puts[cluster] = (devices, samples)
    con, model = store.connect(None), Model()
    for cluster, (devices, samples) in sorted(puts.items()):
        expected = None
        try:
            model.load(devices, samples, cluster)
        except Refused as refused:
            expected = refused
        before = _fingerprint(con)
        try:
            lake_get.get(con, lake, clusters=[cluster], window=window)
        except Exception as exc:
            _assert_refused_cleanly(exc, expected, before=before, con=con, source=f"cluster={cluster}")
            event(f"refused: {expected.reason}")
            continue
        assert expected is None, f"loaded, but the rules refuse ({expected.reason})"
        event("loaded")
        _assert_matches(con, model)


def _renamed(node: str, prefixes: dict[str, str]) -> str:
    for old, new in prefixes.items():
        node = node.replace(old, new)
    return node


# ---- since-last replies with gaps (and a GPU a reply shows under a second node)


@FUZZ
@given(lost=st.sets(st.tuples(st.sampled_from(UUIDS), st.integers(36, 61)), max_size=30),
       changed=st.floats(0, 1, allow_nan=False),
       ghost=st.one_of(st.none(), st.tuples(st.sampled_from(UUIDS), st.integers(36, 61), st.integers(0, 6))))
def test_a_since_last_reply_with_gaps_only_adds_and_corrects(lost, changed, ghost):
    con, model = store.connect(None), Model()
    first = [("n1", u, t, "p", 0.5) for u in UUIDS for t in range(60)]
    devices = [("n1", u, "H100") for u in UUIDS]
    store.load(con, _frames(devices, first), source="first")
    model.load(devices, first, None)

    reply: dict[str, list] = {}

    def fetch(url, *, start, end, step, team_label):
        lo, hi = int((start - T0).total_seconds() // 60), int((end - T0).total_seconds() // 60)
        rows = [("n1", u, t, "p", changed) for u in UUIDS for t in range(lo, hi) if (u, t) not in lost]
        if ghost is not None:  # the same GPU under a second node (a mislabelled replica)
            uuid, at, length = ghost
            rows += [("n2", uuid, t, "p", changed) for t in range(at, min(at + length + 1, hi))]
        devs = sorted({(n, u, "H100") for n, u, *_ in rows})
        reply["devices"], reply["samples"] = devs, rows
        return _frames(devs, rows)

    before = _fingerprint(con)
    try:
        since.ingest(con, "prometheus://replica", end=T0 + timedelta(minutes=62), step=60.0, tail=1200, fetch=fetch)
    except Exception as exc:
        expected = None
        try:
            model.load(reply["devices"], reply["samples"], None)
        except Refused as refused:
            expected = refused
        _assert_refused_cleanly(exc, expected, before=before, con=con, source="prometheus://replica")
        event("refused: ghost")
        return
    kept = {(u, ts) for n, u, ts, *_ in model.samples}
    model.load(reply["devices"], reply["samples"], None)  # raises (failing the law) where the store should have refused
    event("loaded")
    _assert_matches(con, model)
    # a re-read never deletes: every (GPU, time) stored before is still stored
    assert kept <= {(u, ts) for u, ts in con.execute("SELECT gpu_uuid, ts FROM samples").fetchall()}
