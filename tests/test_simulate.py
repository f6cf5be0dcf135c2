"""`gpuwatch simulate` writes a valid bundle plus truth.csv and failures.csv, deterministically by seed,
in Parquet or CSV; both formats load into the same staged samples; ``--no-failures`` writes the same
workload without the planted failure modes, ``--no-topology`` without the layouts and topology nodes;
and sample_data is what the README's command writes.
"""

from __future__ import annotations

import json

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
        if name == "processes" and not (out / "processes.parquet").exists():
            continue  # written only where a failure mode plants processes (absent: unknown, never "none")
        assert tuple(pd.read_parquet(out / f"{name}.parquet").columns) == columns, name
    truth = pd.read_csv(out / "truth.csv", keep_default_na=False)
    assert tuple(truth.columns) == TRUTH_COLUMNS
    pods = pd.read_parquet(out / "pods.parquet")
    listed = truth.set_index(["namespace", "pod"]).index.isin(list(zip(pods["namespace"], pods["pod"], strict=True)))
    assert listed.sum() == len(pods)  # every pod, and the pods that never left Pending:
    assert set(zip(truth[~listed]["behavior"], truth[~listed]["placement"], strict=True)) == {("pending", "none")}
    assert set(truth.loc[truth["behavior"] == "pending", "topology"]) <= {"blocked", "full"}
    assert tuple(pd.read_csv(out / "failures.csv").columns) == FAILURE_COLUMNS


def test_no_failures_writes_the_same_workload_without_them(tmp_path):
    for name, flag in (("with", "--failures"), ("without", "--no-failures")):
        main(["simulate", "--gpus", "24", "--days", "2", "--seed", "4", "--format", "csv", flag, "--no-topology",
              "--out", str(tmp_path / name)])
    with_, without = tmp_path / "with", tmp_path / "without"
    assert len(pd.read_csv(without / "failures.csv")) == 0 and len(pd.read_csv(with_ / "failures.csv")) > 0
    assert pd.read_csv(without / "health.csv").empty
    for name in ("truth.csv", "pods.csv"):
        lines = (without / name).read_text().splitlines()
        assert (with_ / name).read_text().splitlines()[:len(lines)] == lines, name


def test_no_topology_writes_the_same_workload_without_it(tmp_path):
    for name, flag in (("with", "--topology"), ("without", "--no-topology")):
        main(["simulate", "--gpus", "16", "--days", "2", "--seed", "4", "--step", "600", "--format", "csv", flag,
              "--out", str(tmp_path / name)])
    with_, without = tmp_path / "with", tmp_path / "without"
    assert pd.read_csv(without / "topology.csv").empty and len(pd.read_csv(with_ / "topology.csv")) > 0
    lines = (without / "pods.csv").read_text().splitlines()
    assert (with_ / "pods.csv").read_text().splitlines()[:len(lines)] == lines
    truth = {n: pd.read_csv(tmp_path / n / "truth.csv", keep_default_na=False) for n in ("with", "without")}
    assert set(truth["without"]["topology"]) == {""}
    assert {"misplaced", "well_placed", "spread", "blocked", "full"} <= set(truth["with"]["topology"])
    pd.testing.assert_frame_equal(truth["with"].drop(columns="topology").head(len(truth["without"])),
                                  truth["without"].drop(columns="topology"))
    devices = pd.read_csv(with_ / "devices.csv")
    assert devices["numa_node"].notna().all() and devices["nvlink_clique"].notna().sum() == 8
    assert pd.read_csv(without / "devices.csv")["numa_node"].isna().all()
    labels = [json.loads(text)["nvidia_com_gpu_product"] for text in pd.read_csv(with_ / "nodes.csv")["labels"]]
    assert {"NVIDIA-L40S", "NVIDIA-GB200", "NVIDIA-H100-80GB-HBM3"} <= set(labels)
    con = store.connect(None)
    store.load_bundle(con, with_)
    assert con.execute("SELECT count(DISTINCT node) FROM stg_topology").fetchone()[0] == len(labels)
    waits = con.execute("SELECT count(*) FROM stg_pod_status WHERE unschedulable = 1 AND node_selector IS NOT NULL "
                        "AND created_ts IS NOT NULL").fetchone()[0]
    assert waits == int((truth["with"]["behavior"] == "pending").sum())


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
