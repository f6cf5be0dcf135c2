"""The app on a store where no GPU has a price: every money tile says "unpriced", never $0.00, and each
page says why (issue 31 item 8). streamlit.testing.v1.AppTest on a real DuckDB store."""

from __future__ import annotations

import pytest

from tests.app_support import sample_bundle

pytest.importorskip("streamlit")
from tests.test_app import open_page


@pytest.fixture(scope="module")
def unpriced_db(tmp_path_factory):
    import pandas as pd

    from gpuwatch import store
    from gpuwatch.store import bundle

    path = tmp_path_factory.mktemp("unpriced") / "none.duckdb"
    frames = {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
              for name, file in bundle.find_files(sample_bundle()).items() if name not in ("truth", "prices")}
    con = store.connect(str(path))
    store.load(con, frames, source="no prices")
    con.close()
    return path


@pytest.mark.parametrize("page", ["fleet", "chargeback", "idle_hoarding", "recommendations"])
def test_no_price_means_unpriced_tiles(unpriced_db, monkeypatch, page):
    at = open_page(unpriced_db, page, monkeypatch)
    money = [m for m in at.metric if str(m.value).startswith("$") or str(m.value) == "unpriced"]
    assert money and all(m.value == "unpriced" or m.value.startswith("unpriced") for m in money), \
        [(m.label, m.value) for m in money]
    assert any("No GPU model in this store has a price" in w.value for w in at.warning)
