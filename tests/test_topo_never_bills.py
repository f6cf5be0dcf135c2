"""A topology capture describes GPUs; it never creates one (issue 31 item 9).

``ingest --from topo.txt --node <typo>`` used to turn the capture's ``nvidia-smi -L`` listing into new,
priced GPUs (sample_data's fleet $1,209.60 a day -> $1,996.80). Now an unknown node is an error naming
the closest stored ones, unless ``--new-node`` asks for it, and then only the links are stored.
On the real CLI and DuckDB stores, with the capture-style fixture tests/fixtures/topo/dgx-h100-capture.txt.
"""

from __future__ import annotations

from gpuwatch import store
from gpuwatch.cli import main
from gpuwatch.ingest import topo
from tests.conftest import FIXTURES

CAPTURE = FIXTURES / "topo" / "dgx-h100-capture.txt"
MODEL = "NVIDIA H100 80GB HBM3"


def _store(tmp_path, capsys):
    """dgx-node-1's eight H100s (the capture's own UUIDs), an hour of samples, priced at $4.10."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    listed = topo.listing(CAPTURE.read_text())
    (bundle / "devices.csv").write_text("node,gpu_uuid,gpu_index,gpu_model\n" + "".join(
        f"dgx-node-1,{g.uuid},{g.index},{g.model}\n" for g in listed.values()))
    (bundle / "samples.csv").write_text("ts,node,gpu_uuid,gpu_util\n" + "".join(
        f"2026-11-09T00:{m:02d}:00Z,dgx-node-1,{g.uuid},0.5\n" for m in range(0, 60, 10) for g in listed.values()))
    (bundle / "prices.csv").write_text(f"gpu_model,usd_per_gpu_hour\n{MODEL},4.1\n")
    db = tmp_path / "s.duckdb"
    assert main(["ingest", "--from", str(bundle), "--db", str(db)]) == 0
    capsys.readouterr()
    return db


def _billed(db) -> tuple:
    con = store.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT count(*), sum(usd_per_gpu_hour), list(DISTINCT node) FROM stg_gpus").fetchone()
    finally:
        con.close()


def _topology(db) -> list:
    con = store.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT node, count(*) FROM topology GROUP BY node").fetchall()
    finally:
        con.close()


def test_a_typo_in_node_is_refused_naming_the_closest_and_bills_nothing(tmp_path, capsys):
    db = _store(tmp_path, capsys)
    before = _billed(db)
    assert before[0] == 8 and round(before[1], 2) == 32.8 and before[2] == ["dgx-node-1"]
    assert main(["ingest", "--from", str(CAPTURE), "--node", "dgx-nod-1", "--db", str(db)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--node dgx-nod-1: no such node in the store" in err[0]
    assert "closest: dgx-node-1" in err[0] and "--new-node" in err[0]
    assert _billed(db) == before and _topology(db) == []


def test_new_node_keeps_the_links_alone_and_creates_no_gpu(tmp_path, capsys):
    db = _store(tmp_path, capsys)
    before = _billed(db)
    other = tmp_path / "other.txt"  # the same capture, from a machine whose GPUs the store does not hold
    other.write_text(CAPTURE.read_text().replace("GPU-6f1c2d3e-0000", "GPU-0badc0de-0000"))
    assert main(["ingest", "--from", str(other), "--node", "spare-9", "--new-node", "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert "NUMA nodes of 8 GPU(s) were not kept" in captured.err
    assert _billed(db) == before  # same GPUs, same price: nothing billed for the capture
    assert _topology(db) == [("spare-9", 56)]


def test_new_node_does_not_move_another_nodes_gpus(tmp_path, capsys):
    """--new-node with a capture of a stored node's GPUs (a typo again): refused, nothing stored."""
    db = _store(tmp_path, capsys)
    before = _billed(db)
    assert main(["ingest", "--from", str(CAPTURE), "--node", "spare-9", "--new-node", "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert "is a GPU of node 'dgx-node-1', not of 'spare-9'" in err
    assert _billed(db) == before and _topology(db) == []


def test_the_right_node_gets_its_links_and_numa_on_its_own_gpus(tmp_path, capsys):
    db = _store(tmp_path, capsys)
    before = _billed(db)
    assert main(["ingest", "--from", str(CAPTURE), "--node", "dgx-node-1", "--db", str(db)]) == 0
    assert _billed(db) == before and _topology(db) == [("dgx-node-1", 56)]
    con = store.connect(str(db), read_only=True)
    try:
        numa = [n for (n,) in con.execute("SELECT numa_node FROM devices ORDER BY gpu_index").fetchall()]
    finally:
        con.close()
    assert numa == [0] * 4 + [1] * 4


def test_no_store_means_no_such_node(tmp_path, capsys):
    db = tmp_path / "new.duckdb"
    assert main(["ingest", "--from", str(CAPTURE), "--node", "dgx-node-1", "--db", str(db)]) == 1
    assert "no such node" in capsys.readouterr().err and not db.exists()
    assert main(["ingest", "--from", str(CAPTURE), "--node", "dgx-node-1", "--new-node", "--db", str(db)]) == 0
    assert _billed(db)[0] == 0 and _topology(db) == [("dgx-node-1", 56)]


def test_new_node_without_node_is_a_usage_error(tmp_path, capsys):
    assert main(["ingest", "--prices", "list", "--new-node", "--db", str(tmp_path / "s.duckdb")]) == 2
    assert "--new-node: only with --node" in capsys.readouterr().err
