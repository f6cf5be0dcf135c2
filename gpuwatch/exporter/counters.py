"""The one parser of dcgm-exporter's counters CSV (``-f/--collectors FILE``).

Each line is ``NAME, TYPE, HELP``; ``#`` starts a comment line; blank lines are skipped; spaces
around fields are dropped. dcgm-exporter reads the file with Go's encoding/csv (counters/
counter_config.go), so a HELP containing commas must be quoted (``NAME, gauge, "a, b"``) — an
unquoted one splits into more than three fields, which both programs reject.

NAME resolves to a DCGM field id through the DCGM bindings' ``dcgm_fields`` constants (passed in,
so tests give the stand-in): pre-4.6 names, 4.6 names, and 4.6's deprecated aliases all resolve. A
numeric NAME is taken as the field id and served under the bindings' constant for it (a Prometheus
name cannot be a number). ``DCGM_EXP_*`` rows name a metric gpuwatch computes (exporter/exp.py).

Stricter than dcgm-exporter where its behaviour is a silent surprise: a ``label`` row is accepted
only for the labels gpuwatch serves, TYPE is gauge, counter or label (dcgm-exporter also accepts
histogram and summary but renders a plain value under them), and a second row for a field already
listed is an error (dcgm-exporter would never serve it).
"""

from __future__ import annotations

import csv
import difflib
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from gpuwatch import fields
from gpuwatch.exporter import exp
from gpuwatch.units import UsageError

TYPES = ("gauge", "counter", "label")
LABEL_FIELD_IDS = {1: "DCGM_FI_DRIVER_VERSION"}
MAX_CHARS = 1 << 20  # a counters file is a few KB; more is not one (a device, a log given by mistake)
_OWN_FIELDS = "gpuwatch_dcgm_fields"  # gpuwatch_fields()' module name  # the DCGM fields gpuwatch serves as labels
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class Counter:
    """One row of a counters file."""

    name: str  # as written in the file (served under this name); a numeric NAME: the bindings' constant
    field_id: int | None  # None for DCGM_EXP_* rows
    type: str  # "gauge" | "counter" | "label"
    help: str
    line: int  # 1-based line in the file


def read_counters(path: str, dcgm_fields: ModuleType) -> tuple[Counter, ...]:
    """Every row of counters file ``path``, NAMEs resolved through ``dcgm_fields`` (the DCGM
    bindings' module). Raises UsageError ``FILE:LINE: ...`` on the first bad row, or naming the
    file when it cannot be read or lists nothing."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read(MAX_CHARS + 1)  # /dev/zero, a log file given by mistake: never read whole
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the counters file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: the counters file is not UTF-8 text") from None
    if len(text) > MAX_CHARS or "\0" in text:
        raise UsageError(f"{path}: not a counters file ({'NUL bytes' if chr(0) in text else 'over 1 MiB'}; "
                         "dcgm-exporter's is a few KB of CSV: NAME, TYPE, HELP)")
    lines = text.splitlines()
    out: list[Counter] = []
    for number, text in enumerate(lines, 1):
        if text.strip() and not text.lstrip().startswith("#"):
            out.append(_row(text, where=f"{path}:{number}", line=number, dcgm_fields=dcgm_fields, seen=out))
    if not out:
        raise UsageError(f"{path}: no counters (every line is blank or a # comment)")
    return tuple(out)


def gpuwatch_fields() -> ModuleType:
    """A stand-in for DCGM's ``dcgm_fields`` where DCGM is absent (the nvml source): every DCGM_FI_*
    name gpuwatch declares (gpuwatch/fields.py, every generation's) with its field id."""
    module = ModuleType(_OWN_FIELDS)
    for name, known in fields.NAMES.items():
        if name.startswith("DCGM_FI_"):
            setattr(module, name, known.field.id)
    for field_id, name in LABEL_FIELD_IDS.items():
        setattr(module, name, field_id)
    return module


def check_provided(counters: Sequence[Counter], provided: frozenset[int], *, path: str, source: str) -> None:
    """UsageError naming the first row whose field (or DCGM_EXP_* input) ``source`` cannot read."""
    for c in counters:
        needed = c.field_id if c.field_id is not None else exp.EXP[c.name].field_id
        if needed not in provided and c.field_id not in LABEL_FIELD_IDS:
            raise UsageError(f"{path}:{c.line}: {c.name}: the {source} source cannot read DCGM field {needed}; "
                             "use --source dcgm, or remove the row")


def field_ids(counters: Sequence[Counter]) -> tuple[int, ...]:
    """The DCGM field ids a counter set needs watched (rows' fields, then the inputs of DCGM_EXP_*
    rows), each once — for ``SourceOptions.extra_field_ids``."""
    ids = [c.field_id for c in counters if c.field_id is not None]
    ids += [exp.EXP[c.name].field_id for c in counters if c.field_id is None]
    return tuple(dict.fromkeys(ids))


def _row(text: str, *, where: str, line: int, dcgm_fields: ModuleType, seen: list[Counter]) -> Counter:
    try:
        cells = next(csv.reader([text], skipinitialspace=True, strict=True))
    except csv.Error as exc:
        raise UsageError(f"{where}: not a CSV row ({exc}); a quoted field must end on its line") from None
    if len(cells) != 3:
        raise UsageError(f"{where}: expected 3 fields NAME, TYPE, HELP, found {len(cells)}"
                         + (" (quote a HELP that contains commas)" if len(cells) > 3 else ""))
    name, kind, text = (c.strip() for c in cells)
    if kind not in TYPES:
        raise UsageError(f"{where}: {name}: TYPE {kind!r} is not one of {', '.join(TYPES)}")
    field_id, served = _resolve(name, where=where, dcgm_fields=dcgm_fields)
    _check(served, field_id, kind, where=f"{where}: {name}", seen=seen)
    return Counter(served, field_id, kind, text, line)


def _resolve(name: str, *, where: str, dcgm_fields: ModuleType) -> tuple[int | None, str]:
    """(field id, served name) of a NAME; UsageError naming the row when it does not resolve."""
    if name.startswith("DCGM_EXP_"):
        if name in exp.EXP:
            return None, name
        if name in exp.NOT_COMPUTED:
            raise UsageError(f"{where}: {name}: gpuwatch does not compute this metric: {exp.NOT_COMPUTED[name]}")
        raise UsageError(f"{where}: {name}: unknown DCGM_EXP_* metric; gpuwatch computes {', '.join(exp.EXP)}")
    constants = _constants(dcgm_fields)
    if _NUMBER.fullmatch(name):
        named = [n for n, v in constants.items() if v == int(name)]
        if not named:
            raise UsageError(f"{where}: {name}: no DCGM_FI_* constant has this field id in the DCGM bindings")
        return int(name), named[0]
    field_id = _lookup(dcgm_fields, name)
    if field_id is None:
        hint = difflib.get_close_matches(name, constants, n=1)
        known = ("not a field gpuwatch reads without DCGM (gpuwatch/fields.py); use --source dcgm, or remove the row"
                 if dcgm_fields.__name__ == _OWN_FIELDS else "not in the DCGM bindings' dcgm_fields")
        raise UsageError(f"{where}: {name}: unknown DCGM field ({known})"
                         + (f"; did you mean {hint[0]}?" if hint else ""))
    return field_id, name


def _check(name: str, field_id: int | None, kind: str, *, where: str, seen: list[Counter]) -> None:
    """A row that resolves (to ``name``, ``field_id``) but cannot be served as written."""
    if kind == "label" and field_id not in LABEL_FIELD_IDS:
        raise UsageError(f"{where}: gpuwatch serves only {', '.join(LABEL_FIELD_IDS.values())} "
                         "as a label; make this row a gauge or counter, or remove it")
    for other in seen:
        if other.name == name:
            raise UsageError(f"{where}: listed twice (first on line {other.line} as {other.name})")
        if field_id is not None and other.field_id == field_id:
            raise UsageError(f"{where}: DCGM field {field_id} is already listed on line {other.line}"
                             f" as {other.name}")


def _constants(dcgm_fields: ModuleType) -> dict[str, int]:
    """The bindings' DCGM_FI_* field-id constants, in module order."""
    return {n: v for n, v in vars(dcgm_fields).items()
            if n.startswith("DCGM_FI_") and isinstance(v, int) and not isinstance(v, bool)}


def _lookup(dcgm_fields: ModuleType, name: str) -> int | None:
    """A DCGM_FI_* name's id: a constant, or (DCGM >= 4.6) a deprecated alias of one, also when
    the bindings were told to refuse aliases (``DCGM_DEPRECATED = 0``)."""
    if not name.startswith("DCGM_FI_"):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        value = getattr(dcgm_fields, name, None)
    if value is None:
        renamed = getattr(dcgm_fields, "_DEPRECATED_ALIASES", {}).get(name)
        value = vars(dcgm_fields).get(renamed) if renamed else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
