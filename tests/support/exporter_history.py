"""History for Prometheus: the simulated fleet's exposition at many instants, as one OpenMetrics
file for ``promtool tsdb create-blocks-from openmetrics`` (tests/support/prometheus.backfill).

OpenMetrics wants each family's samples together and each series' samples in time order, so the
instants are rendered one by one (``collector.families_at``, the same path as the live exporter)
and each family's lines are spooled to its own temporary file, then concatenated: memory stays
flat for weeks of history.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gpuwatch.exporter.collector import families_at
from gpuwatch.exporter.exposition import render
from gpuwatch.exporter.families import Options


def write_openmetrics(path: str | os.PathLike, fleet, times: Iterable[float], *, node: str | None = None,
                      options: Options | None = None) -> int:
    """Write the exposition of ``fleet`` at each of ``times`` (ascending epoch s) to ``path``.

    Every sample is stamped with its instant; counters are typed ``unknown`` so names stay
    dcgm-exporter's. Returns the number of samples written.
    """
    options = options or Options()
    samples = 0
    with tempfile.TemporaryDirectory(prefix="gpuwatch-backfill-") as tmp:
        spool: dict[str, object] = {}
        heads: dict[str, str] = {}
        try:
            for t in times:
                for family in families_at(fleet, t, node=node, options=options, timestamp=t):
                    if not family.samples:
                        continue
                    text = render([family], openmetrics=True).decode()
                    head, body = _split(text)
                    if family.name not in spool:
                        spool[family.name] = open(Path(tmp) / f"{len(spool)}.om", "w")  # noqa: SIM115
                        heads[family.name] = head
                    spool[family.name].write(body)
                    samples += len(family.samples)
        finally:
            for f in spool.values():
                f.close()
        with open(path, "w") as out:
            for i, name in enumerate(spool):
                out.write(heads[name])
                out.write((Path(tmp) / f"{i}.om").read_text())
            out.write("# EOF\n")
    return samples


def _split(text: str) -> tuple[str, str]:
    """(HELP+TYPE lines, sample lines) of one rendered family, ``# EOF`` dropped."""
    lines = text.splitlines(keepends=True)
    head = "".join(x for x in lines if x.startswith(("# HELP", "# TYPE")))
    body = "".join(x for x in lines if not x.startswith("#"))
    return head, body
