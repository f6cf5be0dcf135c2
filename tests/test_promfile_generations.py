"""One /metrics page carrying a GPU's reading under both dcgm-exporter generations' names (4.8's
DCGM_FI_DEV_GPU_UTIL in %, 4.9's DCGM_FI_DEV_GPU_UTIL_RATIO) or labels (4.8's Hostname/UUID, 4.9's
hostname/uuid): before, the value stored was whichever line came last. Now the rule picks the newest
generation's reading whatever the order, and a disagreement is said (issue 31 item 14)."""

from __future__ import annotations

import pytest

from gpuwatch.cli import main
from gpuwatch.ingest import promfile

LABELS_48 = 'gpu="0",UUID="GPU-a",Hostname="n1",modelName="NVIDIA L40S"'
LABELS_49 = 'gpu="0",uuid="GPU-a",hostname="n1",modelName="NVIDIA L40S"'


def _util(text: str) -> tuple[list, list]:
    frames = promfile.parse(text, at=1_794_182_400.0, source="page.prom")
    notes = [n for n in frames["samples"].attrs["notes"] if "generations" in n]
    return frames["samples"]["gpu_util"].tolist(), notes


@pytest.mark.parametrize(("older", "newer", "kept"), [
    (f"DCGM_FI_DEV_GPU_UTIL{{{LABELS_48}}} 90\n", f"DCGM_FI_DEV_GPU_UTIL_RATIO{{{LABELS_48}}} 0.3\n", 0.3),
    (f"DCGM_FI_DEV_GPU_UTIL{{{LABELS_48}}} 90\n", f"DCGM_FI_DEV_GPU_UTIL{{{LABELS_49}}} 10\n", 0.1),
])
def test_two_generations_disagreeing_keep_the_newest_whatever_the_line_order(older, newer, kept):
    for text in (older + newer, newer + older):
        values, notes = _util(text)
        assert values == [pytest.approx(kept)]
        assert len(notes) == 1 and "1 reading(s) (gpu_util)" in notes[0] and "newest generation's value" in notes[0]


def test_two_generations_agreeing_say_nothing():
    values, notes = _util(f"DCGM_FI_DEV_GPU_UTIL{{{LABELS_48}}} 90\nDCGM_FI_DEV_GPU_UTIL_RATIO{{{LABELS_49}}} 0.9\n")
    assert values == [pytest.approx(0.9)] and notes == []


def test_ingest_says_which_rule_applied(tmp_path, caplog):
    page = tmp_path / "page.prom"
    page.write_text(f"DCGM_FI_DEV_GPU_UTIL_RATIO{{{LABELS_48}}} 0.3\nDCGM_FI_DEV_GPU_UTIL{{{LABELS_48}}} 90\n")
    assert main(["ingest", "--from", str(page), "--at", "2026-11-09T00:00:00Z", "--db", str(tmp_path / "s.duckdb")]) == 0
    assert any("newest generation's value was kept" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records), caplog.text
