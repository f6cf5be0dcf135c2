"""`nvidia-smi topo -m` as people paste it (gpuwatch/ingest/topo_cells.py), and matrices that are wrong.

Real pastes from public issue threads (tests/fixtures/topo/paste-*.txt, each citing its thread): tabs
kept, terminal copies with spaces, header cells run together, a paste cut mid-matrix, NUMA N/A. The
real captures in ../shared/data/real/nvidia_smi_captures are also read as a terminal shows them (tabs
expanded) and with the escapes' ESC byte lost (``[4mGPU0``). A matrix that is not whole, square and
symmetric, a cell that is no link (``NV0``), a NUMA cell that is no node list (``x``) is one error
naming line and column: read right or refused, never a value from the wrong column.
"""

from __future__ import annotations

import pytest

from gpuwatch.cli import main
from gpuwatch.ingest import topo
from tests.conftest import FIXTURES, SHARED_DATA

TOPO = FIXTURES / "topo"
CAPTURES = SHARED_DATA / "nvidia_smi_captures"


def _read(name: str) -> str:
    return (TOPO / name).read_text(encoding="utf-8")


def _summary(parsed: topo.Topology) -> tuple:
    return (tuple((g.index, g.cpu_affinity, g.numa_node) for g in parsed.gpus),
            tuple(sorted((x.gpu, x.peer, x.link, x.nvlinks) for x in parsed.links)))


def test_rtx4090_server_with_tabs():
    parsed = topo.parse(_read("paste-go-gpuallocator-17-rtx4090-8gpu-tabs.txt"))
    assert [(g.cpu_affinity, g.numa_node) for g in parsed.gpus] == (
        [("0-55,112-167", 0)] * 4 + [("56-111,168-223", 1)] * 4)
    assert len(parsed.links) == 56 and {x.link for x in parsed.links} == {"SYS"}


def test_the_same_paste_as_a_terminal_shows_it_reads_the_same():
    """A terminal copy turns the tabs into spaces at 8-column stops: before, 'no matrix'."""
    text = _read("paste-go-gpuallocator-17-rtx4090-8gpu-tabs.txt")
    assert "\t" not in text.expandtabs()
    assert _summary(topo.parse(text.expandtabs())) == _summary(topo.parse(text))


def test_a_terminal_copy_with_nvlink_and_numa_3():
    parsed = topo.parse(_read("paste-dask-cuda-1358-2gpu-nv12-spaces.txt"))
    assert _summary(parsed) == (((0, "48-63,176-191", 3), (1, "48-63,176-191", 3)),
                                ((0, 1, "NV", 2 * 6), (1, 0, "NV", 12)))


def test_header_cells_run_together_are_split_into_their_columns():
    """'mlx5_2mlx5_3' heads two columns: read as two, the CPU affinity stays in its own column."""
    parsed = topo.parse(_read("paste-ucx-py-616-summit-spaces-merged-header.txt"))
    assert [(g.cpu_affinity, g.numa_node) for g in parsed.gpus] == [("0-83", None)] * 3 + [("88-171", None)] * 3
    assert parsed.link(0, 1).nvlinks == 2 and parsed.link(1, 2).nvlinks == 2 and parsed.link(3, 5).nvlinks == 2
    assert parsed.link(2, 3).link == "SYS" and len(parsed.links) == 30


def test_a_single_gpu_with_numa_na_and_padding_tabs():
    assert topo.parse(_read("paste-hami-99-tesla-p4-numa-na.txt")).gpus == (topo.TopoGpu(0, "0-7", None),)


def test_two_gpus_on_a_host_bridge():
    parsed = topo.parse(_read("paste-club-3090-1229-2gpu-phb-tabs.txt"))
    assert _summary(parsed) == (((0, "0-63", 0), (1, "0-63", 0)), ((0, 1, "PHB", None), (1, 0, "PHB", None)))


def test_a_paste_cut_mid_matrix_is_refused():
    with pytest.raises(topo.TopoError, match="not square: GPU5 has a column but no row"):
        topo.parse(_read("paste-kubernetes-53497-8gpu-cut-spaces.txt"), source="cut.txt")


@pytest.mark.parametrize("name", ["linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
                                  "linux-x86_64__nvidia-l40s__595.80.txt",
                                  "windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt"])
@pytest.mark.parametrize("copy", ["escape byte lost", "terminal copy", "both"])
def test_real_captures_as_pasted(name, copy):
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"real capture not present: {path}")
    text = path.read_text(errors="replace")
    pasted = text.replace("\x1b", "") if copy != "terminal copy" else text
    pasted = pasted.expandtabs() if copy != "escape byte lost" else pasted
    assert "[4mGPU0" in pasted or copy == "terminal copy"
    assert topo.parse(pasted).gpus == topo.parse(text).gpus


# Constructed (no such paste found): the driver of HAMi #99 pads a short cell with tabs up to its
# header's column, so GPU0's short CPU list carries an extra tab and GPU1's longer one none. Read by
# position, GPU0's NUMA cell was the padding: before, its NUMA node was silently lost.
PADDED = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
          "GPU0\t X \tNV4\t0-7\t\t0\t\tN/A\n"
          "GPU1\tNV4\t X \t8-15,24-31\t1\t\tN/A\n")


def test_rows_padded_to_their_header_keep_every_numa_node():
    assert [(g.cpu_affinity, g.numa_node) for g in topo.parse(PADDED).gpus] == [("0-7", 0), ("8-15,24-31", 1)]
    assert [g.numa_node for g in topo.parse(PADDED.expandtabs()).gpus] == [0, 1]


def _matrix(cells: dict[tuple[int, int], str], numa=("0", "1")) -> str:
    rows = ["\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i in range(2):
        rows.append(f"GPU{i}\t" + "\t".join(cells.get((i, j), " X " if i == j else "NV12") for j in range(2))
                    + f"\t0-7\t{numa[i]}\t\tN/A")
    return "\n".join(rows) + "\n"


def test_numa_affinity_lists():
    """A GPU as close to several NUMA nodes (0,3-9,11-17) has no single one: unknown, not an error."""
    parsed = topo.parse(_matrix({}, numa=("0,3-9,11-17", "2")))
    assert [g.numa_node for g in parsed.gpus] == [None, 2]


@pytest.mark.parametrize(("text", "says"), [
    (_matrix({(0, 1): "NV0", (1, 0): "NV0"}), "line 2, column GPU1: 'NV0' is not a link"),
    (_matrix({(0, 1): "NV12", (1, 0): "NV6"}), "not symmetric: GPU0 -> GPU1 is NV12 but GPU1 -> GPU0 is NV6"),
    (_matrix({(0, 1): "PIX", (1, 0): "SYS"}), "not symmetric: GPU0 -> GPU1 is PIX but GPU1 -> GPU0 is SYS"),
    (_matrix({}, numa=("x", "1")), "line 2, column NUMA Affinity: 'x' is not a NUMA node list"),
    (_matrix({(1, 1): "NV12"}), "line 3, column GPU1: 'NV12' on the diagonal"),
    (_matrix({(0, 1): "X"}), "line 2, column GPU1: 'X' is not a link"),
    # a matrix missing a column: GPU1's row lost its GPU0 cell, so every cell after it moves one column left
    (_matrix({}).replace("GPU1\tNV12\t X ", "GPU1\t X "), "line 3, column GPU0: 'X' is not a link"),
    (_matrix({}).expandtabs().replace("GPU1    NV12     X ", "GPU1     X "), "line 3, column GPU0: 'X' is not a link"),
    (_matrix({}).replace("GPU0\t X \tNV12\t", "GPU0\t X \t"), "line 2, column GPU1: '0-7' is not a link"),
    (_matrix({}) + "GPU1\tNV12\t X \t0-7\t1\t\tN/A\n", "GPU1 has a second row"),
    (_matrix({}).replace("\t0-7\t1\t\tN/A", "\t0-7\t1\t\tN/A\t7\t8"), "line 3: 5 cells after the links under 3"),
    (_matrix({}).replace("GPU NUMA ID", "GPU2"), "header's columns are not devices then affinities"),
    ("\tGPU0\tGPU1\tCPU Affinity\n", "the 'topo -m' header has no GPU rows under it"),
    (_matrix({}).replace("GPU1\tNV12\t X \t0-7\t1\t\tN/A", "GPU2\tNV12\t X \t0-7\t1\t\tN/A"),
     "line 3, column GPU1: 'X' is not a link"),
])
def test_a_wrong_matrix_is_refused_naming_line_and_column(text, says):
    with pytest.raises(topo.TopoError, match=says.replace("(", r"\(").replace(")", r"\)")) as caught:
        topo.parse(text, source="topo.txt")
    assert str(caught.value).startswith("topo.txt: ") and "\n" not in str(caught.value)


def test_ingest_reads_a_terminal_copy_into_the_store(tmp_path, capsys):
    """End to end: the node's devices first, then the pasted matrix gives their links and NUMA node."""
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "devices.csv").write_text("node,gpu_uuid,gpu_index,gpu_model\n"
                                        "slurm-1,GPU-a,0,NVIDIA A100-SXM4-80GB\nslurm-1,GPU-b,1,NVIDIA A100-SXM4-80GB\n")
    db = tmp_path / "s.duckdb"
    assert main(["ingest", "--from", str(bundle), "--db", str(db)]) == 0
    paste = TOPO / "paste-dask-cuda-1358-2gpu-nv12-spaces.txt"
    assert main(["ingest", "--from", str(paste), "--node", "slurm-1", "--db", str(db)]) == 0
    from gpuwatch import store

    con = store.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT gpu_uuid, numa_node FROM devices ORDER BY 1").fetchall() == [("GPU-a", 3), ("GPU-b", 3)]
        assert con.execute("SELECT gpu_uuid, peer_gpu_uuid, link, nvlinks FROM topology ORDER BY 1").fetchall() == [
            ("GPU-a", "GPU-b", "NV", 12), ("GPU-b", "GPU-a", "NV", 12)]
    finally:
        con.close()
