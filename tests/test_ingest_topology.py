"""Topology ingest: gpuwatch's info series and saved ``nvidia-smi topo -m`` output into the store.

- Series -> frames (gpuwatch.ingest.promframes_topology through promfile.parse): ``gpuwatch_gpu_link_info``
  -> ``topology`` rows in both node-label generations (``Hostname``/``hostname``, ``UUID``/``uuid``);
  ``gpuwatch_gpu_numa_info`` / ``gpuwatch_gpu_fabric_info`` -> devices.numa_node / nvlink_clique on every
  row of the GPU; an all-zero cluster UUID or an unfinished fabric is no clique; a link label outside
  NV<n>/PIX/PXB/PHB/NODE/SYS is a one-line error naming the series and the label.
- A saved /metrics file ingested end to end (``gpuwatch ingest --from FILE.prom``): stg_topology holds both
  directions of each pair, stg_devices the NUMA node and clique.
- ``gpuwatch ingest --from topo.txt --node NAME``: the documented multi-GPU layouts (tests/fixtures/topo,
  each saying it is constructed, not captured) and the real single-GPU captures; GPU UUIDs from the
  file's ``nvidia-smi -L`` listing, else from the node's devices already in the store (whose other
  columns are kept). Bad input (no --node, no matrix, no UUIDs, --node without a file) is one line on
  stderr, exit 2 or 1, and the store is left as it was.
- A REAL Prometheus (Debian's package) backfilled with the info series, read by prometheus.fetch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuwatch import store, topology
from gpuwatch.cli import main
from gpuwatch.ingest import promfile, promframes_topology, topo
from gpuwatch.model import BUNDLE_COLUMNS
from tests.conftest import FIXTURES, SHARED_DATA

T0 = 1_794_182_400.0  # 2026-11-09T00:00:00Z
TOPO = FIXTURES / "topo"
CAPTURES = SHARED_DATA / "nvidia_smi_captures"
MODEL = "NVIDIA H100 80GB HBM3"


def _labels(d: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _gpu(node: str, uuid: str, index: int, host: str = "hostname", uuid_label: str = "UUID") -> str:
    return (f"DCGM_FI_DEV_GPU_UTIL{_labels({'gpu': index, uuid_label: uuid, 'modelName': MODEL, host: node})} 7\n"
            f"DCGM_FI_DEV_FB_FREE{_labels({'gpu': index, uuid_label: uuid, 'modelName': MODEL, host: node})} 81559\n"
            f"DCGM_FI_DEV_FB_USED{_labels({'gpu': index, uuid_label: uuid, 'modelName': MODEL, host: node})} 0\n")


def _info(name: str, labels: dict, value: float = 1) -> str:
    return f"{name}{_labels(labels)} {value}\n"


def _link(node, gpu, peer, link, nvlinks="", host="hostname", uuid_label="UUID", peer_label="peer_UUID"):
    return _info(promframes_topology.LINK, {"gpu": gpu[0], uuid_label: gpu[1], "peer_gpu": peer[0], peer_label: peer[1],
                                            "link": link, "nvlinks": nvlinks, host: node})


def _page() -> str:
    """n1 (gpuwatch exporter, ``hostname``): two NVSwitch GPUs and a PCIe one, NUMA and a finished
    multi-node clique; n2 (``Hostname``/``uuid``, the old generation): a PIX pair in one direction
    only, NUMA node known for one GPU, a zero cluster UUID and an unfinished fabric."""
    a, b, c = (0, "GPU-a"), (1, "GPU-b"), (2, "GPU-c")
    x, y = (0, "GPU-x"), (1, "GPU-y")
    text = _gpu("n1", "GPU-a", 0) + _gpu("n1", "GPU-b", 1) + _gpu("n1", "GPU-c", 2)
    text += _gpu("n2", "GPU-x", 0, "Hostname", "uuid") + _gpu("n2", "GPU-y", 1, "Hostname", "uuid")
    for g, p, link, n in ((a, b, "NV18", "18"), (b, a, "NV18", "18"), (a, c, "SYS", ""), (c, a, "SYS", ""),
                          (b, c, "NODE", ""), (c, b, "NODE", "")):
        text += _link("n1", g, p, link, n)
    text += _link("n2", x, y, "PIX", host="Hostname", uuid_label="uuid", peer_label="peer_uuid")
    for gpu, numa in ((a, 0), (b, 0), (c, 1)):
        text += _info(promframes_topology.NUMA, {"gpu": gpu[0], "UUID": gpu[1], "numa_node": numa,
                                                 "cpu_affinity": "0-55,112-167" if numa == 0 else "56-111", "hostname": "n1"})
        text += _info(promframes_topology.FABRIC, {"gpu": gpu[0], "UUID": gpu[1], "cluster_uuid": "4a0b7e1c-77aa-4d3e-9f10-0c2b9a51d6e2",
                                                   "clique_id": "32766", "state": "completed", "hostname": "n1"})
    text += _info(promframes_topology.NUMA, {"gpu": 1, "uuid": "GPU-y", "numa_node": 1, "Hostname": "n2"})
    text += _info(promframes_topology.FABRIC, {"gpu": 0, "uuid": "GPU-x", "cluster_uuid": "00000000-0000-0000-0000-000000000000",
                                               "clique_id": "0", "state": "completed", "Hostname": "n2"})
    text += _info(promframes_topology.FABRIC, {"gpu": 1, "uuid": "GPU-y", "cluster_uuid": "9c1d", "clique_id": "4",
                                               "state": "in_progress", "Hostname": "n2"})
    return text


CLIQUE = "4a0b7e1c-77aa-4d3e-9f10-0c2b9a51d6e2/32766"


# --- series -> frames ------------------------------------------------------------------------------

def test_link_series_become_topology_rows_in_both_label_generations():
    frames = promfile.parse(_page(), at=T0)
    got = [tuple(None if pd.isna(v) else v for v in row) for row in frames["topology"].itertuples(index=False)]
    assert got == [("n1", "GPU-a", "GPU-b", "NV", 18), ("n1", "GPU-a", "GPU-c", "SYS", None),
                   ("n1", "GPU-b", "GPU-a", "NV", 18), ("n1", "GPU-b", "GPU-c", "NODE", None),
                   ("n1", "GPU-c", "GPU-a", "SYS", None), ("n1", "GPU-c", "GPU-b", "NODE", None),
                   ("n2", "GPU-x", "GPU-y", "PIX", None)]
    assert list(frames["topology"].columns) == list(BUNDLE_COLUMNS["topology"])


def test_numa_and_clique_fill_the_devices_and_unknown_stays_null():
    devices = promfile.parse(_page(), at=T0)["devices"].set_index("gpu_uuid")
    assert devices["numa_node"].astype(object).where(devices["numa_node"].notna(), None).to_dict() == {
        "GPU-a": 0, "GPU-b": 0, "GPU-c": 1, "GPU-x": None, "GPU-y": 1}
    # n2: a zero cluster UUID is no multi-node domain, an unfinished fabric no clique yet
    assert devices["nvlink_clique"].to_dict() == {"GPU-a": CLIQUE, "GPU-b": CLIQUE, "GPU-c": CLIQUE,
                                                  "GPU-x": None, "GPU-y": None}
    assert devices.loc["GPU-a", "fb_total_bytes"] == 81559 << 20  # the rest of the row is untouched


def test_topology_reaches_every_row_of_a_mig_gpu():
    text = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-m",GPU_I_PROFILE="3g.40gb",GPU_I_ID="{gi}",'
                   f'modelName="{MODEL}",hostname="n3"}} 5\n' for gi in (1, 2))
    text += _info(promframes_topology.NUMA, {"gpu": 0, "UUID": "GPU-m", "numa_node": 1, "hostname": "n3"})
    devices = promfile.parse(text, at=T0)["devices"]
    assert len(devices) == 3 and devices["numa_node"].tolist() == [1, 1, 1]  # parent and both instances


def test_the_latest_info_wins_and_disagreeing_info_is_unknown():
    ms = int(T0 * 1000)
    text = _gpu("n1", "GPU-a", 0).replace(" 7\n", f" 7 {ms}\n").replace(" 81559\n", f" 81559 {ms}\n").replace(" 0\n", f" 0 {ms}\n")
    numa = promframes_topology.NUMA
    text += f'{numa}{{UUID="GPU-a",numa_node="0",hostname="n1"}} 1 {ms}\n{numa}{{UUID="GPU-a",numa_node="1",hostname="n1"}} 1 {ms + 60_000}\n'
    assert promfile.parse(text, at=T0)["devices"]["numa_node"].tolist() == [1]
    text += f'{numa}{{UUID="GPU-a",numa_node="0",hostname="n1",instance="other"}} 1 {ms + 60_000}\n'
    assert promfile.parse(text, at=T0)["devices"]["numa_node"].isna().all()  # two answers at once: unknown
    gone = text.replace(f'numa_node="1",hostname="n1"}} 1 {ms + 60_000}', f'numa_node="1",hostname="n1"}} 0 {ms + 60_000}')
    assert promfile.parse(gone, at=T0)["devices"]["numa_node"].tolist() == [0]  # a 0 info series holds nothing


def test_links_of_both_directions_keep_the_better_one_when_they_disagree():
    text = _gpu("n1", "GPU-a", 0) + _link("n1", (0, "GPU-a"), (1, "GPU-b"), "SYS")
    text += _link("n1", (0, "GPU-a"), (1, "GPU-b"), "NV4", "4").replace("}", ',instance="x"}', 1)
    assert promfile.parse(text, at=T0)["topology"][["link", "nvlinks"]].values.tolist() == [["NV", 4]]


@pytest.mark.parametrize(("label", "nvlinks", "expected"), [
    ("NV18", "18", ("NV", 18)), ("NV4", "", ("NV", 4)), ("NV", "12", ("NV", 12)), ("NV", "", ("NV", None)),
    ("PIX", "", ("PIX", None)), ("PXB", "", ("PXB", None)), ("PHB", "", ("PHB", None)),
    ("NODE", "", ("NODE", None)), ("SYS", "", ("SYS", None))])
def test_every_link_label_the_exporter_serves(label, nvlinks, expected):
    text = _gpu("n1", "GPU-a", 0) + _link("n1", (0, "GPU-a"), (1, "GPU-b"), label, nvlinks)
    row = promfile.parse(text, at=T0)["topology"].iloc[0]
    assert (row["link"], None if pd.isna(row["nvlinks"]) else int(row["nvlinks"])) == expected


@pytest.mark.parametrize("label", ["NVL", "nv18", "SOC", "X", ""])
def test_a_link_label_that_is_no_link_is_an_error_naming_series_and_label(label):
    text = _gpu("n1", "GPU-a", 0) + _link("n1", (0, "GPU-a"), (1, "GPU-b"), label)
    with pytest.raises(promfile.PromFileError) as caught:
        promfile.parse(text, at=T0, source="page.prom")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("page.prom: gpuwatch_gpu_link_info{")
    assert f"link={label!r} is not a GPU link" in message and 'peer_UUID="GPU-b"' in message


def test_a_bad_numa_label_is_an_error_naming_it():
    text = _gpu("n1", "GPU-a", 0) + _info(promframes_topology.NUMA, {"UUID": "GPU-a", "numa_node": "0-1", "hostname": "n1"})
    with pytest.raises(promfile.PromFileError, match=r"gpuwatch_gpu_numa_info\{.*numa_node='0-1' is not a NUMA node"):
        promfile.parse(text, at=T0)


def test_a_page_with_only_topology_series_is_accepted():
    frames = promfile.parse(_link("n1", (0, "GPU-a"), (1, "GPU-b"), "NV18", "18"), at=T0)
    assert len(frames["topology"]) == 1 and frames["devices"].empty


# --- saved /metrics and topo -m into a store --------------------------------------------------------

def _cli(capsys, argv: list[str]) -> tuple[int, list[str]]:
    code = main(["ingest", *argv])
    return code, capsys.readouterr().err.strip().splitlines()


def _contents(db: Path) -> dict:
    """Every table's rows, for 'the store is left as it was'."""
    con = store.connect(str(db))
    try:
        return {t: sorted(map(str, con.execute(f"SELECT * FROM {t}").fetchall())) for t in ("devices", "topology", "pod_status", "samples")}
    finally:
        con.close()


def _query(db: Path, sql: str) -> list[tuple]:
    con = store.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_saved_metrics_file_end_to_end(tmp_path, capsys):
    page, db = tmp_path / "n.prom", tmp_path / "s.duckdb"
    page.write_text(_page())
    assert _cli(capsys, ["--db", str(db), "--from", str(page), "--at", "2026-11-09T00:00:00Z"]) == (0, [])
    links = _query(db, "SELECT node, gpu_uuid, peer_gpu_uuid, link, nvlinks, link_rank FROM stg_topology ORDER BY ALL")
    assert links == [("n1", "GPU-a", "GPU-b", "NV", 18, 0), ("n1", "GPU-a", "GPU-c", "SYS", None, 5),
                     ("n1", "GPU-b", "GPU-a", "NV", 18, 0), ("n1", "GPU-b", "GPU-c", "NODE", None, 4),
                     ("n1", "GPU-c", "GPU-a", "SYS", None, 5), ("n1", "GPU-c", "GPU-b", "NODE", None, 4),
                     ("n2", "GPU-x", "GPU-y", "PIX", None, 1), ("n2", "GPU-y", "GPU-x", "PIX", None, 1)]
    devices = _query(db, "SELECT gpu_uuid, numa_node, nvlink_clique FROM stg_devices ORDER BY gpu_uuid")
    assert devices == [("GPU-a", 0, CLIQUE), ("GPU-b", 0, CLIQUE), ("GPU-c", 1, CLIQUE), ("GPU-x", None, None),
                       ("GPU-y", 1, None)]


def test_bad_link_label_in_a_metrics_file_exits_1_and_leaves_the_store(tmp_path, capsys):
    good, bad, db = tmp_path / "good.prom", tmp_path / "bad.prom", tmp_path / "s.duckdb"
    good.write_text(_page())
    bad.write_text(_page().replace('link="PIX"', 'link="PCI"'))
    assert _cli(capsys, ["--db", str(db), "--from", str(good)])[0] == 0
    before = _contents(db)
    code, err = _cli(capsys, ["--db", str(db), "--from", str(bad)])
    assert code == 1 and len(err) == 1 and "link='PCI' is not a GPU link" in err[0] and str(bad) in err[0]
    assert _contents(db) == before


def _layout(db: Path, node: str) -> topology.Layout:
    gpus = [u for (u,) in _query(db, f"SELECT gpu_uuid FROM stg_devices WHERE node = '{node}' AND mig_gi_id IS NULL ORDER BY gpu_index")]
    links = _query(db, f"SELECT gpu_uuid, peer_gpu_uuid, link, nvlinks FROM stg_topology WHERE node = '{node}'")
    numa = dict(_query(db, f"SELECT gpu_uuid, numa_node FROM stg_devices WHERE node = '{node}'"))
    return topology.Layout.build(gpus, links, numa)


def _devices_of(tmp_path: Path, node: str, listed: dict) -> Path:
    """A bundle with the node's devices as its own data would bring them (the listing's GPUs)."""
    out = tmp_path / f"devices-{node}"
    out.mkdir()
    (out / "devices.csv").write_text("node,gpu_uuid,gpu_index,gpu_model\n" + "".join(
        f"{node},{g.uuid},{g.index},{g.model}\n" for g in listed.values()))
    return out


def test_capture_with_listing_loads_links_and_numa(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    listed = topo.listing((TOPO / "dgx-h100-capture.txt").read_text())
    assert _cli(capsys, ["--db", str(db), "--from", str(_devices_of(tmp_path, "dgx-1", listed))]) == (0, [])
    assert _cli(capsys, ["--db", str(db), "--from", str(TOPO / "dgx-h100-capture.txt"), "--node", "dgx-1"]) == (0, [])
    rows = _query(db, "SELECT gpu_uuid, peer_gpu_uuid, link, nvlinks FROM topology WHERE node = 'dgx-1'")
    assert len(rows) == 56 and {(r[2], r[3]) for r in rows} == {("NV", 18)}
    assert {r[0] for r in rows} == {g.uuid for g in listed.values()}
    devices = _query(db, "SELECT gpu_index, gpu_uuid, gpu_model, numa_node FROM devices ORDER BY gpu_index")
    assert devices == [(i, listed[i].uuid, MODEL, 0 if i < 4 else 1) for i in range(8)]
    layout = _layout(db, "dgx-1")
    full = (1 << 8) - 1
    assert layout.largest_block(full).bit_count() == 8  # every pair NVLink: one 8-GPU block
    assert layout.largest_block(full, same_numa=True).bit_count() == 4


@pytest.mark.parametrize(("fixture", "links", "numa", "nvlink_block", "pix_block"), [
    ("dgx-a100-8gpu.txt", {("NV", 12)}, [3, 3, 1, 1, 7, 7, 5, 5], 8, 8),
    ("pcie-l40s-8gpu-pxb.txt", {("PIX", None), ("PXB", None), ("NODE", None), ("SYS", None)}, [0] * 4 + [1] * 4, 1, 2),
    ("pcie-l40s-8gpu.txt", {("PIX", None), ("NODE", None), ("SYS", None)}, [0] * 4 + [1] * 4, 1, 2),
    ("pcie-a6000-4gpu-nvbridge.txt", {("NV", 4), ("PHB", None)}, [0] * 4, 2, 2),
    ("hgx-h100-8gpu.txt", {("NV", 18)}, [0] * 4 + [1] * 4, 8, 8),
])
def test_documented_layouts_through_the_store_by_stored_uuids(tmp_path, capsys, fixture, links, numa, nvlink_block, pix_block):
    """No listing in these files: UUIDs come from the node's devices loaded before (a /metrics page),
    whose other columns (model, memory) the topo load keeps."""
    db, page = tmp_path / "s.duckdb", tmp_path / "node.prom"
    assert fixture.startswith(("dgx", "hgx", "pcie")) and "NOT a capture" in (TOPO / fixture).read_text().splitlines()[0]
    gpus = len(numa)
    page.write_text("".join(_gpu("box", f"GPU-{i}", i) for i in range(gpus)))
    assert _cli(capsys, ["--db", str(db), "--from", str(page)])[0] == 0
    assert _cli(capsys, ["--db", str(db), "--from", str(TOPO / fixture), "--node", "box"]) == (0, [])
    assert {(r[0], r[1]) for r in _query(db, "SELECT link, nvlinks FROM topology")} == links
    assert len(_query(db, "SELECT * FROM topology")) == gpus * (gpus - 1)
    assert _query(db, "SELECT numa_node, gpu_model, fb_total_bytes FROM devices ORDER BY gpu_index") == [
        (n, MODEL, 81559 << 20) for n in numa]
    layout, full = _layout(db, "box"), (1 << gpus) - 1
    assert layout.largest_block(full).bit_count() == nvlink_block
    assert layout.largest_block(full, max_rank=topology.rank("PIX")).bit_count() == pix_block


@pytest.mark.parametrize(("name", "numa"), [
    ("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", 0), ("linux-x86_64__nvidia-l40s__595.80.txt", 0),
    ("linux-x86_64__nvidia-h200-mig__590.48.01.txt", 0),
    ("windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt", None)])
def test_real_single_gpu_captures(tmp_path, capsys, name, numa):
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"real capture not present: {path}")
    db = tmp_path / "s.duckdb"
    listing = topo.listing(path.read_text(errors="replace"))
    assert _cli(capsys, ["--db", str(db), "--from", str(_devices_of(tmp_path, "real", listing))]) == (0, [])
    assert _cli(capsys, ["--db", str(db), "--from", str(path), "--node", "real"]) == (0, [])
    listed = listing[0]
    assert _query(db, "SELECT count(*) FROM topology") == [(0,)]  # one GPU: no pair
    expected = [("real", listed.uuid, 0, listed.model, numa)]  # unknown NUMA stays NULL
    assert _query(db, "SELECT node, gpu_uuid, gpu_index, gpu_model, numa_node FROM devices") == expected


def test_cluster_qualified_node_finds_its_stored_devices(tmp_path, capsys):
    db, page = tmp_path / "s.duckdb", tmp_path / "node.prom"
    page.write_text("".join(_gpu("box", f"GPU-{i}", i) for i in range(4)))
    assert _cli(capsys, ["--db", str(db), "--from", str(page), "--cluster", "eu"])[0] == 0
    args = ["--db", str(db), "--from", str(TOPO / "pcie-a6000-4gpu-nvbridge.txt"), "--node", "box", "--cluster", "eu"]
    assert _cli(capsys, args) == (0, [])
    assert _query(db, "SELECT DISTINCT node FROM topology UNION ALL SELECT DISTINCT node FROM devices") == [("eu/box",)] * 2


def test_a_saved_metrics_txt_without_node_still_loads(tmp_path, capsys):
    page, db = tmp_path / "scrape.txt", tmp_path / "s.duckdb"
    page.write_text(_page())
    assert _cli(capsys, ["--db", str(db), "--from", str(page)]) == (0, [])
    assert _query(db, "SELECT count(*) FROM topology") == [(7,)]


# --- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "extra", "code", "says"), [
    (lambda d: TOPO / "hgx-h100-8gpu.txt", [], 2, "--node: required with --from"),
    (lambda d: TOPO / "dgx-h100-capture.txt", [], 2, "--node: required with --from"),
    (lambda d: CAPTURES / "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt", ["--node", "n"], 1,
     "no 'nvidia-smi topo -m' matrix"),
    (lambda d: TOPO / "hgx-h100-8gpu.txt", ["--node", "unknown-node"], 1,
     "--node unknown-node: no such node in the store (2 node(s) with GPUs"),
    (lambda d: TOPO / "hgx-h100-8gpu.txt", ["--node", "unknown-node", "--new-node"], 1,
     "GPU0 has no UUID: no 'nvidia-smi -L' line for it in the file and no device of node unknown-node"),
    (lambda d: TOPO / "dgx-h100-capture.txt", ["--node", "n1"], 1,
     "GPU 0 is GPU-6f1c2d3e-0000-4000-8000-000000000000 in the file's 'nvidia-smi -L' listing but"),
    (lambda d: d, ["--node", "n"], 2, "--node: only with --from FILE"),
    (lambda d: TOPO / "dgx-h100-capture.txt", ["--node", "a b"], 2, "--node: 'a b' is not a node name"),
    (lambda d: TOPO / "dgx-h100-capture.txt", ["--node", "n", "--link"], 2, "--node: only with --from FILE"),
])
def test_bad_input_is_one_line_and_leaves_the_store(tmp_path, capsys, make, extra, code, says):
    db, page = tmp_path / "s.duckdb", tmp_path / "node.prom"
    page.write_text(_page())
    assert _cli(capsys, ["--db", str(db), "--from", str(page)])[0] == 0  # a store with other nodes' data
    before = _contents(db)
    source = make(tmp_path)
    if not Path(source).exists():
        pytest.skip(f"input not present: {source}")
    got, err = _cli(capsys, ["--db", str(db), "--from", str(source), *extra])
    assert got == code and len(err) == 1 and says in err[0] and "Traceback" not in err[0], err
    assert _contents(db) == before


def test_no_listing_and_no_store_creates_no_store(tmp_path, capsys):
    db = tmp_path / "new.duckdb"
    code, err = _cli(capsys, ["--db", str(db), "--from", str(TOPO / "hgx-h100-8gpu.txt"), "--node", "n"])
    assert code == 1 and "load the node's devices first" in err[0] and not db.exists()
    code, err = _cli(capsys, ["--db", str(db), "--from", str(TOPO / "hgx-h100-8gpu.txt")])
    assert code == 2 and not db.exists()


def test_node_without_from_is_a_usage_error(tmp_path, capsys):
    code, err = _cli(capsys, ["--db", str(tmp_path / "s.duckdb"), "--prices", "list", "--node", "n"])
    assert code == 2 and "--node: only with --from FILE" in err[0]


def test_a_listing_that_contradicts_itself_is_an_error():
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n"
    with pytest.raises(topo.TopoError, match=r"cap.txt: line 2: GPU 0 is listed as GPU-b and as GPU-a"):
        topo.listing(text, source="cap.txt")


def test_mig_lines_of_a_listing_are_not_gpus():
    path = CAPTURES / "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
    if not path.exists():
        pytest.skip(f"real capture not present: {path}")
    listed = topo.listing(path.read_text(errors="replace"))
    assert list(listed) == [0] and listed[0].uuid.startswith("GPU-") and listed[0].model == MODEL


# --- a real Prometheus -----------------------------------------------------------------------------

@pytest.mark.slow
def test_real_prometheus_serves_the_info_series(tmp_path):
    from gpuwatch.ingest import openmetrics, prometheus
    from tests.support.prometheus import backfill, running

    step, grid = 60.0, T0 + 60.0 * np.arange(10)
    ones = np.ones(len(grid))
    families: openmetrics.Families = {"DCGM_FI_DEV_GPU_UTIL": [], promframes_topology.LINK: [],
                                      promframes_topology.NUMA: [], promframes_topology.FABRIC: []}
    nodes = {"h100-a": ("hostname", "UUID", "peer_UUID", "NV18", "18"), "l40s-b": ("Hostname", "UUID", "peer_UUID", "SYS", "")}
    for node, (host, uuid, peer, link, nvlinks) in nodes.items():
        for i in range(2):
            me, other = f"GPU-{node}-{i}", f"GPU-{node}-{1 - i}"
            families["DCGM_FI_DEV_GPU_UTIL"].append(({"gpu": str(i), uuid: me, "modelName": MODEL, host: node}, grid, ones * 50))
            families[promframes_topology.LINK].append(({"gpu": str(i), uuid: me, "peer_gpu": str(1 - i), peer: other,
                                                        "link": link, "nvlinks": nvlinks, host: node}, grid, ones))
            families[promframes_topology.NUMA].append(({"gpu": str(i), uuid: me, "numa_node": str(i), host: node},
                                                       grid[:5], ones[:5]))  # static: written once, read as the last value
        if node == "h100-a":
            families[promframes_topology.FABRIC] += [({"gpu": str(i), "UUID": f"GPU-{node}-{i}", "cluster_uuid": "c0ffee00-1",
                                                       "clique_id": "7", "state": "completed", host: node}, grid, ones) for i in range(2)]
    path = tmp_path / "topology.om"
    openmetrics.write(path, families)
    backfill(path, tmp_path / "tsdb")
    with running(tmp_path, tsdb=tmp_path / "tsdb") as server:
        frames = prometheus.fetch(server.url, start=T0, end=T0 + len(grid) * step, step=step)
    got = sorted(tuple(None if pd.isna(v) else v for v in r) for r in frames["topology"].itertuples(index=False))
    assert got == [("h100-a", "GPU-h100-a-0", "GPU-h100-a-1", "NV", 18), ("h100-a", "GPU-h100-a-1", "GPU-h100-a-0", "NV", 18),
                   ("l40s-b", "GPU-l40s-b-0", "GPU-l40s-b-1", "SYS", None), ("l40s-b", "GPU-l40s-b-1", "GPU-l40s-b-0", "SYS", None)]
    devices = frames["devices"].set_index("gpu_uuid")
    assert devices["numa_node"].tolist() == [0, 1, 0, 1]
    assert devices["nvlink_clique"].tolist() == ["c0ffee00-1/7"] * 2 + [None] * 2

    con = store.connect(None)
    store.load(con, frames, source="prometheus")
    assert con.execute("SELECT node, count(*), min(link_rank), max(link_rank) FROM stg_topology GROUP BY node ORDER BY node").fetchall() == [
        ("h100-a", 2, 0, 0), ("l40s-b", 2, 5, 5)]
    assert con.execute("SELECT gpu_uuid, numa_node, nvlink_clique FROM stg_devices ORDER BY gpu_uuid").fetchall() == [
        ("GPU-h100-a-0", 0, "c0ffee00-1/7"), ("GPU-h100-a-1", 1, "c0ffee00-1/7"),
        ("GPU-l40s-b-0", 0, None), ("GPU-l40s-b-1", 1, None)]
