"""Analyses: one ``<name>.sql`` file per question, over the ``stg_*`` views.

Each file opens with a header comment that is its contract::

    -- <Title>: one line saying what question it answers.
    -- params: $start, $end (timestamps), $idle_below (ratio)
    -- columns: namespace, pod, team, ...

Parameters are bound by DuckDB (``$name``), never formatted into SQL. Where SQL is the wrong tool
(placement search), a sibling module ``<name>.py`` exposing ``finish(con, frame, params) -> frame``
post-processes the SQL result; ``run`` calls it when present.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpuwatch.analyses import persisted
from gpuwatch.store import rollup

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Header:
    name: str
    title: str
    params: tuple[str, ...]
    columns: tuple[str, ...]


def names() -> list[str]:
    """Every analysis, by file name, sorted."""
    return sorted(p.name[:-4] for p in resources.files(__package__).iterdir() if p.name.endswith(".sql"))


def sql(name: str) -> str:
    if name not in names():
        raise KeyError(f"unknown analysis {name!r}; known: {', '.join(names())}")
    return resources.files(__package__).joinpath(f"{name}.sql").read_text()


def header(name: str) -> Header:
    """Parse the header comment of ``<name>.sql``."""
    lines = [ln[2:].strip() for ln in sql(name).splitlines() if ln.startswith("--")]
    fields = {k: "" for k in ("params", "columns")}
    for line in lines:
        key, _, rest = line.partition(":")
        if key.strip() in fields:
            fields[key.strip()] = rest
    params = tuple(dict.fromkeys(_PARAM.findall(fields["params"])))
    columns = tuple(c.strip() for c in fields["columns"].split(",") if c.strip())
    return Header(name=name, title=lines[0] if lines else name, params=params, columns=columns)


def body_params(name: str) -> set[str]:
    """The ``$params`` the SQL body (comments excluded) actually uses."""
    body = "\n".join(ln for ln in sql(name).splitlines() if not ln.lstrip().startswith("--"))
    return set(_PARAM.findall(body))


def run(con: Any, name: str, **params: Any):
    """Run analysis ``name`` with bound ``params``; returns a pandas DataFrame.

    When ``persist`` stored this exact SQL part (same SQL, params and data) it is read instead of
    recomputed; the finisher runs either way.
    """

    frame = sql_frame(con, name, **params)
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError:
        return frame
    return module.finish(con, frame, params)


def sql_frame(con: Any, name: str, **params: Any):
    """The SQL part of analysis ``name`` over ``params`` (the stored copy when ``persist`` stored this
    exact one), before any finisher."""
    text, used = sql(name), body_params(name)
    bound = {k: v for k, v in params.items() if k in used}
    frame = persisted.load(con, name, text, bound)
    return con.execute(text, bound).df() if frame is None else frame


# What ``persist`` stores by default: the scans the app's pages and the weekly report start from,
# with the extra params they pass (the app's hourly and the report's daily fleet buckets).
PERSISTED: dict[str, tuple[dict[str, Any], ...]] = {
    "data_coverage": ({},), "chargeback": ({},), "idle_hoarding": ({},), "false_utilization": ({},),
    "utilization": ({},), "rightsizing": ({},), "mig_fragmentation": ({},), "mig_layout": ({},),
    "fleet_timeseries": ({"bucket_seconds": 3600}, {"bucket_seconds": 86400}),
    # the free GPUs per node and bucket: schedulable_capacity's finisher and blocked_demand's both read it
    "schedulable_capacity": ({},),
}


# The thresholds the hourly rollup's idle and false-util counts are kept for (store/rollup.sql):
# the analyze step's, so the persisted analyses below read stored hours.
ROLLUP_THRESHOLDS = ("idle_below", "false_reported_min", "false_effective_below")


def persist(con: Any, params: dict[str, Any], *, runs: dict[str, tuple[dict[str, Any], ...]] | None = None) -> int:
    """Store the SQL part of ``runs`` (default ``PERSISTED``) over ``params`` in the DB for ``run`` to reuse.

    Needs a writable connection; returns how many results are stored for ``params``: saved now, or
    already current (a result of this very data and SQL is not computed again). The analyze step calls it
    after loading data, for its window: a later load (store.load, logged in ingest_log) makes the
    stored results stale and ``run`` recomputes. First the hourly rollup is brought up to date for these
    thresholds (only the hours loads replaced are recomputed). Results of older data are dropped here. All in ONE
    transaction: a run killed half-way leaves the stored results as they were (tests/test_durability.py).
    """
    con.execute("BEGIN TRANSACTION")
    try:
        rollup.update(con, **{k: params[k] for k in ROLLUP_THRESHOLDS})
        persisted.prune(con)
        stored = 0
        for name, variants in (PERSISTED if runs is None else runs).items():
            text, used = sql(name), body_params(name)
            for extra in variants:
                merged = {**params, **extra}
                bound = {k: v for k, v in merged.items() if k in used}
                if not persisted.current(con, name, text, bound):  # no new data since: nothing to redo
                    persisted.save(con, name, text, bound)
                stored += 1
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return stored


def markdown_table() -> str:
    """The README's Analyses table, generated from the ``.sql`` headers."""
    rows = ["| analysis | question | params | columns |", "|---|---|---|---|"]
    for name in names():
        h = header(name)
        params = ", ".join(f"`${p}`" for p in h.params) or "—"
        rows.append(f"| `{name}` | {h.title} | {params} | {', '.join(h.columns)} |")
    return "\n".join(rows) + "\n"
