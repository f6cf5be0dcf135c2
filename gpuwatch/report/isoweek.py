"""ISO weeks: parse ``2026-W47``, and find the last complete week the data covers."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")


@dataclass(frozen=True)
class Week:
    """ISO week ``year``-W``number``: [Monday 00:00, next Monday 00:00) UTC, naive datetimes."""

    year: int
    number: int

    @property
    def start(self) -> dt.datetime:
        return dt.datetime.fromisocalendar(self.year, self.number, 1)

    @property
    def end(self) -> dt.datetime:
        return self.start + dt.timedelta(days=7)

    @property
    def last_day(self) -> dt.datetime:
        return self.end - dt.timedelta(days=1)

    @property
    def label(self) -> str:
        return f"{self.year}-W{self.number:02d}"

    def previous(self) -> Week:
        return of(self.start - dt.timedelta(days=7))


def of(moment: dt.datetime) -> Week:
    """The ISO week holding ``moment``."""
    year, number, _ = moment.isocalendar()
    return Week(year, number)


def parse(text: str) -> Week:
    """``2026-W47`` -> Week; raises ValueError naming the expected form."""
    match = _WEEK.match(text.strip())
    if not match:
        raise ValueError(f"week {text!r} is not an ISO week like 2026-W47")
    year, number = int(match[1]), int(match[2])
    try:
        dt.datetime.fromisocalendar(year, number, 1)
    except ValueError as err:
        raise ValueError(f"week {text!r} does not exist ({err})") from None
    return Week(year, number)


def last_complete(first_ts: dt.datetime, last_ts: dt.datetime, *, step_seconds: float) -> Week | None:
    """The latest ISO week fully inside the data ([first_ts, last_ts + one step)); None if none is."""
    covered_end = last_ts + dt.timedelta(seconds=step_seconds or 0)
    week = of(covered_end - dt.timedelta(microseconds=1))
    if week.end > covered_end:
        week = week.previous()
    return week if week.start >= first_ts else None
