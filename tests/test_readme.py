"""The README's generated parts stay in step with the code (KSM's doccheck habit).

Checks: the Metrics table equals what the exporter's METRICS catalog generates; the Analyses
table equals what the .sql headers generate; the two set-up commands are at the top.
``pytest --update-golden`` rewrites the generated sections in place.
"""

from __future__ import annotations

import re

import pytest

from gpuwatch import analyses
from gpuwatch.exporter import metrics
from tests.conftest import ROOT

README = ROOT / "README.md"
GENERATED = {"metrics": metrics.markdown_table, "analyses": analyses.markdown_table, "fields": metrics.evidence_table}


def _section(text: str, name: str) -> re.Match:
    match = re.search(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", text, re.S)
    assert match, f"README.md lacks the <!-- {name}:start/end --> markers"
    return match


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_section_is_current(name, update_golden):
    text = README.read_text()
    match = _section(text, name)
    want = GENERATED[name]()
    if update_golden:
        README.write_text(text[: match.start(2)] + want + text[match.end(2):])
        return
    assert match.group(2) == want, f"README {name} table is stale: run pytest --update-golden"


def test_two_commands_at_the_top():
    head = README.read_text()[:1500]
    assert "make demo" in head and "make test" in head
