"""What every page shares: the database, cached analysis calls, the global filters, tables.

The app presents; it does not compute. Numbers come from ``gpuwatch.analyses`` and
``gpuwatch.recommendations``; this module only opens the store read-only, caches the frames
(keyed on db path + mtime + params) and draws them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
import threading
from dataclasses import dataclass

import pandas as pd
import streamlit as st
from cells import LONG_TEXT, header, missing_as_dash

import gpuwatch.analyses as analyses
import gpuwatch.analyses.chargeback as chargeback_analysis
import gpuwatch.analyses.params as analysis_params
import gpuwatch.analyses.schedulable_capacity as schedulable_capacity
import gpuwatch.idle_bridge as idle_bridge
import gpuwatch.recommendations as recommendations
import gpuwatch.store as store
import gpuwatch.units as units
from gpuwatch.findings import csvfile, findings, observed_hours, too_small  # noqa: F401 (too_small: for the pages)
from gpuwatch.findings import judgement as judgement_rules

DB_ENV = "GPUWATCH_DB"
TEAMS_ENV = "GPUWATCH_APP_TEAMS"  # comma-separated: the same as --team, for tests and containers


@dataclass(frozen=True)
class Context:
    """The global filters every page reads: which DB, which window, which teams."""

    db: str
    mtime: float
    start: dt.datetime
    end: dt.datetime
    teams: tuple[str, ...]
    scope: tuple[str, ...] | None = None  # a team view: only these teams exist for this session


def _args(argv: list[str] | None):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", default=os.environ.get(DB_ENV, ""))
    parser.add_argument("--team", action="append", default=None)
    parser.add_argument("--teams-header", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return args


def db_path(argv: list[str] | None = None) -> str:
    """``--db FILE`` after ``streamlit run ... --``, else $GPUWATCH_DB (AppTest), else ''."""
    return _args(argv).db


def scope(argv: list[str] | None = None, headers=None) -> tuple[str, ...] | None:
    """The teams this session may see; None = the whole fleet.

    ``--team`` (repeatable, or $GPUWATCH_APP_TEAMS) fixes them for the server. ``--teams-header H``
    reads them per request from header H, comma-separated, as a proxy in front of the app sets it
    (oauth2-proxy's ``X-Forwarded-Groups``); a request without the header sees no team at all, and
    so does every request when the header's name is empty (never the whole fleet).
    """
    args = _args(argv)
    if args.teams_header is not None:
        value = (headers or {}).get(args.teams_header) or "" if args.teams_header.strip() else ""
        return tuple(sorted({t.strip() for t in value.split(",") if t.strip()}))
    fixed = args.team or [t for t in os.environ.get(TEAMS_ENV, "").split(",") if t.strip()]
    return tuple(sorted({t.strip() for t in fixed})) if fixed else None


@st.cache_resource(show_spinner=False)
def _open_versions() -> tuple[threading.Lock, dict]:
    return threading.Lock(), {}


def _connection(path: str, mtime: float):
    """One read-only connection per file, to its latest version; queries use their own cursor (thread
    safety). The older version's connection is closed first: DuckDB keeps one database instance per path
    in a process while any connection to it is open, so a new connection would read the replaced file."""
    lock, versions = _open_versions()
    with lock:
        held = versions.get(path)
        if held is None or held[0] != mtime:
            if held is not None:
                held[1].close()
            versions[path] = (mtime, store.connect(path, read_only=True))
        return versions[path][1]


@st.cache_data(show_spinner=False, max_entries=256)
def _analysis(path: str, mtime: float, name: str, params: tuple) -> pd.DataFrame:
    return analyses.run(_connection(path, mtime).cursor(), name, **dict(params))


def thresholds() -> dict:
    """The analyses' default thresholds (docs/architecture.md#finding-semantics), as the analyzer publishes them."""
    return dict(analysis_params.DEFAULTS)


def analysis(ctx: Context, name: str, **params) -> pd.DataFrame:
    """Analysis ``name`` over the context's window (plus its default thresholds and options), cached."""
    merged = {**thresholds(), **analysis_params.OPTIONS, "start": ctx.start, "end": ctx.end, **params}
    return _analysis(ctx.db, ctx.mtime, name, tuple(sorted(merged.items())))


def chargeback(ctx: Context, *, group_by: str = "") -> pd.DataFrame:
    """The chargeback analysis from the findings assembly (handed the cached mig_fragmentation frame
    the MIG and Recommendations pages use too, so the placement search runs once per window);
    ``group_by``: a pod label whose value splits the team rows too (column group_value)."""
    return _findings(ctx, "chargeback", group_by=group_by)


def previous_chargeback(ctx: Context) -> pd.DataFrame | None:
    """The chargeback of the period of the same length just before the window, or None when the data
    does not cover all of it (a partial period would make every change look like a drop)."""
    length = ctx.end - ctx.start
    first = _analysis(ctx.db, ctx.mtime, "data_coverage", ()).at[0, "first_ts"]
    if pd.isna(first) or pd.Timestamp(first) > pd.Timestamp(ctx.start - length):
        return None
    return chargeback(dataclasses.replace(ctx, start=ctx.start - length, end=ctx.start))


CHARGEBACK_PROBLEMS = chargeback_analysis.PROBLEMS  # rows with GPU-hours and no cost


def prices(ctx: Context) -> pd.DataFrame:
    """Which price applies to each GPU model (the cluster's, a dated list price, or unpriced)."""
    return _price_coverage(ctx.db, ctx.mtime)


@st.cache_data(show_spinner=False, max_entries=16)
def _price_coverage(path: str, mtime: float) -> pd.DataFrame:
    return store.price_coverage(_connection(path, mtime).cursor())


def price_caption(ctx: Context) -> str:
    """Which price sources the dollars use, as counts of GPU models (names are on the Chargeback page)."""
    kinds = prices(ctx)["price_source"].map(
        lambda s: "unpriced" if s == "unpriced" else "cluster prices" if s == "cluster price" else "list prices")
    counts = kinds.value_counts()
    parts = [f"{counts[k]} GPU model(s) at {k}" if k != "unpriced" else f"{counts[k]} GPU model(s) UNPRICED"
             for k in ("cluster prices", "list prices", "unpriced") if k in counts]
    return "Prices: " + (", ".join(parts) if parts else "no GPUs") + " (Chargeback lists them)."


def chargeback_csv_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows as chargeback.csv holds them everywhere (no column repeating the fleet total)."""
    return chargeback_analysis.csv_rows(frame)


def chargeback_warnings(frame: pd.DataFrame) -> list[str]:
    """The chargeback's data problems (unpriced, over-allocated) as plain lines, in the analysis' words."""
    return chargeback_analysis.warnings(frame)


def recommendation_frame(ctx: Context) -> pd.DataFrame:
    """The recommendations from the findings assembly over the window's (cached) analysis frames."""
    return _findings(ctx, "recommendations")


def recommendation_totals(frame: pd.DataFrame) -> dict[str, float]:
    """Counted savings, waste at stake and all waste: the same figures the CLI and the report quote."""
    return recommendations.totals(frame)


def observed_hours_text(ctx: Context) -> str:
    """The observed hours of the window the run-rates rest on (findings.observed_hours)."""
    hours = observed_hours(_analysis(ctx.db, ctx.mtime, "data_coverage", ()), ctx.start, ctx.end)
    return "no data" if hours is None else f"{hours:,.1f} observed hours"


def finding(ctx: Context, name: str) -> pd.DataFrame:
    """Finding ``name`` from the findings assembly (handed what it needs), over the window, cached."""
    return _findings(ctx, name)


def node_blocks(ctx: Context, at: dt.datetime) -> list[dict]:
    """Per node at instant ``at``: its GPUs and holders, link matrix and largest free blocks
    (gpuwatch.analyses.schedulable_capacity.node_blocks), cached."""
    return _node_blocks(ctx.db, ctx.mtime, at, float(thresholds()["capacity_bucket_seconds"]))


@st.cache_data(show_spinner=False, max_entries=64)
def _node_blocks(path: str, mtime: float, at: dt.datetime, bucket_seconds: float) -> list[dict]:
    return schedulable_capacity.node_blocks(_connection(path, mtime).cursor(), at,
                                            {"capacity_bucket_seconds": bucket_seconds})


def _findings(ctx: Context, name: str, **extra) -> pd.DataFrame:
    params = {**thresholds(), **analysis_params.OPTIONS, "start": ctx.start, "end": ctx.end, **extra}
    return findings(None, params, only=(name,), run=lambda _con, analysis_name, **p: analysis(ctx, analysis_name, **p))[name]


def open_db(path: str) -> tuple[float, pd.DataFrame] | None:
    """(mtime, coverage) for a usable DB; otherwise draws a clear message and returns None."""
    if not path:
        st.error("No database given. Start the app with `gpuwatch app --db FILE`.")
        return None
    if not os.path.isfile(path):
        st.error(f"No database at `{path}`. Create one with "
                 "`gpuwatch ingest --from sample_data --db FILE`, then start `gpuwatch app --db FILE`.")
        return None
    mtime = os.path.getmtime(path)
    try:
        coverage = _analysis(path, mtime, "data_coverage", ())
    except Exception as exc:  # not a DuckDB file, or not a gpuwatch store: say which
        st.error(f"`{path}` is not a readable gpuwatch database ({type(exc).__name__}: {exc}).")
        return None
    if coverage.empty or pd.isna(coverage.at[0, "first_ts"]):
        st.warning(f"The database `{path}` holds no GPU samples yet. Load some with "
                   "`gpuwatch ingest --from DIR --db FILE` (or `--from prometheus://host:9090`).")
        return None
    return mtime, coverage


PRESETS = ("Last 24 hours", "Last 7 days", "Last 30 days", "Month to date", "All data", "Custom days")


def preset_window(preset: str, first: dt.datetime, last: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of a time-range preset, relative to the data's end (the hour after its last sample),
    not the wall clock: a store of last month's data still shows its own last 7 days. A start before
    the data's first hour is moved up to it (the fleet is not billed for time the store knows nothing of)."""
    end = analysis_params.window(last)[1]
    lengths = {"Last 24 hours": dt.timedelta(hours=24), "Last 7 days": dt.timedelta(days=7),
               "Last 30 days": dt.timedelta(days=30)}
    if preset == "Month to date":
        start = (end - dt.timedelta(microseconds=1)).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    elif preset in lengths:
        start = end - lengths[preset]
    else:  # all data
        start = first
    return max(start, first.replace(minute=0, second=0, microsecond=0)), end


def sidebar(path: str, mtime: float, coverage: pd.DataFrame, allowed: tuple[str, ...] | None = None) -> Context:
    """The global time-range and team filters; their state survives page switches."""
    first = pd.Timestamp(coverage.at[0, "first_ts"]).to_pydatetime()
    last = pd.Timestamp(coverage.at[0, "last_ts"]).to_pydatetime()
    st.sidebar.caption(f"Data: {first:%Y-%m-%d %H:%M} → {last:%Y-%m-%d %H:%M} UTC")
    preset = st.sidebar.selectbox("Time range", PRESETS, index=1, key="gw_preset",
                                  help="Relative to the end of the data (not today): the analyzer's default window is "
                                       "the last 7 days.")
    if preset == "Custom days":
        picked = st.sidebar.date_input("Days (UTC)", value=(first.date(), last.date()),
                                       min_value=first.date(), max_value=last.date(), key="gw_range")
        lo, hi = (picked if isinstance(picked, tuple | list) and len(picked) == 2 else (first.date(), last.date()))
        start = dt.datetime.combine(lo, dt.time())
        end = dt.datetime.combine(hi, dt.time()) + dt.timedelta(days=1)
    else:
        start, end = preset_window(preset, first, last)
    team_names = sorted(_analysis(path, mtime, "teams", ())["team"].dropna().unique())
    if allowed is not None:  # a team view: the other teams are not offered, and "none picked" = all of these
        team_names = [t for t in team_names if t in allowed]
    teams = st.sidebar.multiselect("Teams", team_names, key="gw_teams",
                                   placeholder="All teams" if allowed is None else "All my teams")
    if allowed is not None:
        teams = teams or list(allowed)
        st.sidebar.caption(f"Team view: {len(allowed)} team(s); fleet-wide pages are not shown.")
    return Context(db=path, mtime=mtime, start=start, end=end, teams=tuple(teams), scope=allowed)


def current() -> Context:
    """The context the entry script put in session state for this run."""
    return st.session_state["gw_context"]


def for_teams(ctx: Context, frame: pd.DataFrame, column: str = "team") -> pd.DataFrame:
    """Rows of the selected teams (all rows when none is selected or there is no team column)."""
    if not ctx.teams or column not in frame.columns:
        return frame
    return frame[frame[column].isin(ctx.teams)]


MONEY = ("usd", "cost")
RATIO = ("_share", "_util", "util_", "_active", "_gap", "gap_", "mean_reported", "mean_effective")
GIB = float(units.GIB)


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """Display units at the edge: ``*_bytes`` as GiB, ``*_seconds`` as hours (CSV keeps base units)."""
    out = frame.copy()
    for col in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[col]) or pd.api.types.is_bool_dtype(frame[col]):
            continue
        if "_bytes" in col and "_bytes_per" not in col:  # max_fb_used_bytes_idle -> max_fb_used_gib_idle
            name = col.replace("_bytes", "_gib")
            out = out.rename(columns={col: name}).assign(**{name: frame[col] / GIB})
        elif "_seconds" in col:
            name = col.replace("_seconds", "_h")
            out = out.rename(columns={col: name}).assign(**{name: frame[col] / 3600.0})
    return out


def legend_names(columns: list[str]) -> tuple[str, list[str]]:
    """A Vega expression naming a folded ``datum.column`` by its header (no snake_case in a legend), and
    the names in ``columns``' order (for the legend's sort)."""
    names = [header(c) for c in columns]
    return "{" + ", ".join(f"'{c}': '{n}'" for c, n in zip(columns, names, strict=True)) + "}[datum.column]", names


def usd_axis(**kwargs):
    """A dollar axis whose tick labels never repeat ($0 $0.5 $1 on a small range, $1,000 on a large one)."""
    import altair as alt

    return alt.Axis(format="$,.2~f", **kwargs)


def _column_config(frame: pd.DataFrame, labels: dict[str, str] | None = None) -> dict:
    """Display formats by column-name convention (dollars with thousands separators, ratios as
    percentages, GiB, hours), keyed by the shown header (``labels[col]`` where given)."""
    labels = labels or {}
    config = {}
    for col in frame.columns:
        label = labels.get(col, col)
        if col in LONG_TEXT and not pd.api.types.is_numeric_dtype(frame[col]):
            config[label] = st.column_config.TextColumn(width="large")  # long text: room to read it
        if not pd.api.types.is_numeric_dtype(frame[col]) or pd.api.types.is_bool_dtype(frame[col]):
            continue
        if any(k in col for k in MONEY):
            config[label] = st.column_config.NumberColumn(format="dollar")
        elif "_gib" in col:
            config[label] = st.column_config.NumberColumn(format="%.1f GiB")
        elif col.endswith(("_h", "_hours")) or "_h_" in col:
            config[label] = st.column_config.NumberColumn(format="%.1f")
        elif any(k in col for k in RATIO):
            config[label] = st.column_config.NumberColumn(format="percent")
        elif col in labels:
            config[label] = st.column_config.NumberColumn(format="localized")
    return config


def table(frame: pd.DataFrame, name: str, *, empty: str, columns: dict[str, str] | None = None) -> None:
    """A sortable table with a CSV download (base units), or the ``empty`` explanation when there are no rows.

    ``columns``: the key columns, first and in this order, with their friendly headers (the rest follow,
    each under a header made from its name: ``header``). A missing value reads "—", never "None"."""
    if frame.empty:
        st.info(empty)
        return
    shown = readable(frame)
    labels = {readable(frame[[c]]).columns[0]: label for c, label in (columns or {}).items() if c in frame.columns}
    shown = shown[[*labels, *(c for c in shown.columns if c not in labels)]]
    labels |= {c: header(c) for c in shown.columns if c not in labels}
    config = _column_config(shown, labels)
    display = shown.rename(columns=labels)
    st.dataframe(missing_as_dash(display, config), hide_index=True, width="stretch", column_config=config)
    st.download_button(f"Download {name}.csv", csvfile.to_csv(frame).encode(), file_name=f"{name}.csv",
                       mime="text/csv", key=f"csv_{name}")


def gpu_names(frame: pd.DataFrame) -> dict[str, str]:
    """gpu_uuid -> "node · GPU <index>" (the UUID's head where the index is unknown): what people call a GPU."""
    rows = frame.drop_duplicates("gpu_uuid")
    index = rows["gpu_index"] if "gpu_index" in rows else pd.Series([None] * len(rows), index=rows.index)
    return {u: f"{n} · GPU {int(i)}" if pd.notna(i) else f"{n} · {str(u)[:12]}"
            for u, n, i in zip(rows["gpu_uuid"], rows["node"], index, strict=True)}


def top_and_rest(frame: pd.DataFrame, by: str, values: list[str], *, top: int) -> tuple[pd.DataFrame, dict | None]:
    """``values`` summed per ``by``: the ``top`` largest (by their total), and the rest as {count, total}
    (None when there is no rest), so a chart over 500 teams keeps readable bars and can say what it leaves out."""
    sums = frame.groupby(by, as_index=False)[values].sum()
    sums = sums.assign(_total=sums[values].sum(axis=1)).sort_values(["_total", by], ascending=[False, True])
    head, rest = sums.head(top), sums.iloc[top:]
    summary = {"count": len(rest), "total": float(rest["_total"].sum())} if len(rest) else None
    return head.drop(columns="_total"), summary


def holders(series: pd.DataFrame) -> pd.DataFrame:
    """Each pod that held a GPU in a gpu_timeseries frame: first and last bucket it was seen in, and in how many."""
    rows = series.assign(holder=series["holders"].fillna("").str.split(", ")).explode("holder")
    rows = rows[rows["holder"].fillna("") != ""]
    return (rows.groupby("holder", as_index=False)
            .agg(first=("bucket_start", "min"), last=("bucket_start", "max"), buckets=("bucket_start", "count"))
            .sort_values(["first", "holder"]))


def slice_spans(slices: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """(layout, gpu_uuid, instance) -> "slices 4–7": the memory slices each instance covers in mig_layout."""
    spans = slices.dropna(subset=["instance"]).groupby(["layout", "gpu_uuid", "instance"])["slice"].agg(["min", "max"])
    return {key: f"slice {lo}" if lo == hi else f"slices {lo}–{hi}" for key, (lo, hi) in spans.iterrows()}


_UNPRICED = "gpuwatch_no_gpu_priced"  # session key: this run's store has GPUs and no price applies to any


def bridge(ctx: Context, idle: pd.DataFrame | None = None) -> None:
    """The idle bridge (gpuwatch/idle_bridge.py: the steps the CLI, report and metrics print) over the
    idle_hoarding frame of the selected teams, as a table, and what changing the window does."""
    idle = for_teams(ctx, analysis(ctx, "idle_hoarding")) if idle is None else idle
    steps = idle_bridge.bridge(idle, chargeback=for_teams(ctx, chargeback(ctx)),
                               hours_per_month=float(analysis_params.DEFAULTS["hours_per_month"]))
    rows = pd.DataFrame(steps.rows())
    shown = pd.DataFrame({"Step": rows["label"], "Pods": rows["pods"].map("{:,}".format), "Amount": rows["amount"],
                          "What it counts": rows["meaning"], "When the window changes": rows["window"]})
    st.table(shown.set_index(rows["number"].astype(str).rename("#")))
    st.caption("Steps 1–3 add up idle time inside the window, so a longer window shows more dollars; steps 3–4 "
               "are judged at the window's end; step 5 is each pod's own idle rate, so it does not shrink when the "
               "window is longer than the pod's life. The reclaim controller acts on step 4's pods its policy "
               "allows (Reclaim audit).")


def money(value: float) -> str:
    """USD for a metric tile; "unpriced" where the value is unknown, or no GPU of the store has a
    price (then every dollar is unknown: a sum of nothing priced is not $0.00)."""
    if value is None or value != value or st.session_state.get(_UNPRICED):
        return "unpriced"
    return f"${value:,.2f}"


def no_gpu_priced(ctx: Context) -> bool:
    """Whether the store has GPUs and none of their models has a price."""
    sources = prices(ctx)["price_source"]
    return bool(len(sources)) and bool((sources == "unpriced").all())


def window_caption(ctx: Context) -> None:
    st.session_state[_UNPRICED] = no_gpu_priced(ctx)  # every page calls this before its tiles
    if st.session_state[_UNPRICED]:
        st.warning("No GPU model in this store has a price: every dollar is unknown and shown as 'unpriced' "
                   "(load prices: gpuwatch ingest --prices FILE, or --prices list for dated list prices).")
    # team names are data: never into markdown (they could carry links or HTML); the sidebar shows them
    teams = f"{len(ctx.teams)} team(s) selected in the sidebar" if ctx.teams else "all teams"
    st.caption(f"Window {ctx.start:%Y-%m-%d %H:%M} → {ctx.end:%Y-%m-%d %H:%M} (UTC, end exclusive) · {teams} · "
               + price_caption(ctx))


def judgement(ctx: Context) -> pd.DataFrame:
    """Which findings the window's evidence can judge (gpuwatch.findings.judgement), cached."""
    return _findings(ctx, "judgement")


def judged(ctx: Context, name: str) -> bool:
    """False when finding ``name`` is not judged in this window (its figures are unknown, never 0)."""
    return judgement_rules.judged(judgement(ctx), name)


def not_judged(ctx: Context, name: str) -> bool:
    """Draw finding ``name``'s blind spot, if it has one: "not judged" (with the config that enables the
    missing signal) or "partly judged"; True when not judged (the page then shows no figures)."""
    row = judgement_rules.state_of(judgement(ctx), name)
    if row is None or row["state"] == "judged":
        return False
    if row["state"] == "not judged":
        st.warning(f"**Not judged** in this window: {row['reason']}. Its figures are unknown, not 0. "
                   "The Readiness page lists every signal per node.")
    else:
        st.info(f"**{row['state'].capitalize()}**: {row['reason']}.")
    if row["enable"] and row["state"] != "unverified":
        st.caption("To enable:")
        st.code(row["enable"], language="yaml")
    return row["state"] == "not judged"
