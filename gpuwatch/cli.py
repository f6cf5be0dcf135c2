"""The `gpuwatch` console script: one argparse entry point, one explicit command registry.

Each command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are imported only when their command runs, so ``gpuwatch --help`` needs no extras.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
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
    command = _command(argv)
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the (sub)command that was given them, with its own usage, not the top level's
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if not args.command:
        parser.print_help()
        return 2
    handler = logging.StreamHandler()
    handler.setFormatter(_PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    module = importlib.import_module(COMMANDS[args.command][0])
    db = getattr(args, "db", None)
    existed = not isinstance(db, str) or os.path.exists(db)
    code = 1
    _tolerate_closed_stdout()
    streams = sys.stdout, sys.stderr
    # names from data (pods, models, nodes) reach the terminal with their control characters escaped
    sys.stdout, sys.stderr = _Printable(streams[0]), _Printable(streams[1])
    try:
        code = int(module.run(args) or 0)
    except units.UsageError as exc:  # a flag or key the user gave: usage error, one line
        code = _fail(args.command, exc, code=2)
    except (units.DataError, OSError) as exc:  # bad data, a missing file, an unreachable server: one line
        code = _fail(args.command, exc, code=1)
    except KeyboardInterrupt:  # Ctrl-C: what was committed stays; no traceback
        print(f"gpuwatch {args.command}: interrupted", file=sys.stderr)
        code = 130
    finally:
        sys.stdout, sys.stderr = streams
        if code != 0 and not existed:  # a failed command leaves no empty store it created
            importlib.import_module("gpuwatch.store.files").discard_if_empty(db, existed=False)
    return code


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest parser the arguments chose (``gpuwatch report weekly`` -> weekly's)."""
    while True:
        chosen = [a.choices.get(getattr(args, a.dest, None) or "") for a in parser._actions
                  if isinstance(a, argparse._SubParsersAction)]
        if not chosen or chosen[0] is None:
            return parser
        parser = chosen[0]


def _command(argv: list[str]) -> str | None:
    """The subcommand named in ``argv``: the first known command word (a top-level flag's value, as in
    ``--log-level DEBUG ingest``, is not one), so its own flags are known and its own usage is printed."""
    return next((a for a in argv if a in COMMANDS), None)


class _ClosedStdout:
    """stdout that swallows a reader going away (``gpuwatch ingest ... | head -1``): the command finishes
    its work and exits with its own status instead of failing on a broken pipe after committing."""

    def __init__(self, stream):
        self._stream, self.closed_by_reader = stream, False

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._close()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._close()

    def _close(self) -> None:
        self.closed_by_reader = True
        with contextlib.suppress(OSError, ValueError):  # no flush at exit can fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _tolerate_closed_stdout() -> None:
    if not isinstance(sys.stdout, _ClosedStdout) and sys.stdout is sys.__stdout__ and sys.stdout is not None:
        sys.stdout = _ClosedStdout(sys.stdout)


class _Printable:
    """A text stream writing through to ``stream`` with terminal control characters escaped."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(units.printable(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _PrintableFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return units.printable(super().format(record))


def _fail(command: str, exc: BaseException, *, code: int) -> int:
    """One line on stderr naming the command and the problem; never a traceback for user mistakes."""
    print(f"gpuwatch {command}: {units.one_line(exc)}", file=sys.stderr)
    return code


def _version() -> str:

    return f"gpuwatch {__version__}"
