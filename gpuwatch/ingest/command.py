"""`gpuwatch ingest`: load a bundle directory, a Prometheus server or a saved /metrics file into DuckDB.

Idempotent per window: re-ingesting a window replaces its samples. Prometheus (`prometheus://`)
and .prom files are read by gpuwatch.ingest's readers; a saved `nvidia-smi topo -m` output (alone or
inside a larger capture) with `--node NAME` gives that node's GPU links and NUMA nodes (ingest/topo.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuwatch import store, units
from gpuwatch.ingest import prometheus, promfile, since, topo
from gpuwatch.model import BUNDLE_COLUMNS

TOPO_MAX_BYTES = 64 << 20  # files larger than this are not looked into for a topo -m matrix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source",
                        help="bundle DIR, prometheus://host:port, FILE.prom (a saved /metrics page), or a saved "
                             "'nvidia-smi topo -m' output with --node; may be left out when only --prices are loaded")
    parser.add_argument("--node", metavar="NAME",
                        help="with --from a saved 'nvidia-smi topo -m' output: the node it was captured on (GPU "
                             "UUIDs from an 'nvidia-smi -L' listing in the same file, else from the node's devices "
                             "already in the store)")
    parser.add_argument("--new-node", action="store_true",
                        help="with --node: accept a node the store holds no GPUs of (a typo is refused without it); "
                             "only the capture's links are kept, a capture never creates GPUs (they come from the "
                             "node's own data; load the file again after it for the NUMA nodes)")
    parser.add_argument("--db", required=True, help="DuckDB store to write (created if missing)")
    parser.add_argument("--start", help="Prometheus: window start, ISO-8601 UTC (default: --end minus 7 days)")
    parser.add_argument("--end", help="Prometheus: window end, ISO-8601 UTC (default: now)")
    parser.add_argument("--step", default="60s", help="Prometheus: query_range step (default: %(default)s)")
    parser.add_argument("--at", help=".prom file: the scrape's timestamp, ISO-8601 UTC (default: the file's own)")
    parser.add_argument("--prices", action="append", default=[], metavar="FILE|list",
                        help="the cluster's GPU prices (CSV/Parquet: gpu_model, usd_per_gpu_hour; a '<model>/<MIG "
                             "profile>' row prices that profile), loaded after --from so they win; 'list' = also use "
                             "gpuwatch's shipped, dated list prices for models the cluster has no price for "
                             "(repeatable)")
    parser.add_argument("--teams", action="append", default=[], metavar="FILE",
                        help="namespace -> team (CSV/Parquet: namespace, team; a namespace may be a glob such as "
                             "'nlp-*'), for pods without a team label; loaded after --from (repeatable)")
    parser.add_argument("--team-label", default="team", metavar="KEY",
                        help="Prometheus: the pod label that names the team (kube-state-metrics must export it: "
                             "--metric-labels-allowlist=pods=[KEY]; default: %(default)s)")
    parser.add_argument("--cluster", metavar="NAME",
                        help="the cluster this data comes from, for a store holding several: its nodes and "
                             "namespaces are stored as NAME/<node>, NAME/<namespace> (a lowercase DNS label)")
    parser.add_argument("--link", action="store_true",
                        help="bundle DIR with Parquet samples: query the Parquet files where they are instead of "
                             "copying them (large fleets; the files must stay there)")
    parser.add_argument("--since-last", action="store_true",
                        help="Prometheus: read only what is new: from the store's last complete step, less --tail, "
                             "to --end (default: now); a store without samples gets the default window")
    parser.add_argument("--tail", metavar="DURATION",
                        help="--since-last: how much of the stored data to read again, so late scrapes and "
                             "Prometheus restarts are repaired (default: 10m)")
    parser.add_argument("--catch-up", metavar="DURATION",
                        help="--since-last: a node whose last sample lags the bulk of the data by more is left out "
                             "of the last complete step (default: 1h)")
    parser.add_argument("--follow", action="store_true",
                        help="repeat --since-last every --every until SIGTERM/SIGINT (exit 0); a failed cycle is "
                             "reported and the next one runs")
    parser.add_argument("--every", metavar="DURATION", help="--follow: pause between cycles (default: 5m)")
    parser.add_argument("--deadline", metavar="DURATION",
                        help="Prometheus: give up a read (a --follow cycle) that takes longer, with a one-line error "
                             "and nothing loaded (default: 1h with --follow, else none; each request gives up "
                             "after 2m whatever the server sends)")


def run(args: argparse.Namespace) -> int:
    flags = {"start": units.parse_utc(args.start, what="--start") if args.start else None,
             "end": units.parse_utc(args.end, what="--end") if args.end else None,
             "step": units.parse_duration(args.step, what="--step"),
             "at": units.parse_utc(args.at, what="--at") if args.at else None,
             "team_label": check_label(args.team_label), "cluster": check_cluster(args.cluster),
             "node": check_node(args.node)}
    if args.new_node and args.node is None:
        raise units.UsageError("--new-node: only with --node (a saved 'nvidia-smi topo -m' output)")
    resume = check_since_last(args)
    deadline = check_deadline(args)
    if args.cluster and args.link:
        raise units.UsageError("--cluster: not with --link (linked Parquet is read as it lies)")
    if args.source is None and not (args.prices or args.teams):
        raise units.UsageError("--from: required (or --prices / --teams alone, to load only those)")
    if args.source is not None:
        check_source(args.source)  # flags and sources are checked before the store is created or opened
        check_topo(args.source, node=flags["node"], db=args.db, link=args.link, new_node=args.new_node)
    elif args.node is not None:
        raise units.UsageError("--node: only with --from FILE, a saved 'nvidia-smi topo -m' output")
    check_prices(args.prices)
    check_files(args.teams, flag="--teams", what="a namespace,team CSV/Parquet")
    if resume is not None:
        return since.run(args.db, args.source, end=flags["end"], step=flags["step"], team_label=flags["team_label"],
                         cluster=flags["cluster"], prices=args.prices, teams=args.teams, deadline=deadline, **resume)
    con = store.connect(args.db)
    try:
        if args.link:
            counts = store.link_bundle(con, args.source)
            if args.prices or args.teams:
                store.load(con, {}, source="--prices/--teams", prices=args.prices, teams=args.teams)
        elif args.source is None:
            counts = store.load(con, {}, source="--prices/--teams", prices=args.prices, teams=args.teams)
        else:
            counts = ingest(con, args.source, prices=args.prices, teams=args.teams, new_node=args.new_node,
                            deadline=deadline, **flags)
        print(f"loaded into {args.db}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        print_prices(con)
    finally:
        con.close()
    return 0


def check_since_last(args: argparse.Namespace) -> dict | None:
    """--since-last / --follow and their flags: None when not asked for, else since.run's options
    (tail, catch_up, every); a UsageError names the flag that does not fit."""
    if not (args.since_last or args.follow):
        for flag, value in (("--tail", args.tail), ("--catch-up", args.catch_up), ("--every", args.every)):
            if value is not None:
                raise units.UsageError(f"{flag}: only with --since-last or --follow")
        return None
    mode = "--follow" if args.follow else "--since-last"
    if args.source is None or not _is_url(args.source):
        raise units.UsageError(f"{mode}: only with a Prometheus source (--from prometheus://host:port)")
    for flag, given in (("--start", args.start), ("--link", args.link), ("--end", args.follow and args.end)):
        if given:
            raise units.UsageError(f"{mode}: not with {flag} (the store's last complete step is where it starts"
                                   f"{', now where it ends' if flag == '--end' else ''})")
    if args.every is not None and not args.follow:
        raise units.UsageError("--every: only with --follow")
    return {"tail": units.parse_duration(args.tail or "10m", what="--tail"),
            "catch_up": units.parse_duration(args.catch_up or "1h", what="--catch-up"),
            "every": units.parse_duration(args.every or "5m", what="--every") if args.follow else None}


def check_deadline(args: argparse.Namespace) -> float | None:
    """--deadline: a duration, only with a Prometheus source; None when not given."""
    if args.deadline is None:
        return None
    if args.source is None or not _is_url(args.source):
        raise units.UsageError("--deadline: only with a Prometheus source (--from prometheus://host:port)")
    return units.parse_duration(args.deadline, what="--deadline")


def check_files(files: list[str], *, flag: str, what: str) -> None:
    """Every file exists: a DataError names the flag and the one that does not."""
    for item in files:
        if not Path(item).is_file():
            raise units.DataError(f"{flag} {item}: no such file ({what})")


def check_cluster(name: str | None) -> str | None:
    """A cluster name (units.parse_cluster), or None."""
    return None if name is None else units.parse_cluster(name)


def check_node(name: str | None) -> str | None:
    """The --node: a node name as the store holds it (no spaces; no "/", which --cluster adds)."""
    if name is not None and not re.fullmatch(r"[^\s/]{1,253}", name):
        raise units.UsageError(f"--node: {name!r} is not a node name (e.g. gpu-node-7)")
    return name


def check_topo(source: str, *, node: str | None, db: str, link: bool, new_node: bool = False) -> None:
    """--node goes with a saved ``topo -m`` file and such a file needs it; the file's matrix parses, and
    its GPUs can get UUIDs (a listing in the file, or a store that may hold the node's devices); a
    store that does not exist holds no node (--new-node accepts one)."""
    path = Path(source)
    text = _topo_text(path) if not _is_url(source) else None
    if node is None:
        if text is not None and topo.has_matrix(text):
            raise units.UsageError(f"--node: required with --from {source}, a saved 'nvidia-smi topo -m' output "
                                   "(the node it was captured on)")
        return
    if text is None or link:
        raise units.UsageError("--node: only with --from FILE, a saved 'nvidia-smi topo -m' output (not --link)")
    topo.parse(text, source=source)
    if not new_node and not Path(db).exists():
        raise units.DataError(f"--node {node}: no store {db}, so no such node: a capture never creates GPUs; load the "
                              "node's devices first (or pass --new-node to keep its links alone)")
    if not topo.listing(text, source=source) and not Path(db).exists():
        raise units.DataError(f"--from {source}: no 'nvidia-smi -L' listing in the file and no store {db} holding "
                              f"node {node}'s devices: load the node's devices first (GPU UUIDs by index)")


def _topo_text(path: Path) -> str | None:
    """A file's text, where it could be a topo capture (not Parquet/CSV, not huge); else None."""
    if not path.is_file() or path.suffix.lower() in (".parquet", ".csv") or path.stat().st_size > TOPO_MAX_BYTES:
        return None
    return path.read_text(encoding="utf-8", errors="replace")


def check_label(key: str) -> str:
    """The --team-label: a Kubernetes label key."""
    return units.parse_label_key(key, what="--team-label")


def check_prices(prices: list[str]) -> None:
    """Every --prices is 'list' or an existing file: a DataError names the one that is not."""
    check_files([p for p in prices if p != store.LIST_PRICES], flag="--prices", what="a prices CSV/Parquet, or 'list'")


def print_prices(con: Any) -> None:
    """Which price applies to each GPU model now: the cluster's, a dated list price, or none (loud)."""
    for row in store.price_coverage(con).itertuples(index=False):
        price = "UNPRICED: not in any cost" if row.price_source == "unpriced" else (
            f"${row.usd_per_gpu_hour:,.2f}/GPU-hour, {row.price_source}")
        print(f"  {row.gpu_model}: {row.gpus:,} GPU(s), {price}")


def check_source(source: str) -> None:
    """A ``--from`` that is neither a Prometheus URL nor an existing file or directory: DataError."""
    if not _is_url(source) and not Path(source).exists():
        raise units.DataError(f"--from {source}: no such file or directory (a bundle DIR, FILE.prom or prometheus://)")


def ingest(con: Any, source: str, *, start: datetime | None = None, end: datetime | None = None, step: float = 60.0,
           at: datetime | None = None, now: datetime | None = None, prices: list[str] = (), teams: list[str] = (),
           team_label: str = "team", cluster: str | None = None, node: str | None = None,
           new_node: bool = False, deadline: float | None = None) -> dict[str, int]:
    """Load ``source`` (bundle dir, prometheus:// URL, .prom file, or with ``node`` a saved
    ``nvidia-smi topo -m``); returns rows per table. ``deadline``: the most a Prometheus read may take."""
    if node is not None:
        return ingest_topo(con, Path(source), node=node, prices=prices, teams=teams, cluster=cluster,
                           new_node=new_node)
    if _is_url(source):
        end_at = end or (now or datetime.now(UTC)).replace(tzinfo=None)
        start_at = start or end_at - timedelta(days=7)
        frames = prometheus.fetch(source, start=start_at, end=end_at, step=step, team_label=team_label,
                                  deadline=deadline)
        if not since.has_gpu_data(frames):
            raise units.DataError(f"--from {source}: {since.no_complete_step(source, start_at, end_at)}")
        return store.load(con, frames, source=source, window=(start_at, end_at), prices=prices, teams=teams,
                          cluster=cluster, refuse_readings=True)
    path = Path(source)
    if path.is_file() and path.suffix in (".prom", ".txt", ".metrics"):
        frames = promfile.read_file(path, at=at)
        return store.load(con, frames, source=str(path), prices=prices, teams=teams, cluster=cluster,
                          refuse_readings=True)
    return store.load_bundle(con, path, progress=None, prices=prices, teams=teams, cluster=cluster)


def ingest_topo(con: Any, path: Path, *, node: str, prices: list[str] = (), teams: list[str] = (),
                cluster: str | None = None, new_node: bool = False) -> dict[str, int]:
    """``node``'s GPU links and NUMA nodes from the saved ``topo -m`` at ``path`` (ingest/topo.py);
    every error is raised before anything is loaded. A node the store holds no GPUs of is an error
    naming the nodes it holds, unless ``new_node`` (then only the links are kept: no device is made)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    parsed = topo.parse(text, source=str(path))
    columns = ", ".join(BUNDLE_COLUMNS["devices"])
    stored_as = f"{cluster}/{node}" if cluster else node
    stored = con.execute(f"SELECT {columns} FROM devices WHERE node = $node", {"node": stored_as}).df()
    if not len(stored) and not new_node:
        raise units.DataError(f"--node {node}: no such node in the store ({known_nodes(con, stored_as)}): a capture "
                              "never creates GPUs; load the node's devices first (or pass --new-node to keep its links alone)")
    frames = topo.frames(parsed, node=node, listed=topo.listing(text, source=str(path)), stored=stored,
                         source=str(path))
    if unstored := frames.pop("unstored"):
        print(f"note: {path}: the NUMA nodes of {unstored} GPU(s) were not kept: node {node} has no such GPUs in the "
              "store yet (load its devices, then this file again)", file=sys.stderr)
    return store.load(con, frames, source=str(path), prices=prices, teams=teams, cluster=cluster)


def known_nodes(con: Any, name: str) -> str:
    """The store's nodes for an error message: how many, and the closest to ``name``."""
    import difflib

    nodes = [n for (n,) in con.execute("SELECT DISTINCT node FROM devices ORDER BY node").fetchall()]
    if not nodes:
        return "it holds no GPUs yet"
    close = difflib.get_close_matches(name, nodes, n=3, cutoff=0.5)
    return f"{len(nodes)} node(s) with GPUs" + (f"; closest: {', '.join(close)}" if close else f", e.g. {nodes[0]}")


def _is_url(source: str) -> bool:
    return source.startswith(("prometheus://", "http://", "https://"))
