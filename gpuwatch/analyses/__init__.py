"""Analyses: one ``<name>.sql`` file per question, over the ``stg_*`` views.

Each file opens with a header comment that is its contract::

    -- <Title>: one line saying what question it answers.
    -- params: $start, $end (timestamps), $idle_below (ratio)
    -- columns: namespace, pod, team, ...

Parameters are bound by DuckDB (``$name``), never formatted into SQL. Where SQL is the wrong tool
(placement search), a sibling module ``<name>.py`` exposing ``finish(con, frame, params) -> frame``
post-processes the SQL result; ``run`` calls it when present.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Header:
    name: str
    title: str
    params: tuple[str, ...]
    columns: tuple[str, ...]


def names() -> list[str]:
    """Every analysis, by file name, sorted."""
    return sorted(p.name[:-4] for p in resources.files(__package__).iterdir() if p.name.endswith(".sql"))


def sql(name: str) -> str:
    if name not in names():
        raise KeyError(f"unknown analysis {name!r}; known: {', '.join(names())}")
    return resources.files(__package__).joinpath(f"{name}.sql").read_text()


def header(name: str) -> Header:
    """Parse the header comment of ``<name>.sql``."""
    lines = [ln[2:].strip() for ln in sql(name).splitlines() if ln.startswith("--")]
    fields = {k: "" for k in ("params", "columns")}
    for line in lines:
        key, _, rest = line.partition(":")
        if key.strip() in fields:
            fields[key.strip()] = rest
    params = tuple(dict.fromkeys(_PARAM.findall(fields["params"])))
    columns = tuple(c.strip() for c in fields["columns"].split(",") if c.strip())
    return Header(name=name, title=lines[0] if lines else name, params=params, columns=columns)


def body_params(name: str) -> set[str]:
    """The ``$params`` the SQL body (comments excluded) actually uses."""
    body = "\n".join(ln for ln in sql(name).splitlines() if not ln.lstrip().startswith("--"))
    return set(_PARAM.findall(body))


def run(con: Any, name: str, **params: Any):
    """Run analysis ``name`` with bound ``params``; returns a pandas DataFrame."""
    used = body_params(name)
    frame = con.execute(sql(name), {k: v for k, v in params.items() if k in used}).df()
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError:
        return frame
    return module.finish(con, frame, params)


def markdown_table() -> str:
    """The README's Analyses table, generated from the ``.sql`` headers."""
    rows = ["| analysis | question | params | columns |", "|---|---|---|---|"]
    for name in names():
        h = header(name)
        params = ", ".join(f"`${p}`" for p in h.params) or "—"
        rows.append(f"| `{name}` | {h.title} | {params} | {', '.join(h.columns)} |")
    return "\n".join(rows) + "\n"
