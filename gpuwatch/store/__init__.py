"""The store: a DuckDB file with raw bundle tables (schema.sql) and stg_* views (staging.sql).

``load`` (frames from the ingest readers) and ``load_bundle`` (a bundle directory) check every row
in DuckDB, then write in ONE transaction: a bad row anywhere leaves the store exactly as it was.
Samples replace only the series they carry (each device's own time range); devices, pods and
prices are upserted by key (store/load.py).
"""

from __future__ import annotations

import bisect
import os
import re
import tempfile
from datetime import datetime, timedelta
from typing import Any

from gpuwatch import mig, topology
from gpuwatch.store import keys
from gpuwatch.store.files import discard_if_empty, locked_by
from gpuwatch.store.load import LIST_PRICES, link_bundle, load, load_bundle
from gpuwatch.store.staged import node_ranges, refresh, script
from gpuwatch.store.validate import BundleError

__all__ = ["LIST_PRICES", "BundleError", "bulk_end", "connect", "data_range", "discard_if_empty", "has_table",
           "link_bundle", "load", "load_bundle", "locked_by", "node_ranges", "price_coverage", "refresh"]


# DuckDB takes 80% of RAM by default; a store is one process among many (a pod, a laptop), so cap
# it and let large sorts and windows spill to disk instead. Override: GPUWATCH_DUCKDB_MEMORY_LIMIT.
DEFAULT_MEMORY_LIMIT = "2GB"


def connect(path: str | None, *, read_only: bool = False, memory_limit: str | None = None):
    """Open (or create) the store; creates raw tables and staging views unless read-only."""
    import duckdb

    limit = memory_limit or os.environ.get("GPUWATCH_DUCKDB_MEMORY_LIMIT", DEFAULT_MEMORY_LIMIT)
    config = {"memory_limit": limit, "preserve_insertion_order": False}
    if path is None:  # an in-memory store spills to the system temp directory
        config["temp_directory"] = os.path.join(tempfile.gettempdir(), "gpuwatch-duckdb")
    try:
        con = duckdb.connect(":memory:" if path is None else str(path), read_only=read_only, config=config)
    except (duckdb.IOException, duckdb.CatalogException, duckdb.InvalidInputException) as exc:
        held = locked_by(str(exc))
        if held is not None:
            raise BundleError(f"{path}: in use by another process ({held}); a store has one writer at a time: "
                              "stop it, or write to another file") from None
        raise BundleError(f"{path}: not a gpuwatch store ({' '.join(str(exc).split())})") from None
    _session(con)
    if read_only and not _old_staging(con) and not has_table(con, "stg_sample_rows"):
        con.close()
        raise BundleError(f"{path}: not a gpuwatch store (no staged tables; create one with `gpuwatch ingest`)")
    if read_only and (_old_staging(con) or _staged_by(con) != staging_fingerprint()):
        con.close()
        raise BundleError(f"{path}: this store was staged by another gpuwatch version; open it once for writing "
                          "(gpuwatch ingest or analyze) to re-stage it")
    if not read_only and not _made_here(con):
        con.execute("BEGIN TRANSACTION")  # killed half-way, the store stays as it was
        try:
            _stage(con)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            con.close()
            raise
    return con


def materialised() -> tuple[str, ...]:
    """The small staged tables refresh_streams.sql makes from staging.sql's ``<name>_def`` views after every
    load (a store written before they were tables holds them as views)."""
    return tuple(re.findall(r"CREATE OR REPLACE TABLE (\w+) AS SELECT \* FROM \1_def;", script("refresh_streams.sql")))


def cursor(con: Any):
    """Another connection to ``con``'s store with the same session settings: its queries run beside
    ``con``'s and see what ``con`` has committed."""
    return _session(con.cursor())


def _session(con: Any):
    """The settings every connection to a store runs with."""
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # long queries must not draw on the caller's terminal
    return con


def _stage(con: Any) -> None:
    """Create the raw tables, the staging views and macros; re-stage everything when the staged tables
    were made by other SQL or another DuckDB (stream ids are DuckDB hashes), so a load can re-stage
    only what it touched."""
    import duckdb

    made_by = (_staged_by(con), _meta(con, "duckdb"))
    restage = _old_staging(con) or made_by != (staging_fingerprint(), duckdb.__version__)
    if restage:
        _drop_staged_samples(con)
    legacy = _set_aside_legacy_samples(con)
    for name in ("schema.sql", "reclaim_audit.sql"):
        con.execute(script(name))
    _split_legacy_samples(con, legacy)
    write_mig_reference(con)
    write_topology_reference(con)
    con.execute("CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE view_name IN "
                               f"({', '.join(repr(n) for n in materialised())})").fetchall():
        con.execute(f"DROP VIEW {name}")  # an older store's: these are tables now (a name from materialised())
    con.execute(script("staging.sql"))
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('staging', ?), ('duckdb', ?), ('reference', ?)",
                [staging_fingerprint(), duckdb.__version__, reference_fingerprint()])
    if restage:  # the rollup is derived too, and its columns may have changed: made again
        con.execute("DROP TABLE IF EXISTS rollup_stream_hours; DROP TABLE IF EXISTS rollup_meta")
    con.execute(script("rollup.sql"))
    if restage:
        refresh(con)
    else:  # the small staged tables from this SQL and these reference tables
        con.execute(script("refresh_streams.sql"))


def _made_here(con: Any) -> bool:
    """True when this store's tables, views, macros and reference tables are this gpuwatch's, made by
    this DuckDB: a writable open then creates nothing (each open would otherwise rewrite the catalog
    and the reference tables, and the close check-point them)."""
    import duckdb

    return (not _old_staging(con) and _staged_by(con) == staging_fingerprint()
            and _meta(con, "duckdb") == duckdb.__version__ and _meta(con, "reference") == reference_fingerprint())


def reference_fingerprint() -> str:
    """A hash of the reference tables' rows and the MIG macros' constants (gpuwatch.mig,
    gpuwatch.topology): a change to either writes them again on the next writable open."""
    import hashlib

    facts = (_mig_profile_rows(), _mig_captured_rows(), _link_rows(), mig.COMPUTE_SLICES, mig.MEMORY_SLICES,
             mig.CAPABLE_MODEL_PATTERN)
    return hashlib.sha256(repr(facts).encode()).hexdigest()[:16]


def staging_fingerprint() -> str:
    """What the store's tables, views and macros were made from: a hash of the SQL that makes them.
    A read-only reader (app, report, findings exporter) refuses a store staged from other SQL (an
    older or newer gpuwatch) instead of failing on a missing macro or a changed view."""
    import hashlib

    text = "\n".join(script(name) for name in ("schema.sql", "reclaim_audit.sql", "staging.sql", "rollup.sql"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _staged_by(con: Any) -> str | None:
    return _meta(con, "staging")


def _meta(con: Any, key: str) -> str | None:
    if not has_table(con, "store_meta"):
        return None
    found = con.execute("SELECT value FROM store_meta WHERE key = $k", {"k": key}).fetchall()
    return found[0][0] if found else None


# The staged sample relations, derived from the raw tables and rebuilt whole by a re-stage (staged.refresh).
STAGED_SAMPLES = ("stg_samples", "stg_sample_rows", "stg_sample_rows_stored", "stg_stream_aliases", "stg_streams",
                  "stg_stream_dts")


def _drop_staged_samples(con: Any) -> None:
    """Before a re-stage: drop the staged sample relations, table or view, whatever shape another
    gpuwatch gave them (staging.sql's definitions bind against them as they are made)."""
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables WHERE table_name IN "
                             f"({', '.join(repr(n) for n in STAGED_SAMPLES)})").fetchall())
    for name, kind in kinds.items():  # names from STAGED_SAMPLES
        con.execute(f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} {name}")


def _set_aside_legacy_samples(con: Any) -> str | None:
    """Stores written before samples were split into keys and readings (schema.sql) hold ``samples`` as
    a table (renamed legacy_samples here) or, linked, as a view over Parquet (renamed linked_samples)."""
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables "
                             "WHERE table_name IN ('samples', 'sample_readings')").fetchall())
    if "sample_readings" in kinds or "samples" not in kinds:
        return None
    if kinds["samples"] == "VIEW":
        con.execute("ALTER VIEW samples RENAME TO linked_samples")
        return "linked"
    con.execute("ALTER TABLE samples RENAME TO legacy_samples")
    return "table"


def _split_legacy_samples(con: Any, legacy: str | None) -> None:
    """The set-aside samples into sample_keys and sample_readings (the caller re-stages)."""
    if legacy == "linked":
        keys.link(con)
    elif legacy == "table":
        joined = keys.register(con, "SELECT * FROM legacy_samples")
        con.execute(f"INSERT INTO sample_readings {keys.readings('SELECT * FROM legacy_samples', joined=joined)}")
        con.execute("DROP TABLE legacy_samples")


def _old_staging(con: Any) -> bool:
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'stg_samples'").fetchall()[0][0] > 0


def write_mig_reference(con: Any) -> None:
    """MIG geometry as SQL, from gpuwatch.mig (the one place it is declared): ref_mig_profiles, what real
    GPUs reported per profile (ref_mig_captured: instance memory, SMs, name by the GPU's MiB) and the
    macros mig_gpu_share(compute slices), mig_memory_share(memory slices) and mig_capable(model) that
    staging and the analyses use."""
    con.execute("CREATE OR REPLACE TABLE ref_mig_profiles (profile_id INTEGER PRIMARY KEY, label VARCHAR, "
                "compute_slices INTEGER, memory_slices INTEGER, max_count INTEGER)")
    con.executemany("INSERT INTO ref_mig_profiles VALUES (?, ?, ?, ?, ?)", _mig_profile_rows())
    con.execute("CREATE OR REPLACE TABLE ref_mig_captured (gpu_fb_mib BIGINT, profile_id INTEGER, "
                "memory_mib BIGINT, sms INTEGER, gpu_sms INTEGER, name VARCHAR, PRIMARY KEY (gpu_fb_mib, profile_id))")
    con.executemany("INSERT INTO ref_mig_captured VALUES (?, ?, ?, ?, ?, ?)", _mig_captured_rows())
    # the slice counts are the code's own constants, not data: formatting them into the macro is safe
    con.execute(f"CREATE OR REPLACE MACRO mig_gpu_share(slices) AS slices / {float(mig.COMPUTE_SLICES)}")
    con.execute(f"CREATE OR REPLACE MACRO mig_memory_share(slices) AS slices / {float(mig.MEMORY_SLICES)}")
    con.execute("CREATE OR REPLACE MACRO mig_capable(model) AS "
                f"coalesce(regexp_matches(lower(model), '{mig.CAPABLE_MODEL_PATTERN}'), FALSE)")


def _mig_profile_rows() -> list[tuple]:
    return [(p.id, p.label, p.compute_slices, p.size, p.max_count) for p in mig.PROFILES.values()]


def _mig_captured_rows() -> list[tuple]:
    return [(fb, pid, mib, c.sms.get(pid), c.gpu_sms, c.names.get(pid))
            for fb, c in mig.CAPTURED.items() for pid in mig.PROFILES if (mib := c.instance_mib(pid))]


def write_topology_reference(con: Any) -> None:
    """The link classes as SQL, from gpuwatch.topology (the one place they are declared): ref_links
    (link, link_rank 0 = NV best .. 5 = SYS, assumed bytes/s per direction for PCIe classes; an NVLink's
    is its nvlinks x the per-link rate, ``nvlink_bytes_per_second_per_link``)."""
    con.execute("CREATE OR REPLACE TABLE ref_links (link VARCHAR PRIMARY KEY, link_rank INTEGER, "
                "bytes_per_second DOUBLE, nvlink_bytes_per_second_per_link DOUBLE)")
    con.executemany("INSERT INTO ref_links VALUES (?, ?, ?, ?)", _link_rows())


def _link_rows() -> list[tuple]:
    return [(link, topology.rank(link), topology.PCIE_BYTES_PER_SECOND.get(link),
             topology.NVLINK_BYTES_PER_SECOND_PER_LINK if link == "NV" else None) for link in topology.LINKS]


def price_coverage(con: Any):
    """Per GPU model in the fleet: GPUs, the price that applies and its source (price_coverage.sql)."""
    return con.execute(script("price_coverage.sql")).df()


def ensure_reclaim_audit(con) -> None:
    """Create the ``reclaim_audit`` table when missing (the reclaim controller may use any file)."""
    con.execute(script("reclaim_audit.sql"))



def has_table(con: Any, name: str) -> bool:
    """True when a table or view called ``name`` exists."""
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = $n "
                        "UNION ALL SELECT count(*) FROM duckdb_views() WHERE view_name = $n", {"n": name}).fetchall()
    return sum(r[0] for r in found) > 0


def data_range(con: Any, *, now: datetime | None = None) -> tuple[datetime | None, datetime | None]:
    """First timestamp of the data held and its latest one at or before the analysis clock ``now``
    (default: the wall clock, UTC); UTC, naive; (None, None) when empty.

    The end is the latest sample of any device (a fleet that shrinks by half overnight keeps its
    remaining nodes' latest data), never one after ``now``: a clock running ahead cannot move it;
    ``ahead_of_clock`` says what was left out. The analyses' default window ends here:
    analyses.params.window(data_range(con)[1]). Without samples: the pods' last start or end."""
    row = _range_row(con, now)
    return row[0], row[1]


def ahead_of_clock(con: Any, *, now: datetime | None = None) -> tuple[int, int, datetime | None]:
    """(samples, devices, latest timestamp) dated after the analysis clock ``now``: left out of the
    default window, reported by every command that picks one."""
    row = _range_row(con, now)
    return int(row[2]), int(row[3]), row[4]


def _range_row(con: Any, now: datetime | None) -> tuple:
    from datetime import UTC

    clock = (now or datetime.now(UTC)).replace(tzinfo=None)
    return con.execute(script("range.sql"), {"now": clock}).fetchone()


BULK_WINDOW = timedelta(days=1)  # "the devices that reported in the day before" a candidate end (since-last progress)


def bulk_end(devices: list[tuple[datetime, datetime]], *, window: timedelta = BULK_WINDOW) -> datetime:
    """The latest device's last timestamp T at which the devices reporting until T or later are at
    least half of those that reported in the ``window`` before T (started by T, stopped after
    T - window). The earliest last timestamp always qualifies, so there is always an answer."""
    firsts, lasts = sorted(f for f, _ in devices), sorted(last for _, last in devices)
    for end in sorted(set(lasts), reverse=True):
        not_started = len(firsts) - bisect.bisect_right(firsts, end)
        reached = len(lasts) - bisect.bisect_left(lasts, end) - not_started
        active = len(lasts) - bisect.bisect_left(lasts, end - window) - not_started
        if 2 * reached >= active:
            return end
    return lasts[0]  # not reached: the earliest last timestamp qualifies
