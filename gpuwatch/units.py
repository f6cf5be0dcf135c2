"""Base units, and the one parser for each text form a flag or policy key can take.

Inside gpuwatch every quantity is in a base unit (bytes, seconds, ratio 0-1, watts, USD); the
constants below are the only conversions. Durations (``90s``, ``15m``, ``1d``), UTC timestamps
and listen addresses are parsed here and nowhere else, so ``1d`` means the same in every flag and
policy key. Every parser raises ``UsageError`` whose message names the flag or key it was given.
"""

from __future__ import annotations

MIB = 1 << 20
GIB = 1 << 30
SECONDS_PER_HOUR = 3600.0
HOURS_PER_MONTH = 730.0  # 365 days x 24 h / 12: the month every monthly figure is scaled to


class UsageError(ValueError):
    """A flag, key or argument a user gave is not valid: the message names it and says why."""


class DataError(RuntimeError):
    """Input data is not valid (a file, column and row, or a series, is named in the message)."""
