"""Staging never guesses units from values (regression for the fail-safe issue's defect 1): a GPU
saturated at gpu_util 1.0 on a node whose other GPUs read 0 stays busy (staging used to take the
node's whole numbers for percent and divide by 100, making it an idle hoarder), and one stray
reading of 1.02 on a node does not turn the node's ratios into hundredths; on a profiled node a GPU
reading 1.0 with idle SMs stays a false-utilization offender (it used to vanish). Checked end to
end, through idle_hoarding and false_utilization, on a real DuckDB store."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params

T0 = pd.Timestamp("2026-11-09T00:00:00")
WINDOW = params(T0.to_pydatetime(), (T0 + pd.Timedelta(hours=3)).to_pydatetime())
PODS = {"train": ("n1", "GPU-busy"), "notebook": ("n1", "GPU-idle"), "serve": ("n2", "GPU-serve"),
        "spin": ("n3", "GPU-spin"), "parked": ("n3", "GPU-parked")}


def _series(pod: str, values: list[float], sm: list[float] | None = None) -> list[dict]:
    node, gpu = PODS[pod]
    return [{"ts": T0 + pd.Timedelta(minutes=i), "node": node, "gpu_uuid": gpu, "namespace": "ml", "pod": pod,
             "gpu_util": v, "sm_active": None if sm is None else sm[i]} for i, v in enumerate(values)]


@pytest.fixture(scope="module")
def con():
    minutes = 180
    serve = [0.3 + 0.3 * (i % 2) for i in range(minutes)]
    serve[90] = 1.02  # one stray reading above 1 (DCGM rounding): clamped, not a unit
    # n1 has no profiling (SM activity unknown); n3 has: its busy-looking GPU spins with SMs idle
    samples = (_series("train", [1.0] * minutes) + _series("notebook", [0.0] * minutes) + _series("serve", serve)
               + _series("spin", [1.0] * minutes, sm=[0.1] * minutes)
               + _series("parked", [0.0] * minutes, sm=[0.0] * minutes))
    pods = [{"namespace": "ml", "pod": pod, "node": node, "team": "research", "gpu_resource": "nvidia.com/gpu",
             "gpu_count": 1.0, "device_ids": gpu, "start_ts": T0, "end_ts": None} for pod, (node, gpu) in PODS.items()]
    devices = [{"node": node, "gpu_uuid": gpu, "gpu_model": "NVIDIA H100 80GB HBM3"} for node, gpu in PODS.values()]
    db = store.connect(None)
    store.load(db, {"samples": pd.DataFrame(samples), "pods": pd.DataFrame(pods), "devices": pd.DataFrame(devices),
                    "prices": pd.DataFrame([{"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": 4.0}])},
               source="test")
    yield db
    db.close()


def test_a_saturated_gpu_beside_an_idle_one_is_not_an_idle_hoarder(con):
    idle = analyses.run(con, "idle_hoarding", **WINDOW).set_index("pod")
    assert idle.at["train", "idle_share"] == 0.0 and not idle.at["train", "hoarder"]
    assert idle.at["notebook", "idle_share"] == 1.0 and idle.at["notebook", "hoarder"]  # the real hoarder
    mean = con.execute("SELECT avg(reported) FROM stg_samples WHERE pod = 'train'").fetchall()[0][0]
    assert mean == pytest.approx(1.0)  # not 0.01


def test_a_stray_reading_above_one_does_not_flip_its_node(con):
    idle = analyses.run(con, "idle_hoarding", **WINDOW).set_index("pod")
    assert idle.at["serve", "idle_share"] == 0.0 and not idle.at["serve", "hoarder"]
    values = con.execute("SELECT min(reported), max(reported) FROM stg_samples WHERE pod = 'serve'").fetchall()[0]
    assert values == (pytest.approx(0.3), 1.0)  # ratios as loaded, the stray one clamped to 1


def test_a_saturated_looking_gpu_on_a_profiled_node_stays_a_false_utilization_offender(con):
    false = analyses.run(con, "false_utilization", **WINDOW).set_index("pod")
    assert false.at["spin", "offender"] and false.at["spin", "false_util_gpu_hours"] > 2.9  # 3 h window
    idle = analyses.run(con, "idle_hoarding", **WINDOW).set_index("pod")
    assert idle.at["spin", "idle_share"] == 0.0 and idle.at["parked", "hoarder"]
