"""`gpuwatch app`: start the Streamlit app on a DuckDB file, read-only.

Execs ``python -m streamlit run app/streamlit_app.py -- --db FILE`` with an argument vector (no
shell, so any path is passed as-is), headless and without usage statistics.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from gpuwatch import units

_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)
# app/ sits at the repository root in a checkout; a wheel may carry it as gpuwatch/_app.
_HERE = Path(__file__).resolve().parent
APP_SCRIPT = next((p for p in (_HERE / "_app" / "streamlit_app.py", _HERE.parent / "app" / "streamlit_app.py")
                   if p.is_file()), _HERE.parent / "app" / "streamlit_app.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="DuckDB file written by `gpuwatch ingest` (opened read-only)")
    parser.add_argument("--port", default="8501", help="port to serve on (default: %(default)s)")
    parser.add_argument("--address", default="127.0.0.1",
                        help="address to bind (default: %(default)s; use 0.0.0.0 inside a container)")
    parser.add_argument("--team", action="append", default=[], metavar="TEAM",
                        help="a team view: only this team's rows and pages (repeatable); fleet-wide pages hidden")
    parser.add_argument("--teams-header", default=None, metavar="HEADER",
                        help="a team view per request: the teams are the comma-separated values of this request "
                             "header, set by a proxy in front (oauth2-proxy: X-Forwarded-Groups); needs a loopback "
                             "--address, so only the proxy can set it")


def command(args: argparse.Namespace, *, script: Path = APP_SCRIPT, python: str = sys.executable) -> list[str]:
    """The argument vector that runs the app (pure: tests check it without starting anything)."""
    return [
        python, "-m", "streamlit", "run", str(script),
        "--server.headless", "true",
        "--server.port", str(args.port),
        "--server.address", args.address,
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--global.developmentMode", "false",
        "--client.toolbarMode", "viewer",
        "--", "--db", os.path.abspath(args.db),
        *[f"--team={team}" for team in getattr(args, "team", None) or ()],
        *([f"--teams-header={args.teams_header}"] if getattr(args, "teams_header", None) is not None else []),
    ]


def _check_team_flags(args: argparse.Namespace) -> None:
    """A team header is only trustworthy when nothing but the proxy beside the app can reach it; a
    header flag given empty is an error, never "no team scoping" (the whole fleet)."""
    if args.teams_header is not None and not _HEADER.fullmatch(args.teams_header):
        raise units.UsageError(f"--teams-header: {args.teams_header!r} is not an HTTP header name "
                               "(e.g. X-Forwarded-Groups)")
    if args.team and args.teams_header is not None:
        raise units.UsageError("--team and --teams-header: pick one way to scope the app to teams")
    if any(not t.strip() or "," in t for t in args.team):
        raise units.UsageError(f"--team {next(t for t in args.team if not t.strip() or ',' in t)!r}: "
                               "one team name per flag")
    if args.teams_header is not None and args.address not in ("127.0.0.1", "::1", "localhost"):
        raise units.UsageError(f"--teams-header needs --address 127.0.0.1 (got {args.address!r}): a header is "
                               "only trusted when only the proxy in front of the app can reach it")


def run(args: argparse.Namespace) -> int:
    """Replace this process with the Streamlit server (signals then reach Streamlit directly)."""
    args.port = units.parse_port(args.port, what="--port")
    _check_team_flags(args)
    if not APP_SCRIPT.is_file():
        print(f"gpuwatch app: the app is not installed ({APP_SCRIPT} missing); run from a source checkout",
              file=sys.stderr)
        return 2
    if not os.path.isfile(args.db):
        # the app explains this too; failing early saves starting a server for nothing
        print(f"gpuwatch app: no database at {args.db!r}; create one with "
              "`gpuwatch ingest --from sample_data --db FILE`", file=sys.stderr)
        return 2
    argv = command(args)
    os.execv(argv[0], argv)
    return 0  # not reached
