"""Fuzzing `nvidia-smi topo -m` text (hypothesis, bounded): real pastes mutated as copies mutate them
(tabs to spaces, lost escape bytes, dropped or duplicated cells, swapped link labels, cut lines). Law:
never a traceback, only a TopoError naming the source; and what parses is a square, symmetric matrix
whose every GPU has a row and whose links name GPUs of the header."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuwatch.ingest import topo
from tests.conftest import FIXTURES

PASTES = sorted((FIXTURES / "topo").glob("paste-*.txt")) + sorted((FIXTURES / "topo").glob("*-8gpu*.txt"))
CELLS = ["X", " X ", "NV0", "NV12", "NV4", "SYS", "PIX", "PXB", "NODE", "PHB", "x", "", "N/A", "0-7", "0,3-9", "1"]


@st.composite
def mutated(draw):
    text = PASTES[draw(st.integers(0, len(PASTES) - 1))].read_text(encoding="utf-8")
    if draw(st.booleans()):
        text = text.expandtabs()
    if draw(st.booleans()):
        text = text.replace("\x1b", "")
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        cells = lines[at].split("\t") if "\t" in lines[at] else lines[at].split()
        if not cells:
            continue
        kind = draw(st.sampled_from(["drop", "dup", "swap", "cut", "delete"]))
        i = draw(st.integers(0, len(cells) - 1))
        if kind == "drop":
            del cells[i]
        elif kind == "dup":
            cells.insert(i, cells[i])
        elif kind == "swap":
            cells[i] = draw(st.sampled_from(CELLS))
        elif kind == "cut":
            cells = cells[:i]
        lines[at] = "" if kind == "delete" else ("\t" if "\t" in lines[at] else "    ").join(cells)
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
def test_topo_text_parses_to_a_whole_matrix_or_fails_cleanly(text):
    try:
        parsed = topo.parse(text, source="paste.txt")
    except topo.TopoError as exc:
        assert str(exc).startswith("paste.txt") and "\n" not in str(exc)
        event("refused")
        return
    event("parsed")
    gpus = {g.index for g in parsed.gpus}
    assert len(gpus) == len(parsed.gpus)
    for x in parsed.links:
        assert x.gpu in gpus and x.peer in gpus and x.gpu != x.peer
        back = parsed.link(x.peer, x.gpu)
        assert back is not None and (back.link, back.nvlinks) == (x.link, x.nvlinks)
        assert (x.link == "NV") == (x.nvlinks is not None) and (x.nvlinks is None or x.nvlinks >= 1)
    assert len(parsed.links) == len(gpus) * (len(gpus) - 1)
    assert all(g.numa_node is None or g.numa_node >= 0 for g in parsed.gpus)
