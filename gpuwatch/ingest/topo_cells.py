"""The cells of an ``nvidia-smi topo -m`` matrix, as nvidia-smi writes it and as people paste it.

nvidia-smi writes a header row (an empty first cell, the device columns ``GPU0`` ... ``NIC0`` ...,
then ``CPU Affinity``, ``NUMA Affinity`` and, on newer drivers, ``GPU NUMA ID``) and one row per
device, a tab after each cell, and pads with extra tabs: newer drivers one after the NUMA Affinity
cell (``0-19\t0\t\tN/A``), older ones every short cell up to its header's column (``0-7\t\tN/A``,
so rows differ in their number of tabs); it underlines the header with terminal escapes. What
reaches us:

- the file as written (tabs, escapes with their ESC byte);
- a terminal copy (most pastes in issue threads): spaces instead of tabs, aligned to 8-column
  stops, trailing blanks; escapes that lost their ESC byte (``[4mGPU0 ... [0m``);
- header cells run together where a name filled its tab stop (``mlx5_2mlx5_3`` over two columns).

The rule, for every form: run-together device names are split apart; no row cell holds a space, so
a row with one value per affinity column is read in order, padding ignored; a row with empty cells
is read by position (tabs: nvidia-smi's padding tab after NUMA Affinity dropped), else by the column
each value sits under on screen. A row that fits none of these is refused, naming the line: read
right or not at all, never a value from the wrong column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuwatch.units import DataError

ESCAPE = re.compile(r"\x1b?\[[0-9;]*m")  # with its ESC byte, or without it (lost in a copy)
AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER = re.compile("|".join(AFFINITY) + r"|\S+")
_NAME = re.compile(r"[A-Za-z]+\d+(?:_\d+)*")
_RUN_TOGETHER = re.compile(rf"(?:{_NAME.pattern}){{2,}}")
_ROW = re.compile(r"^(GPU\d+)\s")
_ALIGN_SLACK = 3  # columns a pasted cell may sit off its header's start


class TopoError(DataError):
    """The text is not a ``nvidia-smi topo -m`` matrix (the message names the line and column)."""


@dataclass(frozen=True)
class Row:
    line: int  # 1-based, in the text
    name: str  # GPU<n>
    links: tuple[str, ...]  # one per device column
    affinity: tuple[str, ...]  # one per affinity column, "" where empty


@dataclass(frozen=True)
class Table:
    header_line: int
    devices: tuple[str, ...]
    affinity: tuple[str, ...]
    rows: tuple[Row, ...]


def header_at(lines: list[str]) -> int | None:
    """The index of the matrix's header line: its first name is GPU0, it names an affinity column and
    holds no ``X`` (a row does); None when there is none."""
    for at, line in enumerate(lines):
        if "GPU0" not in line:  # cheap: a saved /metrics page may have millions of lines
            continue
        cells = _header_cells(line)
        if cells[:1] == ["GPU0"] and "X" not in cells and set(AFFINITY) & set(cells):
            return at
    return None


def read(text: str, *, source: str) -> Table:
    lines = text.splitlines()
    at = header_at(lines)
    if at is None:
        raise TopoError(f"{source}: no 'nvidia-smi topo -m' matrix (a header naming GPU0 and CPU/NUMA Affinity)")
    cells = _header_cells(lines[at])
    affinity = tuple(c for c in cells if c in AFFINITY)
    devices = tuple(c for c in cells if c not in AFFINITY)
    if cells[len(devices):] != list(affinity) or len(set(cells)) != len(cells):
        raise TopoError(f"{source}: line {at + 1}: the header's columns are not devices then affinities, each once")
    tabs = "\t" in lines[at]
    rows = []
    for number, line in enumerate(lines[at + 1:], start=at + 2):
        plain = ESCAPE.sub("", line)
        if not plain.strip() or plain.lstrip().startswith("Legend"):
            break
        match = _ROW.match(plain.lstrip())
        if match is None:
            continue  # a NIC's row: nothing of it is kept
        where = f"{source}: line {number}"
        read_row = _tab_row if tabs else _space_row
        links, values = read_row(plain, devices, affinity, header=ESCAPE.sub("", lines[at]), where=where)
        rows.append(Row(number, match[1], tuple(links), tuple(values)))
    return Table(at + 1, devices, affinity, tuple(rows))


def _header_cells(line: str) -> list[str]:
    """The header's column names, run-together device names split apart."""
    out = []
    for cell in _HEADER.findall(ESCAPE.sub("", line)):
        out += _NAME.findall(cell) if _RUN_TOGETHER.fullmatch(cell) else [cell]
    return out


def _tab_row(line: str, devices, affinity, *, header: str, where: str) -> tuple[list[str], list[str]]:
    cells = [c.strip() for c in line.split("\t")]
    links, rest = cells[1:1 + len(devices)], cells[1 + len(devices):]
    if len(links) < len(devices):
        raise TopoError(f"{where}: {len(links)} link cells under {len(devices)} device columns")
    values = [c for c in rest if c]
    if len(values) == len(affinity):
        return links, values
    if len(values) < len(affinity):  # empty cells: by position, nvidia-smi's padding tab after NUMA Affinity dropped
        while len(rest) > len(affinity) and rest[-1] == "":
            rest.pop()
        padding = affinity.index("NUMA Affinity") + 1 if "NUMA Affinity" in affinity else len(rest)
        if len(rest) == len(affinity) + 1 and padding < len(rest) and rest[padding] == "":
            return links, rest[:padding] + rest[padding + 1:]
        if len(rest) == len(affinity):
            return links, rest
    return links, _aligned(line, len(devices), affinity, header=header, where=where)


def _space_row(line: str, devices, affinity, *, header: str, where: str) -> tuple[list[str], list[str]]:
    cells = line.split()
    links, values = cells[1:1 + len(devices)], cells[1 + len(devices):]
    if len(links) < len(devices):
        raise TopoError(f"{where}: {len(links)} link cells under {len(devices)} device columns")
    if len(values) == len(affinity):
        return links, values
    return links, _aligned(line, len(devices), affinity, header=header, where=where)


def _aligned(line: str, devices: int, affinity, *, header: str, where: str) -> list[str]:
    """The affinity cells by the column each value sits under on screen (tabs at 8-column stops)."""
    spans = [(m.start(), m.group()) for m in re.finditer(r"\S+", line.expandtabs())][1 + devices:]
    if len(spans) > len(affinity):
        raise TopoError(f"{where}: {len(spans)} cells after the links under {len(affinity)} columns "
                        f"({', '.join(affinity)}): a matrix missing a column?")
    if all(text == "N/A" for _, text in spans):
        return [""] * len(affinity)  # whichever columns they sit under, every value is unknown
    starts = {name: header.expandtabs().find(name) for name in affinity}
    values = dict.fromkeys(affinity, "")
    for start, text in spans:
        near = [n for n, s in starts.items() if abs(s - start) <= _ALIGN_SLACK]
        if len(near) != 1 or values[near[0]]:
            raise TopoError(f"{where}: {text!r} at column {start + 1} sits under no single one of "
                            f"{', '.join(affinity)}: refused rather than guessed")
        values[near[0]] = text
    return list(values.values())
