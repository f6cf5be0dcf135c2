"""Bundle files typed and checked by DuckDB, vectorised: one SQL expression per column and rule.

The rules are validate.py's; this is the one checker, for bundle files and in-memory frames alike
(store/load.py registers a frame in DuckDB and checks it as it checks a file's part). Given a relation's column types, ``plan`` returns the typed SELECT list and the rules; ``guard``
turns the rules into one WHERE clause that raises on the first bad row, so the happy path is a
single INSERT ... SELECT; only when it raises does ``first_bad`` find the exact file, column and
(1-based data) row. Identifiers come from the fixed bundle schema, never from data, so building
these expressions is safe; values are never formatted into SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuwatch.model import BUNDLE_COLUMNS, HEALTH_KINDS, POD_PHASES, SCHEDULER_UNITS, SCHEDULERS
from gpuwatch.store.validate import (
    BOUND_MESSAGE,
    EARLIEST_EPOCH,
    FLOAT32_MESSAGE,
    FLOATS,
    FUTURE_SLACK_SECONDS,
    INTEGERS,
    MIG_SM_ACTIVE_LIMIT,
    NON_NEGATIVE,
    RATIO_LIMITS,
    RATIO_MESSAGE,
    REQUIRED,
    TIMESTAMPS,
    TS_MESSAGE,
    UPPER_BOUNDS,
    BundleError,
    check_column_names,
)
from gpuwatch.topology import LINKS

# Text columns holding one of a fixed set of values (case-insensitive); the sets are the model's.
ENUMS = (("health", "kind", HEALTH_KINDS), ("pod_status", "phase", POD_PHASES), ("topology", "link", LINKS),
         ("scheduler_pending", "scheduler", SCHEDULERS), ("scheduler_pending", "unit", SCHEDULER_UNITS))
ROW, FILE = "__row", "__file"  # technical columns every checked relation carries
_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
            "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE")
_TARGET = {"devices": {"fb_total_bytes": "BIGINT"}}
_INVALID = "gpuwatch: invalid bundle row"
_LATEST = f"(epoch(current_timestamp) + {FUTURE_SLACK_SECONDS})"  # one day after now


@dataclass(frozen=True)
class Rule:
    """A bad-value predicate on one column, the raw value to quote, and the message."""

    column: str
    bad: str
    raw: str
    message: str  # formatted with {raw!r}
    reading: bool = False  # a reading out of range (a ratio above its limit), not a broken file
    refused: bool = False  # plan(refuse_readings=True): the reading is stored as NULL and counted, no error


def plan(name: str, types: dict[str, str], *, file: str, refuse_readings: bool = False) -> tuple[list[str], list[Rule]]:
    """Typed select expressions (aliased as the bundle columns) and the rules for one relation.

    ``refuse_readings`` (a live source's frames): a reading rule does not refuse the relation; the
    value it calls bad is selected as NULL, and the rule comes back ``refused`` for ``count_refused``."""
    columns = [c for c in types if c not in (ROW, FILE)]
    check_column_names(name, columns, file=file)
    values, rules = {}, []
    for column in BUNDLE_COLUMNS[name]:
        values[column], more = _column(name, column, types.get(column), file=file)
        rules += more
    rules += [Rule(c, f"({values[c]}) IS NULL", "NULL", "required value is empty") for c in REQUIRED[name]]
    if name == "samples" and "sm_active" in types:
        # DCGM reports SM_ACTIVE somewhat above 1 on MIG instances: allowed there (staging clamps
        # and counts it), held to the ratio limit on whole GPUs
        limit = f"(CASE WHEN ({values['mig_gi_id']}) IS NULL THEN {RATIO_LIMITS['sm_active']} ELSE {MIG_SM_ACTIVE_LIMIT} END)"
        rules.append(_ratio_rule("sm_active", values["sm_active"], limit))
    if name == "prices" and "node_label" in types:
        text = values["node_label"]
        rules.append(Rule("node_label", f"nullif(trim({text}), '') IS NOT NULL AND NOT regexp_full_match(trim({text}), "
                                        "'[A-Za-z0-9][-A-Za-z0-9_./]*=[-A-Za-z0-9_.]*')",
                          text, "{raw} is not a node label selector key=value (e.g. karpenter.sh/capacity-type=spot)"))
    if name in ("pods", "nodes") and "labels" in types:
        text = values["labels"]
        rules.append(Rule("labels", f"nullif(trim({text}), '') IS NOT NULL AND CASE WHEN json_valid({text}) "
                                    f"THEN json_type(CAST({text} AS JSON)) <> 'OBJECT' ELSE TRUE END",
                          text, "{raw} is not a JSON object of labels (e.g. {{\"cost_center\": \"cc-7\"}})"))
    if name == "pod_status" and "node_selector" in types:
        text = values["node_selector"]
        rules.append(Rule("node_selector", f"nullif(trim({text}), '') IS NOT NULL AND CASE WHEN json_valid({text}) "
                                           f"THEN json_type(CAST({text} AS JSON)) <> 'OBJECT' ELSE TRUE END",
                          text, "{raw} is not a JSON object of node selector labels (e.g. {{\"nvidia.com/gpu.product\": \"H100\"}})"))
    if name == "topology":
        rules += _topology_rules(values, types)
    for table, column, allowed in ENUMS:
        if name == table and column in types:
            text, listed = values[column], ", ".join(f"'{v.lower()}'" for v in allowed)
            rules.append(Rule(column, f"nullif(trim({text}), '') IS NOT NULL AND lower(trim({text})) NOT IN ({listed})",
                              text, "{raw} is not one of " + ", ".join(allowed)))
    if name == "pods" and "start_ts" in types and "end_ts" in types:
        rules.append(Rule("end_ts", f"({values['end_ts']}) < ({values['start_ts']})", "NULL", "ends before start_ts"))
    if refuse_readings:
        rules = [replace(r, refused=True) if r.reading else r for r in rules]
        for r in rules:
            if r.refused:
                values[r.column] = f"CASE WHEN coalesce({r.bad}, FALSE) THEN NULL ELSE {values[r.column]} END"
    return [f"{v} AS {_quote(c)}" for c, v in values.items()], rules


def _topology_rules(values: dict[str, str], types: dict[str, str]) -> list[Rule]:
    """A link joins two different GPUs; ``nvlinks`` counts NVLinks, so it is at least 1 on an NV link
    (or empty: width unknown) and empty (or 0) on a PCIe path."""
    rules = [Rule("peer_gpu_uuid", f"trim({values['gpu_uuid']}) = trim({values['peer_gpu_uuid']})",
                  values["peer_gpu_uuid"], "{raw} is the GPU itself: a link joins two different GPUs")]
    if "nvlinks" in types and "link" in types:
        link, count = f"upper(trim({values['link']}))", values["nvlinks"]
        rules.append(Rule("nvlinks", f"({link} = 'NV' AND {count} = 0) OR ({link} <> 'NV' AND {count} <> 0)",
                          count, "{raw} does not fit its link: NVLinks are counted on an NV link only (at least 1, "
                                 "or empty when unknown)"))
    return rules


def plan_ts(source: str) -> str:
    """The typed expression for a samples ``ts`` column of DuckDB type ``source`` (for its range)."""
    return _timestamp("ts", _quote("ts"), source)[0]


def guard(rules: list[Rule]) -> str:
    """One WHERE clause: TRUE, or an error at the first row any rule calls bad (refused readings aside)."""
    rules = [r for r in rules if not r.refused]
    if not rules:
        return "TRUE"
    return f"CASE WHEN {' OR '.join(f'coalesce({r.bad}, FALSE)' for r in rules)} THEN error('{_INVALID}') ELSE TRUE END"


def first_bad(con, relation: str, rules: list[Rule], *, params: dict | None = None) -> BundleError | None:
    """The error for the earliest bad row (ties: rule order) in ``relation``, or None when all pass."""
    rules = [r for r in rules if not r.refused]
    if not rules:
        return None
    key = f"{{'f': {FILE}, 'r': {ROW}}}"
    parts = [f"min({key}) FILTER (WHERE {r.bad}), arg_min(CAST({r.raw} AS VARCHAR), {key}) FILTER (WHERE {r.bad})"
             for r in rules]
    found = con.execute(f"SELECT {', '.join(parts)} FROM {relation}", params or {}).fetchall()[0]
    hits = [(found[2 * i], i, found[2 * i + 1]) for i in range(len(rules)) if found[2 * i] is not None]
    if not hits:
        return None
    where, i, raw = min(hits, key=lambda h: ((h[0]["f"], h[0]["r"]), h[1]))
    rule = rules[i]
    return BundleError(f"{where['f']}: column {rule.column!r}, row {where['r']}: {rule.message.format(raw=_literal(raw))}")


def count_refused(con, relation: str, rules: list[Rule], *, values: dict[str, str]) -> list[tuple]:
    """Per refused rule with hits in ``relation``: (column, readings, largest value, the first such
    row's ts, node, gpu_uuid); ``values`` are the typed expressions of ts, node and gpu_uuid."""
    refused = [r for r in rules if r.refused]
    if not refused:
        return []
    first = f"{{'ts': {values['ts']}, 'node': {values['node']}, 'gpu_uuid': {values['gpu_uuid']}}}"
    parts = [f"count(*) FILTER (WHERE {r.bad}), max({r.raw}) FILTER (WHERE {r.bad}), "
             f"arg_min({first}, {ROW}) FILTER (WHERE {r.bad})" for r in refused]
    found = con.execute(f"SELECT {', '.join(parts)} FROM {relation}").fetchall()[0]
    out = []
    for i, rule in enumerate(refused):
        count, largest, where = found[3 * i:3 * i + 3]
        if count:
            out.append((rule.column, count, largest, where["ts"], where["node"], where["gpu_uuid"]))
    return out


def is_invalid_row(exc: BaseException) -> bool:
    """True for the error ``guard`` raises (and NOT NULL violations, which mean the same)."""
    text = str(exc)
    return _INVALID in text or "NOT NULL constraint" in text


def _column(name: str, column: str, source: str | None, *, file: str) -> tuple[str, list[Rule]]:
    x = _quote(column)
    if column in TIMESTAMPS.get(name, ()):
        if source == "FLOAT":
            raise BundleError(f"{file}: column {column!r} {FLOAT32_MESSAGE}")
        return ("CAST(NULL AS TIMESTAMP)", []) if source is None else _timestamp(column, x, source)
    numeric = column in INTEGERS.get(name, ()) or column in FLOATS.get(name, ())
    if not numeric:
        return ("CAST(NULL AS VARCHAR)" if source is None else x if source == "VARCHAR" else f"CAST({x} AS VARCHAR)"), []
    integer = column in INTEGERS.get(name, ())
    target = _TARGET.get(name, {}).get(column, "INTEGER" if integer else "DOUBLE")
    if source is None:
        return f"CAST(NULL AS {target})", []
    if source == "BOOLEAN":
        raise BundleError(f"{file}: column {column!r} holds booleans, expected numbers")
    rules = []
    if source in _NUMERIC:
        n = f"CAST({x} AS DOUBLE)"
    else:
        text = f"nullif(trim(CAST({x} AS VARCHAR)), '')"
        n = f"TRY_CAST({text} AS DOUBLE)"
        rules.append(Rule(column, f"{text} IS NOT NULL AND {n} IS NULL", x, "{raw} is not a number"))
    if column in NON_NEGATIVE.get(name, ()):
        rules.append(Rule(column, f"{n} < 0", n,
                          "negative value {raw} (a count, size or price cannot be negative)"))
    if (name, column) in UPPER_BOUNDS:
        bound = UPPER_BOUNDS[(name, column)]
        rules.append(Rule(column, f"NOT isfinite({n}) OR {n} > {bound}", n, BOUND_MESSAGE.replace("{bound:g}", f"{bound:g}")))
    if name == "samples" and column in RATIO_LIMITS and column != "sm_active":  # sm_active: in plan()
        rules.append(_ratio_rule(column, n, RATIO_LIMITS[column]))
    if not integer:
        return n, rules
    if source not in _NUMERIC[:10]:  # an integer type holds whole numbers only
        rules.append(Rule(column, f"(isinf({n}) OR {n} <> round({n})) AND NOT isnan({n})", n, "{raw} is not a whole number"))
    limit = 9.2e18 if target == "BIGINT" else 2147483647.0  # what the column's integer type holds
    rules.append(Rule(column, f"abs({n}) > {limit} AND NOT isnan({n})", n, "{raw} is out of range for this column"))
    # TRY_CAST: a value out of the type's range is NULL here and named by the rule above, never a
    # conversion error while the first bad row is looked for
    if source in _NUMERIC[:10]:  # integer columns need no rounding
        return f"TRY_CAST({x} AS {target})", rules
    return f"CASE WHEN NOT isnan({n}) THEN TRY_CAST(round({n}) AS {target}) END", rules


def _ratio_rule(column: str, n: str, limit: float | str) -> Rule:
    # NaN is an unknown reading (staging makes it NULL), not a ratio above 1; DuckDB sorts NaN
    # above every number, so it is excluded by name (after the comparison: only rows above the limit
    # are tested for NaN, as every rule here is evaluated on every row of a load)
    return Rule(column, f"{n} > {limit} AND NOT isnan({n})", n, RATIO_MESSAGE, reading=True)


def _timestamp(column: str, x: str, source: str) -> tuple[str, list[Rule]]:
    """UTC TIMESTAMP from timestamps (naive = UTC), epoch seconds, or ISO-8601 text; every form is
    held to 2000-01-01 .. now + 1 day."""
    value, rules = _timestamp_value(column, x, source)
    # an infinite timestamp (Parquet and DuckDB hold them) has no epoch: outside too
    outside = f"(NOT isfinite({value}) OR epoch({value}) < {EARLIEST_EPOCH} OR epoch({value}) > {_LATEST})"
    if _is_tz(source):  # the instant as it is, not converted three times (25M Parquet rows: 0.1 s less)
        held = f"CAST({x} AS TIMESTAMPTZ)"
        outside = f"(NOT isfinite({held}) OR {held} < to_timestamp({EARLIEST_EPOCH}) OR {held} > to_timestamp({_LATEST}))"
    return value, [*rules, Rule(column, outside, x, TS_MESSAGE)]


def _is_tz(source: str) -> bool:
    return source.startswith("TIMESTAMP WITH TIME ZONE") or source.startswith("TIMESTAMPTZ")


def _utc(tstz: str) -> str:
    """A TIMESTAMPTZ as a naive UTC TIMESTAMP from its epoch microseconds: the same value as a cast in
    the session's UTC time zone, without a time-zone library call per row (25M rows: 0.8 s -> 0.07 s);
    an infinite one is cast (epoch_us has no value for it)."""
    return f"CASE WHEN isfinite({tstz}) THEN make_timestamp(epoch_us({tstz})) ELSE CAST({tstz} AS TIMESTAMP) END"


def _timestamp_value(column: str, x: str, source: str) -> tuple[str, list[Rule]]:
    if _is_tz(source):
        return _utc(f"CAST({x} AS TIMESTAMPTZ)"), []
    if source.startswith("TIMESTAMP") or source == "DATE":
        return f"CAST({x} AS TIMESTAMP)", []
    in_range = f"BETWEEN {EARLIEST_EPOCH} AND {_LATEST}"
    if source in _NUMERIC:
        n = f"CAST({x} AS DOUBLE)"
        rules = [Rule(column, f"NOT isnan({n}) AND NOT ({n} {in_range})", x, TS_MESSAGE)]
        return f"CASE WHEN {n} {in_range} THEN {_utc(f'to_timestamp({n})')} END", rules
    text = f"nullif(trim(CAST({x} AS VARCHAR)), '')"
    n, iso = f"TRY_CAST({text} AS DOUBLE)", f"TRY_CAST({text} AS TIMESTAMPTZ)"
    rules = [Rule(column, f"NOT isnan({n}) AND NOT ({n} {in_range})", x, TS_MESSAGE),
             Rule(column, f"{text} IS NOT NULL AND {n} IS NULL AND NOT coalesce(isfinite({iso}), FALSE)", x,
                  "bad timestamp {raw} (ISO-8601 or epoch seconds)")]
    value = (f"CASE WHEN {n} IS NULL THEN {_utc(iso)} "
             f"WHEN {n} {in_range} THEN {_utc(f'to_timestamp({n})')} END")
    return value, rules


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _literal(raw: str | None) -> str:
    """A raw value as validate.py quoted it: numbers bare, text in quotes."""
    try:
        return repr(float(raw)) if raw is not None and raw.strip().lower() not in ("nan", "inf", "-inf") and \
            _is_number(raw) else repr(raw)
    except ValueError:
        return repr(raw)


def _is_number(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True
