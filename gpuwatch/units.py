"""Base units, and the one parser for each text form a flag or policy key can take.

Inside gpuwatch every quantity is in a base unit (bytes, seconds, ratio 0-1, watts, USD); the
constants below are the only conversions. Durations (``90s``, ``15m``, ``1d``), UTC timestamps
and listen addresses are parsed here and nowhere else, so ``1d`` means the same in every flag and
policy key. Every parser raises ``UsageError`` whose message names the flag or key it was given.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

MIB = 1 << 20
GIB = 1 << 30
SECONDS_PER_HOUR = 3600.0
HOURS_PER_MONTH = 730.0  # 365 days x 24 h / 12: the month every monthly figure is scaled to


class UsageError(ValueError):
    """A flag, key or argument a user gave is not valid: the message names it and says why."""


class DataError(RuntimeError):
    """Input data is not valid (a file, column and row, or a series, is named in the message)."""


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|[smhdw]?)$")
EARLIEST_YEAR, LATEST_YEAR = 2000, 2100  # a time given on a flag outside these years is a typo


_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# a cluster name (ingest --cluster, the lake's cluster= partitions): a lowercase DNS label
CLUSTER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def parse_label_key(text: str, *, what: str, example: str = "team or example.com/team") -> str:
    """A Kubernetes label key (optional DNS prefix, then alphanumerics, '-', '_', '.'), else UsageError."""
    if not _LABEL_KEY.fullmatch(text or ""):
        raise UsageError(f"{what}: {text!r} is not a Kubernetes label key (e.g. {example})")
    return text


def one_line(exc: BaseException) -> str:
    """An error as the one line the CLI prints (whitespace folded, control characters escaped: the
    type's name when it says nothing)."""
    return printable(" ".join(str(exc).split())) or type(exc).__name__


# Characters that move a terminal's cursor, recolour it or reorder text (C0 but newline and tab, DEL,
# C1 including CSI, Unicode's bidirectional overrides and isolates): escaped wherever names from data
# reach a terminal, so a pod called "\x1b[2J..." shows as that text instead of clearing the screen.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if chr(c) not in "\n\t"} | {
    c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def printable(text: str) -> str:
    """``text`` with every terminal control character written as its escape (``\\x1b``), newlines and tabs kept."""
    return text.translate(_CONTROLS)


def parse_cluster(text: str, *, what: str = "--cluster") -> str:
    """A cluster name: a lowercase DNS label (it names a lake partition and qualifies node and namespace
    names), else UsageError."""
    if not CLUSTER_NAME.fullmatch(text or ""):
        raise UsageError(f"{what}: {text!r} is not a cluster name (a lowercase DNS label, e.g. prod-eu-1)")
    return text


def parse_duration(text: str, *, what: str) -> float:
    """``500ms``, ``90s``, ``15m``, ``1.5h``, ``1d``, ``1w`` or a plain number of seconds -> seconds (> 0)."""
    match = _DURATION.match(str(text).strip())
    seconds = float(match[1]) * _DURATION_UNITS[match[2] or "s"] if match else math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{what}: {text!r} is not a duration (use 500ms, 90s, 15m, 1h, 1d or 1w)")
    return seconds


def parse_utc(text: str, *, what: str) -> datetime:
    """ISO-8601 (``2026-11-09T12:00:00Z``, an offset, or a date) -> naive UTC datetime."""
    try:
        stamp = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not an ISO-8601 time (e.g. 2026-11-09T12:00:00Z)") from None
    stamp = stamp.astimezone(UTC).replace(tzinfo=None) if stamp.tzinfo else stamp
    if not EARLIEST_YEAR <= stamp.year <= LATEST_YEAR:
        raise UsageError(f"{what}: {text!r} is outside {EARLIEST_YEAR}..{LATEST_YEAR}")
    return stamp


def epoch_seconds(value: float | datetime) -> float:
    """Epoch seconds of a datetime (naive = UTC, as everywhere in gpuwatch) or of a number already in them."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return float(value)


def parse_port(text: str | int, *, what: str) -> int:
    """A TCP port to serve on: ``8501`` -> 8501 (1-65535)."""
    port = str(text).strip()
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"{what}: {text!r} is not a port (1-65535)")
    return int(port)


def parse_listen(text: str, *, what: str) -> tuple[str, int]:
    """``:9400``, ``0.0.0.0:9400``, ``127.0.0.1:0`` or ``[::1]:9400`` -> (host, port); '' = all."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"{what}: {text!r}: expected [HOST]:PORT with a port 0-65535 (e.g. :9400)")
    if host.startswith("[") != host.endswith("]"):
        raise UsageError(f"{what}: {text!r} has an unbalanced [ ] around an IPv6 address")
    if ":" in host and not host.startswith("["):  # '::1:9400' could be ::1 port 9400 or ::1:9400 with none
        raise UsageError(f"{what}: {text!r}: put an IPv6 address in [ ] (e.g. [::1]:9400)")
    return host.strip("[]"), int(port)
