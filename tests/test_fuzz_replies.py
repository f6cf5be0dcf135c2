"""Fuzzing what a Prometheus (or a proxy in front of it) replies to ``ingest --since-last`` (hypothesis,
bounded; issue 31): GPU_UTIL series with glitches (readings out of range, NaN/±Inf, negative, JSON
integers instead of strings) and, sometimes, one reply that no Prometheus sends (a null or boolean
value, a malformed entry, a timestamp of 1e20 or outside the query, labels that are not text), and
replies that trickle. Served by the stand-in server on 127.0.0.1 (tests/support/fake_prometheus.py).

Laws: never a traceback — only gpuwatch's DataError (PrometheusError) escapes, and then the store is
exactly as it was; on success the store holds exactly the finite readings served, each reading above
the ratio limit stored as NULL, and the load's ``refused_readings`` count those of its read, an
independent count of the served points; a trickling reply ends within its request's timeout.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuwatch import store, units
from gpuwatch.ingest import command, prometheus, since
from gpuwatch.store.validate import RATIO_LIMITS
from tests.support.fake_prometheus import Script, serving

STEP = 60.0
POINTS = 12
T0 = math.floor(time.time() / 3600) * 3600 - 6 * 3600
FUZZ = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMIT = RATIO_LIMITS["gpu_util"]
PERCENT = 0.01  # DCGM_FI_DEV_GPU_UTIL is served in percent

# a served value: mostly plausible percents, sometimes a glitch or a missing reading
value = st.one_of(
    st.floats(0, 100).map(lambda v: f"{v:g}"),
    st.integers(0, 100),  # a JSON number where Prometheus sends a string: still a number
    st.floats(106, 1e6).map(lambda v: f"{v:g}"),  # a glitch: out of range, refused alone
    st.sampled_from(["NaN", "+Inf", "-Inf", "-3"]),
)
# replies no Prometheus sends, for one query_range: each must be a clear error
JUNK = st.sampled_from([
    lambda lb, pts: [{"metric": lb, "values": [[pts[0][0], None]]}],
    lambda lb, pts: [{"metric": lb, "values": [[pts[0][0], True]]}],
    lambda lb, pts: [{"metric": lb, "values": [[1e20, "5"]]}],
    lambda lb, pts: [{"metric": lb, "values": [[pts[0][0] + 10 * 86400.0, "5"]]}],
    lambda lb, pts: [{"metric": {**lb, "gpu": 0}, "values": pts}],
    lambda lb, pts: [{"metric": lb, "values": [[pts[0][0], "5", "6"]]}],
    lambda lb, pts: [{"metric": lb}],
    lambda lb, pts: [[lb, pts]],
    lambda lb, pts: [{"metric": lb, "values": [[pts[0][0], "five"]]}],
])


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def _labels(uuid: str, gpu: int) -> dict:
    return {"gpu": str(gpu), "UUID": uuid, "Hostname": "n1", "modelName": "NVIDIA H100 80GB HBM3"}


def _number(raw) -> float:
    return float(raw)


def _snapshot(con) -> dict:
    return {t: con.execute(f"SELECT count(*), hash(list(t ORDER BY ALL)) FROM {t} t").fetchall()[0]
            for t in ("samples", "devices", "ingest_log", "refused_readings")}


def _expected(series: dict[str, list], lo: float = -math.inf, hi: float = math.inf) -> tuple[int, int, float, int]:
    """(rows, known readings, their sum, refused) of the points served at lo <= ts < hi, counted here."""
    rows = known = refused = 0
    total = 0.0
    for points in series.values():
        for ts, raw in points:
            v = _number(raw)
            if not lo <= ts < hi or not math.isfinite(v):
                continue
            rows += 1
            if v * PERCENT > LIMIT:
                refused += 1
            else:
                known += 1
                total += v * PERCENT
    return rows, known, total, refused


@FUZZ
@given(st.lists(st.lists(value, min_size=POINTS, max_size=POINTS), min_size=1, max_size=2),
       st.one_of(st.none(), st.tuples(JUNK, st.integers(0, 1))))
def test_since_last_on_glitchy_replies(columns, junk):
    served = {f"GPU-{i}": [[T0 + k * STEP, v] for k, v in enumerate(col)] for i, col in enumerate(columns)}
    series = [(_labels(uuid, i), points) for i, (uuid, points) in enumerate(served.items())]
    script = Script(series={"DCGM_FI_DEV_GPU_UTIL": series})
    half = T0 + POINTS // 2 * STEP
    con = store.connect(None)
    with serving(script) as url:
        try:
            command.ingest(con, url, start=_utc(T0), end=_utc(half), step=STEP)
        except units.DataError:
            raise AssertionError("the first half is served without junk: it must load") from None
        before = _snapshot(con)
        if junk is not None:  # the since-last read's one reply from a broken proxy
            make, which = junk
            labels, points = series[min(which, len(series) - 1)]

            def broken(path, params):
                if path != "/api/v1/query_range" or 'hostname=""' in params["query"]:
                    return None
                body = json.dumps({"status": "success", "data": {
                    "resultType": "matrix", "result": make({"__name__": "DCGM_FI_DEV_GPU_UTIL", **labels}, points)}})
                return 200, {}, body.encode()
            script.override = broken
        try:
            _, read = since.ingest(con, url, end=_utc(T0 + POINTS * STEP), step=STEP, tail=STEP)
        except units.DataError as exc:
            event("refused: " + type(exc).__name__)
            assert junk is not None, f"a clean reply was refused: {exc}"
            assert isinstance(exc, prometheus.PrometheusError) and "\n" not in str(exc)
            assert _snapshot(con) == before  # the store untouched
            return
    assert junk is None, "a junk reply was loaded"
    rows, known, total, _ = _expected(served)
    stored = con.execute("SELECT count(*), count(gpu_util), coalesce(sum(gpu_util), 0) FROM samples").fetchall()[0]
    assert stored[:2] == (rows, known) and math.isclose(stored[2], total, rel_tol=1e-9, abs_tol=1e-9)
    *_, refused = _expected(served, units.epoch_seconds(read.start), units.epoch_seconds(read.end))
    last = con.execute("SELECT coalesce(sum(readings), 0) FROM refused_readings "
                       "WHERE loaded_at = (SELECT max(loaded_at) FROM ingest_log)").fetchall()[0][0]
    assert last == refused
    event(f"loaded, {refused} refused")
    con.close()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0.0, 0.001, 0.05, 0.4]), st.booleans())
def test_a_trickling_reply_ends_within_its_timeout(per_byte, headers):
    """A reply arriving slowly either completes within the request's timeout (and reads as served) or
    is a clear error after it; never a hang."""
    points = [[T0 + k * STEP, "50"] for k in range(5)]
    script = Script(series={"DCGM_FI_DEV_GPU_UTIL": [(_labels("GPU-0", 0), points)]}, trickle=per_byte,
                    trickle_headers=headers)
    timeout = 1.0
    with serving(script) as url:
        client = prometheus.Client(url, timeout=timeout, retries=0)
        began = time.monotonic()
        try:
            [(labels, stamps, values)] = client.query_range("avg_over_time(DCGM_FI_DEV_GPU_UTIL[59999ms])",
                                                        T0, T0 + 4 * STEP, STEP)
        except prometheus.PrometheusError as exc:
            event("timed out")
            assert "no complete reply within 1s" in str(exc)
        else:
            event("completed")
            assert list(values) == [50.0] * 5 and list(stamps) == [p[0] for p in points] and labels["UUID"] == "GPU-0"
        assert time.monotonic() - began < timeout + 1.0
