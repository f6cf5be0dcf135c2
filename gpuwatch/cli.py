"""The `gpuwatch` console script: one argparse entry point, one explicit command registry.

Each command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are imported only when their command runs, so ``gpuwatch --help`` needs no extras.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from gpuwatch import __version__, units

# name -> (module, one-line help). Adding a command is adding a module and a line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "export": ("gpuwatch.exporter.command", "node exporter: serve DCGM-named GPU metrics with pod attribution"),
    "simulate": ("gpuwatch.fleet.command", "write a bundle for a synthetic fleet, with ground truth"),
    "doctor": ("gpuwatch.doctor.command", "which signals a Prometheus (or store) has per GPU node, what each missing one "
                                          "blinds, and the config that enables it"),
    "ingest": ("gpuwatch.ingest.command", "load a bundle, a Prometheus server or a saved /metrics file into DuckDB"),
    "analyze": ("gpuwatch.findings.command", "run every analysis over a window; write CSVs or print a table"),
    "export-derived": ("gpuwatch.findings.exporter", "serve the analyzer's findings as Prometheus metrics for alerting"),
    "report": ("gpuwatch.report.command", "weekly chargeback report (HTML + CSV)"),
    "reclaim": ("gpuwatch.reclaim.command", "auto-reclaim controller for idle GPUs (dry-run by default)"),
    "app": ("gpuwatch.app_command", "start the Streamlit app on a DuckDB file (read-only)"),
    "demo": ("gpuwatch.demo", "simulate -> exporter -> ingest -> analyze -> app, on an embedded fleet"),
    "lake": ("gpuwatch.lake.command", "put data into hive-partitioned Parquet on S3 or a directory, or get it back"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Top-level parser; only the chosen command's module is imported to add its flags."""
    parser = argparse.ArgumentParser(prog="gpuwatch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--log-level", default="INFO", help="logging level (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module).add_arguments(sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except units.UsageError as exc:  # a flag or key the user gave: usage error, one line
        return _fail(args.command, exc, code=2)
    except (units.DataError, OSError) as exc:  # bad data, a missing file, an unreachable server: one line
        return _fail(args.command, exc, code=1)


def _fail(command: str, exc: BaseException, *, code: int) -> int:
    """One line on stderr naming the command and the problem; never a traceback for user mistakes."""
    print(f"gpuwatch {command}: {units.one_line(exc)}", file=sys.stderr)
    return code


def _version() -> str:

    return f"gpuwatch {__version__}"
