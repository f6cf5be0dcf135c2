"""A bundle's topology rows are checked for what makes them a link (issue 31 item 14): a GPU linked to
itself, a link to a GPU of another node, an NVLink count on a PCIe path (``SYS`` with nvlinks 12) or
an NV link of 0 NVLinks were accepted; each is now one error naming file, column and row, and the
store is left as it was. On real DuckDB stores, through the real CLI.
"""

from __future__ import annotations

import pytest

from gpuwatch import cli, store

DEVICES = ("node,gpu_uuid,gpu_index,gpu_model\n"
           "n1,GPU-a,0,NVIDIA H100 80GB HBM3\nn1,GPU-b,1,NVIDIA H100 80GB HBM3\nn2,GPU-c,0,NVIDIA H100 80GB HBM3\n")


def _bundle(tmp_path, topology: str):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "devices.csv").write_text(DEVICES)
    (out / "topology.csv").write_text("node,gpu_uuid,peer_gpu_uuid,link,nvlinks\n" + topology)
    return out


def _contents(db) -> tuple:
    con = store.connect(str(db), read_only=True)
    try:
        return tuple(con.execute(f"SELECT count(*), sum(hash(t)) FROM {t} t").fetchone()
                     for t in ("devices", "topology", "ingest_log"))
    finally:
        con.close()


@pytest.mark.parametrize(("rows", "says"), [
    ("n1,GPU-a,GPU-b,NV,18\nn1,GPU-a,GPU-a,NV,18\n",
     "column 'peer_gpu_uuid', row 2: 'GPU-a' is the GPU itself"),
    ("n1,GPU-a,GPU-c,NV,18\n",
     "column 'peer_gpu_uuid', row 1: 'GPU-c' is a GPU of node 'n2', not of 'n1': a link joins two GPUs of one node"),
    ("n2,GPU-a,GPU-c,PIX,\n",
     "column 'gpu_uuid', row 1: 'GPU-a' is a GPU of node 'n1', not of 'n2'"),
    ("n1,GPU-a,GPU-b,SYS,12\n", "column 'nvlinks', row 1:"),
    ("n1,GPU-a,GPU-b,NV,0\n", "column 'nvlinks', row 1:"),
])
def test_a_topology_row_that_is_no_link_is_refused(tmp_path, capsys, rows, says):
    db = tmp_path / "s.duckdb"
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "devices.csv").write_text(DEVICES)
    assert cli.main(["ingest", "--from", str(seed), "--db", str(db)]) == 0
    before = _contents(db)
    capsys.readouterr()
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, rows)), "--db", str(db)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "topology.csv" in err[0] and says in err[0], err
    assert _contents(db) == before


def test_good_links_still_load_and_unknown_width_and_unknown_gpus_are_fine(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    rows = "n1,GPU-a,GPU-b,NV,\nn1,GPU-b,GPU-a,NV,18\nn3,GPU-x,GPU-y,SYS,\nn3,GPU-x,GPU-z,PHB,0\n"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, rows)), "--db", str(db)]) == 0
    con = store.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM topology").fetchone() == (4,)
        assert con.execute("SELECT link, nvlinks FROM stg_topology WHERE gpu_uuid = 'GPU-a'").fetchall() == [("NV", 18)]
    finally:
        con.close()
