"""The tests' shared sample_data store (tests/support/bundles.py): each caller gets its own copy of a
template loaded once per test process, and that copy holds exactly what loading sample_data gives.

The template only saves time: a test reading a copy must see what a fresh load would have shown it,
and a test writing to its copy must change nobody else's.
"""

from __future__ import annotations

import shutil

import pandas as pd

from gpuwatch import store
from tests.support import bundles, kill


def test_a_copy_holds_what_a_fresh_load_gives(tmp_path):
    """Every table's rows and the catalog, as a reader opening the store sees them (the temporary views a
    load leaves on its own connection are that session's, not the store's)."""
    fresh = store.connect(str(tmp_path / "fresh.duckdb"))
    store.load_bundle(fresh, bundles.SAMPLE_DATA)
    fresh.close()
    copy, params = bundles.loaded()
    assert kill.state(copy) == kill.fingerprint(tmp_path / "fresh.duckdb")
    assert params == bundles.loaded()[1]
    copy.close()


def test_copies_are_private_and_written_files_are_fresh(tmp_path):
    one, _ = bundles.loaded()
    two, _ = bundles.loaded()
    pods = two.execute("SELECT count(*) FROM pods").fetchone()[0]
    one.execute("DELETE FROM pods")
    assert two.execute("SELECT count(*) FROM pods").fetchone()[0] == pods > 0
    one.close()
    two.close()
    db = bundles.sample_store(tmp_path / "s.duckdb")
    con = store.connect(str(db), read_only=True)  # a closed store file, as `gpuwatch ingest` leaves one
    assert con.execute("SELECT count(*) FROM pods").fetchone()[0] == pods
    con.close()


def test_the_template_is_made_again_when_sample_data_changes(tmp_path, monkeypatch):
    sample = tmp_path / "sample_data"
    shutil.copytree(bundles.SAMPLE_DATA, sample)
    monkeypatch.setattr(bundles, "SAMPLE_DATA", sample)
    monkeypatch.setattr(bundles, "_TEMPLATE", {})
    con, _ = bundles.loaded(sample)
    pods = con.execute("SELECT count(*) FROM pods").fetchone()[0]
    con.close()
    frame = pd.read_csv(sample / "pods.csv")
    frame.iloc[1:].to_csv(sample / "pods.csv", index=False)  # one pod fewer: another size, another file
    con, _ = bundles.loaded(sample)
    assert con.execute("SELECT count(*) FROM pods").fetchone()[0] == pods - 1
    con.close()
