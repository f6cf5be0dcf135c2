"""Every series the exporter serves, as one declarative table (kube-state-metrics style).

Raw DCGM fields keep dcgm-exporter's exact names, TYPE and HELP and are keyed by numeric DCGM
field id; they come from the one field table (gpuwatch/fields.py). ``fmt`` is DCGM's field type:
``i`` (int64, rendered ``%d``) or ``d`` (double, rendered ``%f``), as dcgm-exporter renders them.
gpuwatch's own series use the ``gpuwatch_`` prefix and base units.
"""

from __future__ import annotations

from gpuwatch import fields
from gpuwatch.exporter.own import OWN_METRICS
from gpuwatch.exporter.spec import (
    ALWAYS,
    DEVICE_LABELS,
    MIG_LABELS,
    OPTIONAL,
    POD_LABELS,
    RAW_LABELS,
    Spec,
)

__all__ = ["ALWAYS", "BY_NAME", "DEVICE_LABELS", "METRICS", "MIG_LABELS", "OPTIONAL", "OWN_METRICS", "POD_LABELS",
           "RAW_LABELS", "RAW_METRICS", "Spec", "evidence_table", "markdown_table"]

# The DCGM series: derived from the field table, in dcgm-exporter's default-counters.csv order.
RAW_METRICS: tuple[Spec, ...] = tuple(Spec(f.name, f.type, f.help, RAW_LABELS, f.id, f.fmt, profiling=f.profiling)
                                      for f in fields.SERIES)

METRICS: tuple[Spec, ...] = RAW_METRICS + OWN_METRICS
BY_NAME: dict[str, Spec] = {m.name: m for m in METRICS}


def markdown_table() -> str:
    """The README's Metrics table, generated from METRICS (a test keeps the README in step).
    Labels in [brackets] appear only on some series (MIG instances, attributed or shared devices).
    Per source, whether it provides the field (its ``PROVIDED_FIELD_IDS``): ✓, ``GPM`` (nvml: from GPU
    Performance Monitoring, Hopper and newer), or — (never)."""
    import importlib

    from gpuwatch.sources import SOURCES

    provided = {name: importlib.import_module(module).PROVIDED_FIELD_IDS for name, module in SOURCES.items()}
    rows = ["| metric | type | DCGM field id | " + " | ".join(provided) + " | labels | help |",
            "|---|---|---|" + "---|" * len(provided) + "---|---|"]
    for m in METRICS:
        always = ALWAYS.get(m.name, ())
        labels = ", ".join(f"[{n}]" if n in OPTIONAL and n not in always else n for n in m.labels)
        field = "" if m.field_id is None else str(m.field_id)
        have = " | ".join(_provides(name, ids, m) for name, ids in provided.items())
        rows.append(f"| `{m.name}` | {m.type} | {field} | {have} | {labels} | {m.help.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def _provides(source: str, ids: frozenset, m: Spec) -> str:
    if m.field_id is None:
        return "✓"  # gpuwatch's own series: every source
    if m.field_id not in ids:
        return "—"
    return "GPM" if source == "nvml" and m.profiling else "✓"


def evidence_table() -> str:
    """The README's field table: every name each generation serves (or the ingest reads), its unit and
    the upstream evidence for its name, unit and HELP (fields.EVIDENCE; a test keeps the README in step)."""
    cites = {text: f"[{key}]" for key, text in fields.EVIDENCE.items()}
    cites |= {fields.UNVERIFIED: "**unverified**", fields.HELP49: "gpuwatch"}
    rows = ["| DCGM id | name | generation | TYPE | unit | evidence: name | evidence: unit | HELP from |",
            "|---|---|---|---|---|---|---|---|"]
    for f in fields.FIELDS:
        names = sorted((n for n in fields.NAMES.values() if n.field is f), key=lambda n: fields.GENERATIONS.index(n.generation))
        rows += [f"| {f.id} | `{n.name}` | {n.generation} | {n.type or 'label/input'} | {n.unit or '-'} | "
                 f"{cites[n.name_cite]} | {cites[n.unit_cite]} | {cites[n.help_cite]} |" for n in names]
    keys = [f"- [{key}]: {text}." for key, text in fields.EVIDENCE.items()] + [f"- **unverified**: {fields.UNVERIFIED}."]
    return "\n".join(rows) + "\n\n" + "\n".join(keys) + "\n"
