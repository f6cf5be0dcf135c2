"""Bundle validation (pure): one frame of one bundle file in, typed frame with exactly its columns out.

Bad input is an error naming the file, the column and the (1-based data) row: a missing required
column, an unknown column, a value that is not a number or not a timestamp, a negative count.
Negative or NaN *readings* (samples) are not errors: staging turns them into NULL (unknown).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd

from gpuwatch.model import BUNDLE_COLUMNS

REQUIRED = {
    "devices": ("node", "gpu_uuid", "gpu_model"),
    "samples": ("ts", "node", "gpu_uuid"),
    "pods": ("namespace", "pod", "gpu_count"),
    "prices": ("gpu_model", "usd_per_gpu_hour"),
}
TIMESTAMPS = {"samples": ("ts",), "pods": ("start_ts", "end_ts")}
INTEGERS = {
    "devices": ("gpu_index", "fb_total_bytes", "mig_gi_id", "mig_profile_id", "mig_placement_start",
                "mig_placement_size"),
    "samples": ("mig_gi_id",),
}
FLOATS = {
    "samples": BUNDLE_COLUMNS["samples"][7:],
    "pods": ("gpu_count",),
    "prices": ("usd_per_gpu_hour",),
}
# Counts, sizes and prices: a negative value is a broken bundle, not a reading to drop.
NON_NEGATIVE = {"devices": INTEGERS["devices"], "pods": ("gpu_count",), "prices": ("usd_per_gpu_hour",),
                "samples": ("mig_gi_id",)}
# Timestamps from 2000-01-01 to one day after now: milliseconds, seconds in a .prom file, a typo'd
# year or a far-future outlier fall outside and are refused (one of them would move every window).
EARLIEST_EPOCH = 946_684_800.0  # 2000-01-01T00:00:00Z
FUTURE_SLACK_SECONDS = 86_400.0
# Ratio columns are 0-1; above the limit is a percent or a broken reader, not a reading. SM_ACTIVE
# may exceed 1 on MIG instances (DCGM reports it so): staging clamps and counts those.
RATIO_LIMITS = {"gpu_util": 1.05, "gr_engine_active": 1.05, "sm_occupancy": 1.05, "tensor_active": 1.05,
                "dram_active": 1.05, "sm_active": 1.5}
RATIO_MESSAGE = "{raw} is above 1: ratio columns hold 0-1 (a percent must be converted by its reader)"
TS_MESSAGE = "bad timestamp {raw}: outside 2000-01-01 .. now + 1 day (epoch seconds expected; milliseconds?)"
FLOAT32_MESSAGE = "holds float32 epoch seconds, which are off by up to a minute today; write float64 or integers"


def latest_epoch() -> float:
    """The latest acceptable timestamp, epoch seconds: one day after now."""
    return datetime.now(UTC).timestamp() + FUTURE_SLACK_SECONDS


class BundleError(ValueError):
    """A bundle file that cannot be loaded; the message names file, column and row."""


def validate(name: str, frame: pd.DataFrame, *, file: str, row_offset: int = 0) -> pd.DataFrame:
    """Typed copy of ``frame`` with exactly ``BUNDLE_COLUMNS[name]``, or ``BundleError``."""
    if name not in BUNDLE_COLUMNS:
        raise BundleError(f"{file}: unknown bundle file {name!r}; expected one of {', '.join(BUNDLE_COLUMNS)}")
    check_column_names(name, [str(c) for c in frame.columns], file=file)
    out = pd.DataFrame(index=frame.index)
    for column in BUNDLE_COLUMNS[name]:
        raw = frame[column] if column in frame.columns else pd.Series(None, index=frame.index, dtype=object)
        where = _Where(file, column, row_offset, frame.index)
        out[column] = _coerce(name, column, raw, where)
    for column in REQUIRED[name]:
        missing = out[column].isna().to_numpy()
        if missing.any():
            raise BundleError(f"{_Where(file, column, row_offset, frame.index).at(missing)}: "
                              f"required value is empty")
    if name == "pods":
        _check_interval(out, file=file, row_offset=row_offset)
    return out.reset_index(drop=True)


class _Where:
    def __init__(self, file: str, column: str, row_offset: int, index: pd.Index):
        self.file, self.column, self.row_offset, self.index = file, column, row_offset, index

    def at(self, bad) -> str:
        position = int(bad.nonzero()[0][0])
        return f"{self.file}: column {self.column!r}, row {self.row_offset + position + 1}"


def check_column_names(name: str, columns: list[str], *, file: str) -> None:
    """Unknown or missing required columns: an error naming the file (frames and files alike)."""
    unknown = [c for c in columns if c not in BUNDLE_COLUMNS[name]]
    if unknown:
        raise BundleError(f"{file}: unknown column(s) {', '.join(map(repr, unknown))}; {name} has "
                          f"{', '.join(BUNDLE_COLUMNS[name])} (base units: bytes, ratios 0-1, watts, seconds, USD)")
    missing = [c for c in REQUIRED[name] if c not in columns]
    if missing:
        raise BundleError(f"{file}: missing required column(s) {', '.join(map(repr, missing))}")


def _coerce(name: str, column: str, raw: pd.Series, where: _Where) -> pd.Series:
    if column in TIMESTAMPS.get(name, ()):
        return _timestamps(raw, where)
    if column in INTEGERS.get(name, ()) or column in FLOATS.get(name, ()):
        values = _numbers(raw, where)
        if column in NON_NEGATIVE.get(name, ()):
            negative = (values < 0).to_numpy()
            if negative.any():
                raise BundleError(f"{where.at(negative)}: negative value {float(values[negative].iloc[0])!r} "
                                  f"(a count, size or price cannot be negative)")
        if name == "samples" and column in RATIO_LIMITS:
            above = (values > RATIO_LIMITS[column]).to_numpy()
            if above.any():
                raise BundleError(f"{where.at(above)}: " + RATIO_MESSAGE.format(raw=float(values[above].iloc[0])))
        if column in INTEGERS.get(name, ()):
            fractional = (values.notna() & (values != values.round())).to_numpy()
            if fractional.any():
                raise BundleError(f"{where.at(fractional)}: {float(values[fractional].iloc[0])!r} is not a whole number")
            return values.round().astype("Int64")
        return values.astype("float64")
    if isinstance(raw.dtype, pd.CategoricalDtype):
        return raw  # Parquet dictionary columns: already text; trimming and '' -> NULL is staging's job
    return raw.astype(object).where(raw.notna(), None)


def _numbers(raw: pd.Series, where: _Where) -> pd.Series:
    if pd.api.types.is_bool_dtype(raw):
        raise BundleError(f"{where.file}: column {where.column!r} holds booleans, expected numbers")
    if pd.api.types.is_numeric_dtype(raw):
        return raw.astype("float64")
    present = raw.notna() & (raw.astype("string").str.strip() != "")
    values = pd.to_numeric(raw.where(present), errors="coerce")
    bad = (present & values.isna() & ~raw.astype("string").str.strip().str.lower().isin(["nan", "inf", "-inf"])).to_numpy()
    if bad.any():
        raise BundleError(f"{where.at(bad)}: {raw[bad].iloc[0]!r} is not a number")
    return values.astype("float64")


def _timestamps(raw: pd.Series, where: _Where) -> pd.Series:
    """UTC naive datetime64 from datetimes, epoch seconds, or ISO-8601 text, within the sane range."""
    if raw.dtype == "float32":
        raise BundleError(f"{where.file}: column {where.column!r} {FLOAT32_MESSAGE}")
    stamps = _parse_timestamps(raw, where)
    epoch = (stamps - pd.Timestamp("1970-01-01")).dt.total_seconds()
    outside = (epoch.notna() & ((epoch < EARLIEST_EPOCH) | (epoch > latest_epoch()))).to_numpy()
    if outside.any():
        raise BundleError(f"{where.at(outside)}: " + TS_MESSAGE.format(raw=repr(raw[outside].iloc[0])))
    return stamps


def _parse_timestamps(raw: pd.Series, where: _Where) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(raw):
        stamps = pd.to_datetime(raw, utc=True)
        return stamps.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[us]")
    text = raw.astype("string").str.strip()
    present = (raw.notna() & (text != "")).to_numpy()
    numbers = pd.to_numeric(raw if pd.api.types.is_numeric_dtype(raw) else text, errors="coerce")
    out_of_range = (numbers.notna() & ((numbers < EARLIEST_EPOCH) | (numbers > latest_epoch()))).to_numpy()
    if out_of_range.any():
        raise BundleError(f"{where.at(out_of_range)}: " + TS_MESSAGE.format(raw=repr(raw[out_of_range].iloc[0])))
    stamps = pd.to_datetime(numbers, unit="s", utc=True)
    textual = present & numbers.isna().to_numpy()
    if textual.any():
        parsed = pd.to_datetime(text.where(textual), utc=True, errors="coerce", format="ISO8601")
        bad = textual & parsed.isna().to_numpy()
        if bad.any():
            raise BundleError(f"{where.at(bad)}: bad timestamp {raw[bad].iloc[0]!r} (ISO-8601 or epoch seconds)")
        stamps = stamps.where(~textual, parsed)
    return stamps.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[us]")


def _check_interval(out: pd.DataFrame, *, file: str, row_offset: int) -> None:
    backwards = (out["end_ts"].notna() & out["start_ts"].notna() & (out["end_ts"] < out["start_ts"])).to_numpy()
    if backwards.any():
        row = row_offset + int(backwards.nonzero()[0][0]) + 1
        raise BundleError(f"{file}: column 'end_ts', row {row}: ends before start_ts")
