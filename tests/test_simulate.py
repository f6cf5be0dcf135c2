"""`gpuwatch simulate` writes a valid bundle plus truth.csv and failures.csv, deterministically by seed,
in Parquet or CSV; both formats load into the same staged samples; ``--no-failures`` writes the same
workload without the planted failure modes; and sample_data is what the README's command writes.
"""

from __future__ import annotations

import pandas as pd

from gpuwatch import store
from gpuwatch.cli import main
from gpuwatch.fleet import FAILURE_COLUMNS
from gpuwatch.model import BUNDLE_COLUMNS, TRUTH_COLUMNS
from tests.support.bundles import SAMPLE_DATA


def _same(a, b) -> bool:
    import pyarrow.parquet as pq

    return pq.read_table(a).equals(pq.read_table(b))


def test_simulate_writes_every_file_with_the_bundle_columns(tmp_path):
    out = tmp_path / "b"
    assert main(["simulate", "--gpus", "16", "--days", "0.5", "--seed", "3", "--out", str(out)]) == 0
    for name, columns in BUNDLE_COLUMNS.items():
        assert tuple(pd.read_parquet(out / f"{name}.parquet").columns) == columns, name
    truth = pd.read_csv(out / "truth.csv")
    assert tuple(truth.columns) == TRUTH_COLUMNS
    pods = pd.read_parquet(out / "pods.parquet")
    assert set(zip(truth["namespace"], truth["pod"], strict=True)) == set(zip(pods["namespace"], pods["pod"], strict=True))
    assert tuple(pd.read_csv(out / "failures.csv").columns) == FAILURE_COLUMNS


def test_no_failures_writes_the_same_workload_without_them(tmp_path):
    for name, flag in (("with", "--failures"), ("without", "--no-failures")):
        main(["simulate", "--gpus", "24", "--days", "2", "--seed", "4", "--format", "csv", flag, "--out",
              str(tmp_path / name)])
    with_, without = tmp_path / "with", tmp_path / "without"
    assert len(pd.read_csv(without / "failures.csv")) == 0 and len(pd.read_csv(with_ / "failures.csv")) > 0
    assert pd.read_csv(without / "health.csv").empty
    for name in ("truth.csv", "pods.csv"):
        lines = (without / name).read_text().splitlines()
        assert (with_ / name).read_text().splitlines()[:len(lines)] == lines, name


def test_same_seed_same_bundle_other_seed_other_bundle(tmp_path):
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        main(["simulate", "--gpus", "8", "--days", "0.25", "--seed", str(seed), "--out", str(tmp_path / name)])
    samples = {n: tmp_path / n / "samples.parquet" for n in "abc"}
    assert _same(samples["a"], samples["b"]) and not _same(samples["a"], samples["c"])


def test_csv_and_parquet_formats_stage_identically(tmp_path):
    for fmt in ("parquet", "csv"):
        main(["simulate", "--gpus", "8", "--days", "0.25", "--step", "120", "--format", fmt, "--out", str(tmp_path / fmt)])
    staged = []
    for fmt in ("parquet", "csv"):
        con = store.connect(None)
        store.load_bundle(con, tmp_path / fmt)
        staged.append(con.execute("SELECT * FROM stg_samples ORDER BY node, device_key, pod, ts").df())
    pd.testing.assert_frame_equal(staged[0], staged[1], check_dtype=False)


def test_sample_data_is_reproducible_from_its_readme_command(tmp_path):
    out = tmp_path / "sd"
    main(["simulate", "--gpus", "64", "--days", "7", "--seed", "0", "--step", "60", "--start", "2026-11-09T00:00:00Z",
          "--format", "parquet", "--small-format", "csv", "--out", str(out)])
    for name in ("devices.csv", "pods.csv", "prices.csv", "teams.csv", "nodes.csv", "pod_status.csv", "health.csv",
                 "truth.csv", "failures.csv"):
        assert (out / name).read_text() == (SAMPLE_DATA / name).read_text(), name
    assert _same(out / "samples.parquet", SAMPLE_DATA / "samples.parquet")
    assert (SAMPLE_DATA / "samples.parquet").stat().st_size < 15 * 1024 * 1024
