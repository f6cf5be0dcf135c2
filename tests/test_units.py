"""gpuwatch.units: the one parser for each text form (durations, UTC times, listen addresses, ports).
Every refusal is a UsageError whose message starts with the flag or key it was given."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuwatch import units


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("90s", 90.0), ("90", 90.0), ("1.5", 1.5), ("15m", 900.0), ("1h", 3600.0), ("1.5h", 5400.0),
    ("1d", 86400.0), ("1w", 604800.0), (" 2m ", 120.0),
])
def test_durations(text, seconds):
    assert units.parse_duration(text, what="--window") == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", "-1", "-5m", "nan", "inf", "1x", "1 h", "h", "1e3", "1.h", "1hh"])
def test_bad_durations_name_the_flag(text):
    with pytest.raises(units.UsageError, match=r"^--window: .* is not a duration \(use 500ms, 90s, 15m, 1h, 1d or 1w\)"):
        units.parse_duration(text, what="--window")


def test_duration_error_wording():
    with pytest.raises(units.UsageError) as info:
        units.parse_duration("1x", what="--window")
    assert str(info.value) == "--window: '1x' is not a duration (use 500ms, 90s, 15m, 1h, 1d or 1w)"


@pytest.mark.parametrize(("text", "stamp"), [
    ("2026-11-09T12:00:00Z", datetime(2026, 11, 9, 12)),
    ("2026-11-09T12:00:00z", datetime(2026, 11, 9, 12)),
    ("2026-11-09T14:30:00+02:00", datetime(2026, 11, 9, 12, 30)),
    ("2026-11-09T07:00:00-05:00", datetime(2026, 11, 9, 12)),
    ("2026-11-09", datetime(2026, 11, 9)),
    ("2026-11-09 12:00:00", datetime(2026, 11, 9, 12)),  # naive = UTC
    ("2000-01-01", datetime(2000, 1, 1)),
])
def test_utc_times_are_naive_utc(text, stamp):
    parsed = units.parse_utc(text, what="--end")
    assert parsed == stamp and parsed.tzinfo is None


@pytest.mark.parametrize(("text", "says"), [
    ("garbage", "is not an ISO-8601 time"), ("", "is not an ISO-8601 time"), ("2026-13-01", "is not an ISO-8601"),
    ("1762689600", "is not an ISO-8601 time"), ("9999-12-31", "is outside 2000..2100"),
    ("1999-12-31T23:59:59Z", "is outside 2000..2100"), ("2101-01-01", "is outside 2000..2100"),
])
def test_bad_utc_times_name_the_flag(text, says):
    with pytest.raises(units.UsageError, match=f"^--end: {text!r} {says}"):
        units.parse_utc(text, what="--end")


@pytest.mark.parametrize(("text", "addr"), [
    (":9400", ("", 9400)), ("0.0.0.0:9400", ("0.0.0.0", 9400)), ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::1]:9400", ("::1", 9400)), ("[::]:65535", ("::", 65535)), ("localhost:80", ("localhost", 80)),
])
def test_listen_addresses(text, addr):
    assert units.parse_listen(text, what="--listen") == addr


@pytest.mark.parametrize("text", [":99999", ":65536", "9400", "host:", ":-1", ":http", "[::1:9400", "::1]:9400", "::1:9400", ""])
def test_bad_listen_addresses_name_the_flag(text):
    with pytest.raises(units.UsageError, match=r"^--listen: "):
        units.parse_listen(text, what="--listen")


@pytest.mark.parametrize(("text", "port"), [("8501", 8501), (1, 1), ("65535", 65535)])
def test_ports(text, port):
    assert units.parse_port(text, what="--port") == port


@pytest.mark.parametrize("text", ["0", "65536", "99999", "-1", "http", ""])
def test_bad_ports_name_the_flag(text):
    with pytest.raises(units.UsageError, match=r"^--port: .* is not a port"):
        units.parse_port(text, what="--port")


def test_usage_and_data_errors_are_distinct():
    assert issubclass(units.UsageError, ValueError) and not issubclass(units.DataError, units.UsageError)


def test_epoch_seconds_reads_a_naive_datetime_as_utc():
    assert units.epoch_seconds(datetime(2026, 11, 9)) == 1794182400.0
    assert units.epoch_seconds(datetime(2026, 11, 9, 2, tzinfo=timezone(timedelta(hours=2)))) == 1794182400.0
    assert units.epoch_seconds(datetime(2026, 11, 9, tzinfo=UTC)) == 1794182400.0
    assert units.epoch_seconds(1794182400) == 1794182400.0
