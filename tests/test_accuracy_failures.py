"""Failure-mode findings against the simulator's ground truth (failures.csv): every planted failure is
found and no decoy is, precision and recall >= 0.95 per finding, on the shipped sample_data and on a
second seed. Decoys (an OOMKilled pod, siblings that start within minutes, memory under the empty
baseline or held too briefly, an application XID) are planted beside each failure; truth rows with a
decoy cause must not be reported as that finding.
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import fleet as workloads
from gpuwatch.findings import FAILURES, findings
from gpuwatch.fleet.command import write_bundle
from tests.support.bundles import SAMPLE_DATA, loaded

FLOOR = 0.95
# truth causes that are decoys: planted so that the finding must NOT report them
DECOYS = {"gang_stall": {"siblings_started"},
          "orphaned_memory": {"below_baseline", "too_short", "unknown_owner", "host_process_short"}}
# orphaned_memory's second path (compute processes): its truth causes, and the decoys planted for it
PROCESS_CAUSES = {"process_of_ended_pod", "host_process", "unknown_owner", "host_process_short"}


@pytest.fixture(scope="module", params=["sample_data", "seed 1"])
def found(request, tmp_path_factory):
    path = SAMPLE_DATA
    if request.param == "seed 1":
        path = tmp_path_factory.mktemp("seed1")
        write_bundle(workloads.build_fleet(gpus=64, seed=1, days=7, failures=True), path, step=60)
    con, params = loaded(path)
    frames = findings(con, params, only=FAILURES)
    con.close()
    yield frames, pd.read_csv(path / "failures.csv", dtype={"mig_gi_id": "Int64"})


def _gi(value) -> str:
    return "" if pd.isna(value) else str(int(value))


def _keys(finding: str, frame: pd.DataFrame) -> set[tuple]:
    """What a finding reports, in the key the truth file names it by."""
    if finding == "driver_drift":
        blamed = frame[frame["blamed"].fillna(False).astype(bool)]
        return {(node.strip(), r.driver_version) for r in blamed.itertuples() for node in str(r.node_names).split(",")}
    if finding == "gang_stall":
        return {(r.kind, r.namespace, r.job, r.gpu_uuid if r.kind == "straggler" else "") for r in frame.itertuples()}
    if finding == "mig_mismatch":
        return {(r.namespace, r.pod, r.cause) for r in frame.itertuples()}
    if finding == "unhealthy_gpu":
        return {(r.node, r.gpu_uuid, r.severity) for r in frame.itertuples() if r.pods}
    return {(r.node, r.gpu_uuid, _gi(r.mig_gi_id), r.cause != "no_pod_allocated") for r in frame.itertuples()}


def _truth(finding: str, truth: pd.DataFrame) -> tuple[set[tuple], set[tuple]]:
    """(planted, decoys) in the same keys."""
    rows = truth[truth["finding"] == finding]
    decoy = rows["cause"].isin(DECOYS.get(finding, set()))

    def key(r) -> tuple:
        if finding == "driver_drift":
            return (r.node, r.cause)
        if finding == "gang_stall":
            kind = "straggler" if r.cause == "straggler" else "partial_allocation"
            return (kind, r.namespace, r.job, r.gpu_uuid if kind == "straggler" else "")
        if finding == "mig_mismatch":
            return (r.namespace, r.pod, r.cause)
        if finding == "unhealthy_gpu":
            return (r.node, r.gpu_uuid, r.cause)
        return (r.node, r.gpu_uuid, _gi(r.mig_gi_id), r.cause in PROCESS_CAUSES)
    return {key(r) for r in rows[~decoy].itertuples()}, {key(r) for r in rows[decoy].itertuples()}


@pytest.mark.parametrize("finding", FAILURES)
def test_failure_findings_match_truth(found, finding):
    frames, truth = found
    reported, (planted, decoys) = _keys(finding, frames[finding]), _truth(finding, truth)
    assert planted, f"{finding}: nothing planted"
    hits = reported & planted
    precision, recall = len(hits) / max(len(reported), 1), len(hits) / len(planted)
    assert not reported & decoys, f"{finding}: reported a decoy {reported & decoys}"
    assert precision >= FLOOR and recall >= FLOOR, (finding, precision, recall, reported - planted, planted - reported)
