"""Loading bundle data into the store: in-memory frames (the ingest readers) and bundle directories.

One path for both: rows are typed and checked by DuckDB (columns.py, naming file, column and row),
small tables are upserted by key, and samples (stored as keys and readings: store/keys.py) replace
only what they carry: for each device (node, gpu_uuid, mig_gi_id) in the load, that device's stored
samples at the timestamps the load carries for it (replace_series.sql). Another node's samples, or this
device's at a timestamp the load lacks, are never touched. The load's cluster decides the cluster
(``_qualify``) and one GPU UUID is one GPU (store/places.py). Everything happens in one transaction:
a failed load leaves the store exactly as it was.

Refuse the file or the reading: a bundle file (or a frame loaded as one) whose ratio reading is out of
range is refused whole, naming file, column and row: its writer chose the units, and one percent in a
ratio column usually means the whole column is in percent. A live source's frames (``refuse_readings``:
Prometheus, a scraped /metrics page) have their units decided by gpuwatch's own reader per served name,
so such a value is one glitchy reading (a GPU_UTIL of 120 %): it alone is stored as NULL (unknown),
counted per load and column in ``refused_readings`` and logged, and the rest loads; refusing the whole
read would refuse every later read of the same window too. Structure is never a reading: an unknown
column, a missing required value, a bad timestamp or count refuses the load for every source.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store import bundle, columns, keys, places, prices_match, topology_match
from gpuwatch.store.columns import ROW
from gpuwatch.store.restage import replace_samples, restage_streams, stage_all
from gpuwatch.store.staged import refresh
from gpuwatch.store.validate import BundleError, check_bundle_name

log = logging.getLogger(__name__)
# ``prices=[LIST_PRICES]``: copy the shipped, dated reference list prices into the store.
LIST_PRICES = "list"
LIST_PRICES_FILE = Path(__file__).with_name("list_prices.csv")
# ``cluster=NAME``: the identities that collide across clusters become NAME/<value> (Kubernetes node and
# namespace names never contain "/", so the qualifier is unambiguous; GPU and pod UIDs are unique).
QUALIFIED = {"devices": ("node",), "samples": ("node", "namespace"), "pods": ("node", "namespace"), "nodes": ("node",),
             "pod_status": ("namespace",), "health": ("node",), "topology": ("node",),
             "processes": ("node",), "scheduler_pending": ("queue",)}
# Upsert keys; NULL MIG ids compare equal (IS NOT DISTINCT FROM).
KEYS = {"devices": ("node", "gpu_uuid", "mig_gi_id"), "pods": ("namespace", "pod", "pod_uid"),
        "prices": ("gpu_model", "node_label"), "teams": ("namespace",), "nodes": ("node",),
        "pod_status": ("ts", "namespace", "pod", "container"), "health": ("ts", "node", "gpu_uuid", "kind"),
        "topology": ("node", "gpu_uuid", "peer_gpu_uuid"), "processes": ("ts", "node", "gpu_uuid", "mig_gi_id", "pid"),
        "scheduler_pending": ("ts", "scheduler", "queue", "job", "status", "unit")}


# Checks of a table's typed rows against the store (after this load's devices), before they are upserted.
CHECKS = {"topology": topology_match.check}
# Keys matched on a normal form rather than as written: a price is keyed by its model as staging matches
# it (model_key: trimmed, case-folded) and its node label (trimmed, empty = none), so a later price for
# "nvidia h100 80gb hbm3" replaces an earlier one for "NVIDIA H100 80GB HBM3" instead of standing beside it.
KEY_FORMS = {"prices": {"gpu_model": "model_key({})", "node_label": "nullif(trim({}), '')"}}


# Facts another load may have supplied (ingest --from topo.txt --node writes a node's NUMA nodes; a later
# /metrics or bundle load without them must not wipe them): an incoming NULL keeps the stored value.
KEPT = {"devices": ("numa_node", "nvlink_clique")}


def load(con: Any, frames: dict, *, source: str, window: tuple[datetime, datetime] | None = None,
         prices: Sequence[str | Path] = (), teams: Sequence[str | Path] = (), cluster: str | None = None,
         refuse_readings: bool = False) -> dict[str, int]:
    """Check and load ``frames`` (bundle name -> DataFrame) in one transaction; rows per table.

    ``window`` is what the reader asked for (Prometheus' query range), recorded in ingest_log.
    ``prices``: price files loaded in the same transaction, after the frames (so they win), and/or
    ``LIST_PRICES`` (the shipped list prices, used only for models with no price of the cluster's).
    ``teams``: namespace -> team files (bundle file ``teams``), loaded the same way. ``cluster``: the
    cluster these frames come from, for a store holding several (nodes and namespaces become NAME/...).
    ``refuse_readings`` (a live source: Prometheus, a scraped page): a sample reading out of range (a
    ratio above its limit) is stored as NULL, counted in ``refused_readings`` and logged, and the
    rest loads; without it (bundle files, frames as files) such a reading refuses the load (module
    docstring)."""
    for name in frames:
        check_bundle_name(name, file=f"{source}:{name}")
    parts = {name: ([lambda c, f=frame, label=f"{source}:{name}": _frame_view(c, f, label=label)], f"{source}:{name}")
             for name, frame in frames.items()}
    return _load(con, parts, source=source, window=window, prices=prices, teams=teams, cluster=cluster,
                 refuse_readings=refuse_readings)


def load_bundle(con: Any, path: str | Path, *, window: tuple[datetime, datetime] | None = None,
                progress: bool | None = False, prices: Sequence[str | Path] = (),
                teams: Sequence[str | Path] = (), cluster: str | None = None) -> dict[str, int]:
    """Load a bundle directory (any subset of its files); DuckDB checks, types and inserts it."""
    files = bundle.find_files(path)
    parts = {name: (bundle.parts(file), str(file)) for name, file in files.items()}
    return _load(con, parts, source=str(path), window=window, prices=prices, teams=teams, cluster=cluster)


def link_bundle(con: Any, path: str | Path) -> dict[str, int]:
    """Like load_bundle, but samples stay in the bundle's Parquet: ``linked_samples`` is a view over the
    files (checked once, here), ``sample_readings`` a view over that (store/keys.py), and only the staged
    table is materialised (large fleets). The files must stay where they are; linking again replaces the link."""
    files = bundle.find_files(path)
    samples = files.get("samples")
    if samples is None or not (samples.suffix == ".parquet" or samples.is_dir()):
        raise BundleError(f"{path}: --link needs samples as Parquet (samples.parquet or a samples/ directory)")
    counts = dict.fromkeys(BUNDLE_COLUMNS, 0)
    with _transaction(con):
        places.start(con)
        for name, file in files.items():
            if name != "samples":
                counts[name] = sum(_insert_part(con, name, part, file=str(file)) for part in bundle.parts(file))
        view, types = next(bundle.parts(samples))(con)
        values, rules = columns.plan("samples", types, file=str(samples))
        bad = columns.first_bad(con, view, rules)
        if bad is not None:
            raise bad
        con.execute(f"CREATE OR REPLACE VIEW linked_samples AS SELECT {', '.join(values)} FROM {bundle.parquet_source(samples)}")
        keys.link(con)
        places.touched(con, "sample_keys")
        counts["samples"] = con.execute("SELECT count(*) FROM sample_readings").fetchall()[0][0]
        places.check(con, source=str(path))
        _log(con, source=f"{path} (linked)", window=None, counts=counts)
        refresh(con)
    return counts


def _load(con: Any, parts: dict[str, tuple[Iterator, str]], *, source: str, window,
          prices: Sequence[str | Path] = (), teams: Sequence[str | Path] = (), cluster: str | None = None,
          refuse_readings: bool = False) -> dict[str, int]:
    counts = dict.fromkeys(BUNDLE_COLUMNS, 0)
    refused: list[tuple] = [] if refuse_readings else None
    with _transaction(con):
        places.start(con)
        for name, (pieces, file) in sorted(parts.items(), key=lambda item: item[0] != "devices"):  # devices first:
            if name != "samples":  # the topology check reads them
                counts[name] = sum(_insert_part(con, name, part, file=file, cluster=cluster, check=CHECKS.get(name))
                                   for part in pieces)
        for item in prices:
            if str(item) == LIST_PRICES:
                _replace_list_prices(con)
            else:
                counts["prices"] += sum(_insert_part(con, "prices", part, file=str(item), check=prices_match.check)
                                        for part in bundle.parts(Path(item)))
        for item in teams:
            counts["teams"] += sum(_insert_part(con, "teams", part, file=str(item)) for part in bundle.parts(Path(item)))
        if "samples" in parts:
            _check_not_linked(con)
            pieces, file = parts["samples"]
            if cluster is None and not _has_samples(con):
                # a first load replaces nothing: its checked rows go straight into sample_readings (no copy)
                counts["samples"] = sum(_insert_part(con, "samples", part, file=file, into="sample_readings",
                                                     refused=refused) for part in pieces)
                places.touched(con, "sample_keys")
                carried = stage_all(con)
            else:
                for i, part in enumerate(pieces):
                    counts["samples"] += _insert_part(con, "samples", part, file=file, append=i > 0, refused=refused)
                _qualify(con, "incoming_samples", "samples", cluster, file=file)
                places.touched(con, "incoming_samples")
                con.execute(f"ALTER TABLE incoming_samples DROP COLUMN {ROW}")
                carried = replace_samples(con)
            window = window or carried
        else:
            restage_streams(con)
        places.check(con, source=source)
        at = _log(con, source=source, window=window, counts=counts)
        _refused(con, refused or [], at=at, source=source, cluster=cluster)
    return counts


def _insert_part(con: Any, name: str, part, *, file: str, append: bool = False, cluster: str | None = None,
                 into: str | None = None, check=None, refused: list | None = None) -> int:
    """Type and check one part of a file in one statement; small tables are upserted by key, samples
    gather in ``incoming_samples`` until every part is checked (``into``: straight into that table).
    ``check(con, file=...)``: a further check of the typed rows (``incoming``) before they are upserted.
    ``refused`` (a list: readings are refused, not the part): gains the part's refused readings."""
    import duckdb

    view, types = part(con)
    values, rules = columns.plan(name, types, file=file, refuse_readings=refused is not None)
    if refused is not None and any(r.refused for r in rules):
        typed = {c: v.rsplit(" AS ", 1)[0] for c, v in zip(BUNDLE_COLUMNS[name], values, strict=True)}
        refused += columns.count_refused(con, view, rules, values=typed)
    row = "" if into else f", {ROW}"
    select = f"SELECT {', '.join(values)}{row} FROM {view} WHERE {columns.guard(rules)}"
    target = into or ("incoming_samples" if name == "samples" else "incoming")
    try:
        if into:  # the keys first (checked by their own rules), then the readings
            key_values = [v for c, v in zip(BUNDLE_COLUMNS[name], values, strict=True) if c in keys.KEY]
            key_rules = [r for r in rules if r.column in keys.KEY]
            joined = keys.register(con, f"SELECT {', '.join(key_values)} FROM {view} WHERE {columns.guard(key_rules)}")
            return con.execute(f"INSERT INTO {target} {keys.readings(select, joined=joined)}").fetchall()[0][0]
        if append:
            return con.execute(f"INSERT INTO {target} {select}").fetchall()[0][0]
        con.execute(f"CREATE OR REPLACE TEMP TABLE {target} AS {select}")
    except duckdb.Error as exc:
        if not columns.is_invalid_row(exc):
            raise

        def diagnose(original=exc):
            again, _ = part(con)
            return columns.first_bad(con, again, rules) or original
        raise _Invalid(diagnose) from exc
    if name == "samples":
        return con.execute(f"SELECT count(*) FROM {target}").fetchall()[0][0]
    try:
        _qualify(con, "incoming", name, cluster, file=file)
        if name == "devices":
            places.touched(con, "incoming")
        if check is not None:
            check(con, file=file)
        return _upsert_incoming(con, name)
    finally:
        con.execute("DROP TABLE incoming")


def _qualify(con: Any, table: str, name: str, cluster: str | None, *, file: str) -> None:
    """Prefix the bundle table's colliding identities (QUALIFIED) with ``cluster/`` (bound, never formatted).
    The cluster is the load's (``--cluster``, the lake partition): a name already qualified with it is
    left as it is, one qualified with another cluster is an error naming file, column and row."""
    for column in QUALIFIED.get(name, ()) if cluster else ():
        other = con.execute(f"SELECT {column}, {ROW} FROM {table} WHERE contains({column}, '/') "
                            f"AND NOT starts_with({column}, $c || '/') ORDER BY {ROW} LIMIT 1", {"c": cluster}).fetchall()
        if other:
            value, row = other[0]
            raise BundleError(f"{file}: column {column!r}, row {row}: {value!r} names cluster "
                              f"{value.split('/', 1)[0]!r}, but this load is cluster {cluster!r} (the --cluster flag or "
                              "the lake partition decides the cluster; a name may carry only its own)")
        con.execute(f"UPDATE {table} SET {column} = $c || '/' || {column} "
                    f"WHERE nullif(trim({column}), '') IS NOT NULL AND NOT contains({column}, '/')", {"c": cluster})


def _upsert_incoming(con: Any, name: str) -> int:
    # the last row of a key wins, as in a file read top to bottom
    form = KEY_FORMS.get(name, {})
    key = {k: form.get(k, "{}") for k in KEYS[name]}
    keys = ", ".join(key[k].format(k) for k in KEYS[name])
    con.execute(f"CREATE OR REPLACE TEMP TABLE incoming AS SELECT * EXCLUDE ({ROW}) FROM incoming "
                f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {ROW} DESC) = 1")
    match = " AND ".join(f"{key[k].format('t.' + k)} IS NOT DISTINCT FROM {key[k].format('i.' + k)}" for k in KEYS[name])
    for column in KEPT.get(name, ()):
        con.execute(f"UPDATE incoming i SET {column} = t.{column} FROM {name} t WHERE {match} AND i.{column} IS NULL")
    if name == "pods":  # no uid: kube-state-metrics never reported the pod, its start is only when a read first
        # saw it, and a read that began while it ran must not move it later
        con.execute(f"UPDATE incoming i SET start_ts = least(i.start_ts, t.start_ts) FROM pods t "
                    f"WHERE {match} AND i.pod_uid IS NULL")
    # pod_status: a state holds until the pod's (container's) next row, so a load replaces each one's rows
    # over the span it carries (a row read before a late scrape arrived goes), and the span's first or last
    # row, where it repeats the state before it (a read beginning while the pod ran, a closing row), is no
    # change: not stored
    span = "SELECT namespace, pod, container, min(ts) AS lo, max(ts) AS hi FROM incoming GROUP BY ALL"
    same = "t.namespace = s.namespace AND t.pod = s.pod AND t.container IS NOT DISTINCT FROM s.container"
    if name == "pod_status":
        con.execute(f"DELETE FROM pod_status t USING ({span}) s WHERE {same} AND t.ts BETWEEN s.lo AND s.hi")
    con.execute(f"DELETE FROM {name} t USING incoming i WHERE {match}")
    inserted = con.execute(f"INSERT INTO {name} SELECT * FROM incoming").fetchall()[0][0]
    if name == "pod_status":
        state = BUNDLE_COLUMNS["pod_status"][4:]
        repeat = " AND ".join(f"t.{c} IS NOT DISTINCT FROM lag(t.{c}) OVER w" for c in state)
        inserted -= con.execute(
            f"DELETE FROM pod_status d USING (SELECT t.ts, t.namespace, t.pod, t.container FROM pod_status t, ({span}) s "
            f"WHERE {same} WINDOW w AS (PARTITION BY t.namespace, t.pod, t.container ORDER BY t.ts) "
            f"QUALIFY row_number() OVER w > 1 AND {repeat} AND t.ts IN (s.lo, s.hi)) r "
            "WHERE d.ts = r.ts AND d.namespace = r.namespace AND d.pod = r.pod "
            "AND d.container IS NOT DISTINCT FROM r.container").fetchall()[0][0]
    return inserted


def _replace_list_prices(con: Any) -> None:
    """The store's list prices become the shipped table (gpuwatch/store/list_prices.csv)."""
    with LIST_PRICES_FILE.open(encoding="utf-8", newline="") as handle:
        rows = [(r["gpu_model"], float(r["usd_per_gpu_hour"]), r["as_of"], r["reference"]) for r in csv.DictReader(handle)]
    con.execute("DELETE FROM list_prices")
    con.executemany("INSERT INTO list_prices VALUES (?, ?, CAST(? AS DATE), ?)", rows)


def _frame_view(con: Any, frame, *, label: str) -> tuple[str, dict[str, str]]:
    """An in-memory frame as a view with 1-based row numbers, like a bundle file's part. The label
    is the only value written into SQL (a view holds no bound parameters); quotes are doubled."""
    con.register("incoming_frame", frame.reset_index(drop=True))
    quoted = "'" + label.replace("'", "''") + "'"
    con.execute(f"CREATE OR REPLACE TEMP VIEW incoming_frame_rows AS SELECT *, "
                f"CAST(row_number() OVER () AS BIGINT) AS {ROW}, {quoted} AS {columns.FILE} FROM incoming_frame")
    types = {row[0]: row[1] for row in con.execute("DESCRIBE incoming_frame").fetchall()}
    return "incoming_frame_rows", types


def _has_samples(con: Any) -> bool:
    return con.execute("SELECT EXISTS (SELECT 1 FROM sample_readings)").fetchall()[0][0]


def _check_not_linked(con: Any) -> None:
    if con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'sample_readings'").fetchall()[0][0]:
        raise BundleError("this store's samples are linked Parquet files (ingest --link); link again instead")


class _Invalid(Exception):
    """A guard fired: the load is rolled back, then ``diagnose`` names the first bad row."""

    def __init__(self, diagnose):
        super().__init__("invalid bundle row")
        self.diagnose = diagnose


@contextmanager
def _transaction(con: Any):
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except _Invalid as exc:
        con.execute("ROLLBACK")
        raise exc.diagnose() from None
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _log(con: Any, *, source: str, window, counts: dict[str, int]) -> datetime:
    lo, hi = window if window is not None else (None, None)
    at = datetime.now(UTC).replace(tzinfo=None)
    con.execute("INSERT INTO ingest_log VALUES ($at, $source, $lo, $hi, $d, $s, $p, $c)",
                {"at": at, "source": source, "lo": lo, "hi": hi,
                 "d": counts["devices"], "s": counts["samples"], "p": counts["pods"], "c": counts["prices"]})
    return at


def _refused(con: Any, refused: list[tuple], *, at: datetime, source: str, cluster: str | None) -> None:
    """Record the load's refused readings (one row per column) beside its ingest_log row, and say so."""
    merged: dict[str, list] = {}
    for column, count, largest, ts, node, uuid in refused:
        row = merged.setdefault(column, [0, largest, ts, node, uuid])
        row[0] += count
        row[1] = max(row[1], largest)
    for column, (count, largest, ts, node, uuid) in merged.items():
        node = f"{cluster}/{node}" if cluster and node and "/" not in node else node
        con.execute("INSERT INTO refused_readings VALUES ($at, $source, $column, $count, $largest, $ts, $node, $uuid)",
                    {"at": at, "source": source, "column": column, "count": count, "largest": largest, "ts": ts,
                     "node": node, "uuid": uuid})
        log.warning("refused %s %s reading(s) out of range (largest %g; first on %s %s at %s): stored as unknown "
                    "(NULL), the rest loaded", f"{count:,}", column, largest, node, uuid, ts)
