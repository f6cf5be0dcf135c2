"""`nvidia-smi topo -m` parsing: real single-GPU captures, documented 8-GPU layouts, bad cells.

The real captures (../shared/data/real/nvidia_smi_captures) are single-GPU machines; the 8-GPU
fixtures under tests/fixtures/topo are built from documented layouts and say so in their header.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.ingest import topo

FIXTURES = Path(__file__).parent / "fixtures" / "topo"
CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "nvidia_smi_captures"
# capture -> (CPU affinity, NUMA node) as printed in that capture's `topo -m` section
REAL = {
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt": ("0-19", 0),
    "linux-x86_64__nvidia-h200__590.48.01.txt": ("0-23", 0),
    "linux-x86_64__nvidia-l40s__595.80.txt": ("0-7", 0),
    "linux-x86_64__nvidia-h100-mig__590.48.01.txt": ("0-19", 0),
    "windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt": (None, None),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_single_gpu_captures(name):
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"real capture not present: {path}")
    parsed = topo.parse(path.read_text(errors="replace"), source=name)
    assert parsed.gpus == (topo.TopoGpu(0, *REAL[name]),)
    assert parsed.links == ()


def test_hgx_h100_every_pair_is_nv18_and_numa_splits_in_halves():
    parsed = topo.parse((FIXTURES / "hgx-h100-8gpu.txt").read_text())
    assert [g.index for g in parsed.gpus] == list(range(8))
    assert [g.numa_node for g in parsed.gpus] == [0] * 4 + [1] * 4
    assert parsed.gpus[5].cpu_affinity == "56-111,168-223"
    assert len(parsed.links) == 8 * 7
    assert {(x.link, x.nvlinks) for x in parsed.links} == {("NV", 18)}


def test_pcie_server_link_classes_follow_switches_and_sockets():
    parsed = topo.parse((FIXTURES / "pcie-l40s-8gpu.txt").read_text())
    assert parsed.link(0, 1).link == "PIX"
    assert parsed.link(0, 2).link == "NODE"
    assert parsed.link(3, 4).link == "SYS"
    assert parsed.link(7, 6).link == "PIX"
    assert all(x.nvlinks is None for x in parsed.links)
    # the matrix is symmetric, as nvidia-smi prints it
    assert all(parsed.link(x.peer, x.gpu).link == x.link for x in parsed.links)


@pytest.mark.parametrize("cell,nvlinks", [("NV1", 1), ("NV4", 4), ("NV6", 6), ("NV12", 12), ("NV18", 18)])
def test_any_bonded_nvlink_count(cell, nvlinks):
    text = f"\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t{cell}\t0-7\t0\nGPU1\t{cell}\t X \t0-7\t0\n"
    assert topo.parse(text).link(0, 1) == topo.TopoLink(0, 1, "NV", nvlinks)


def test_a_cell_that_is_no_link_is_an_error_naming_line_and_column():
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNVL\t0-7\t0\nGPU1\tNVL\t X \t0-7\t0\n"
    with pytest.raises(topo.TopoError, match=r"topo.txt: line 2, column GPU1: 'NVL' is not a link"):
        topo.parse(text, source="topo.txt")


def test_text_without_a_matrix_is_an_error():
    with pytest.raises(topo.TopoError, match="no 'nvidia-smi topo -m' matrix"):
        topo.parse("GPU 0: NVIDIA H100 (UUID: GPU-1)\n", source="list.txt")


def test_a_gpu_spanning_numa_nodes_has_no_single_numa_node():
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-63\t0-1\t\tN/A\n"
    assert topo.parse(text).gpus == (topo.TopoGpu(0, "0-63", None),)
