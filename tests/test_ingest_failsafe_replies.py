"""Fail safe against what a Prometheus (or what stands in front of it) may send (issue 31, items 6, 7,
13, 15).

- A glitchy reading (GPU_UTIL 120 %) from a REAL Prometheus (backfilled by promtool) is refused
  alone: stored as NULL, counted in ``refused_readings``, logged; the rest loads and the store's
  last complete step advances, so the next cycle does not fail on the same value.
- A reply trickling its body or its headers byte by byte ends within the request's timeout; a read
  of many slow replies within its deadline; ``ingest --follow`` exits at once on SIGTERM while a
  read hangs (a real process, a real slow server on 127.0.0.1: tests/support/fake_prometheus.py).
- Replies no Prometheus sends (integer or null values, malformed entries, a timestamp of 1e20,
  ``GPU_I_ID="x"``) are one line naming the query, exit 1, no traceback, the store untouched.
- A redirect is refused, and the host it points to is never asked.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from gpuwatch import store
from gpuwatch.cli import main
from gpuwatch.ingest import command, prometheus, since
from gpuwatch.store.progress import progress
from tests.support.fake_prometheus import Script, serving

STEP = 60.0
MODEL = "NVIDIA H100 80GB HBM3"
# an hour of 1-minute data, well in the past and on whole hours (the store refuses times after now + 1 day)
T0 = math.floor(time.time() / 3600) * 3600 - 6 * 3600


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def _labels(uuid: str, gpu: str = "0", **extra) -> dict:
    return {"gpu": gpu, "UUID": uuid, "Hostname": "n1", "modelName": MODEL, **extra}


def _util(values: list[float], uuid: str = "GPU-a", **extra) -> tuple[dict, list]:
    return _labels(uuid, **extra), [[T0 + i * STEP, f"{v:g}"] for i, v in enumerate(values)]


def _snapshot(db: str) -> dict:
    con = store.connect(db, read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*), hash(list(t ORDER BY ALL)) FROM {t} t").fetchall()[0]
                for t in ("devices", "samples", "pods", "ingest_log")}
    finally:
        con.close()


# --- item 6: a glitchy reading from a real Prometheus ---------------------------------------------

@pytest.mark.slow
def test_a_glitchy_reading_is_refused_alone_and_the_store_advances(tmp_path, caplog):
    from tests.support.prometheus import backfill, running

    util = {"GPU-a": [40.0] * 60, "GPU-b": [60.0] * 60}
    util["GPU-a"][45] = 120.0  # one glitch, in the second half hour (the since-last cycle's part)
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for gpu, (uuid, values) in enumerate(util.items()):
        labels = ",".join(f'{k}="{v}"' for k, v in _labels(uuid, str(gpu)).items())
        lines += [f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {v:g} {T0 + i * STEP:.0f}" for i, v in enumerate(values)]
    (tmp_path / "data.om").write_text("\n".join([*lines, "# EOF", ""]))
    backfill(tmp_path / "data.om", tmp_path / "tsdb")
    db = str(tmp_path / "glitch.duckdb")
    with running(tmp_path, tsdb=tmp_path / "tsdb") as prom:
        con = store.connect(db)
        command.ingest(con, prom.url, start=_utc(T0), end=_utc(T0 + 30 * STEP), step=STEP)
        con.close()
        assert since.run(db, prom.url, end=_utc(T0 + 60 * STEP), step=STEP, tail=300.0) == 0
        con = store.connect(db, read_only=True)
        assert progress(con).complete == _utc(T0 + 59 * STEP)  # the store advanced past the glitch
        stored = con.execute("SELECT gpu_uuid, count(*), count(gpu_util), sum(gpu_util) FROM samples "
                             "GROUP BY ALL ORDER BY ALL").fetchall()
        refused = con.execute("SELECT column_name, readings, largest, node, gpu_uuid, first_ts FROM refused_readings"
                              ).fetchall()
        con.close()
        assert stored == [("GPU-a", 60, 59, pytest.approx(59 * 0.4)), ("GPU-b", 60, 60, pytest.approx(60 * 0.6))]
        assert refused == [("gpu_util", 1, 1.2, "n1", "GPU-a", _utc(T0 + 45 * STEP))]
        assert any("refused 1 gpu_util reading(s) out of range (largest 1.2" in r.getMessage() for r in caplog.records)
        # the next cycle is not refused on the same value: nothing new, up to date
        assert since.run(db, prom.url, end=_utc(T0 + 60 * STEP), step=STEP, tail=300.0) == 0


def test_a_bundle_with_a_percent_is_still_refused_whole(tmp_path):
    """The line: a bundle file's writer chose its units, so a value above 1 refuses the file."""
    import pandas as pd

    samples = pd.DataFrame({"ts": [_utc(T0), _utc(T0 + STEP)], "node": "n1", "gpu_uuid": "GPU-a",
                            "gpu_util": [0.5, 87.0]})
    samples.to_csv(tmp_path / "samples.csv", index=False)
    con = store.connect(None)
    with pytest.raises(store.BundleError, match=r"samples\.csv: column 'gpu_util', row 2: 87\.0 is above 1"):
        store.load_bundle(con, tmp_path)
    assert con.execute("SELECT count(*) FROM samples").fetchall()[0][0] == 0
    assert con.execute("SELECT count(*) FROM refused_readings").fetchall()[0][0] == 0


# --- item 7: trickles, deadlines, SIGTERM ---------------------------------------------------------

def _script(**kwargs) -> Script:
    return Script(series={"DCGM_FI_DEV_GPU_UTIL": [_util([40.0] * 10)]}, **kwargs)


@pytest.mark.parametrize("headers", [False, True], ids=["body", "headers"])
def test_a_trickling_reply_ends_within_the_request_timeout(headers):
    with serving(_script(trickle=0.3, trickle_headers=headers)) as url:
        client = prometheus.Client(url, timeout=1.0, retries=1, sleep=lambda s: None)
        began = time.monotonic()
        with pytest.raises(prometheus.PrometheusError, match=r"no complete reply within 1s \(gave up after 2 attempts"):
            client.query_range("DCGM_FI_DEV_GPU_UTIL", T0, T0 + 9 * STEP, STEP)
        assert time.monotonic() - began < 4.0


def test_a_read_of_many_slow_replies_ends_at_its_deadline():
    """Each reply arrives within the request timeout, but the read as a whole may not outlast its deadline."""
    with serving(_script(trickle=0.002)) as url:  # ~0.1-0.3 s per reply, a dozen queries
        began = time.monotonic()
        with pytest.raises(prometheus.PrometheusError, match=r"the read's deadline of 0\.5s passed"):
            prometheus.fetch(url, start=T0, end=T0 + 10 * STEP, step=STEP, timeout=5.0, deadline=0.5, concurrency=1)
        assert time.monotonic() - began < 3.0


def test_follow_exits_at_once_on_sigterm_while_a_read_hangs(tmp_path):
    with serving(_script(trickle=1.0)) as url:
        db = tmp_path / "f.duckdb"
        proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "ingest", "--from", url.replace("http", "prometheus", 1),
                                 "--db", str(db), "--follow", "--every", "1s"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)  # started, its first read stuck on the trickle
        assert proc.poll() is None
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)
        finally:
            proc.kill()
        _, err = proc.communicate()
        assert code == 0 and time.monotonic() - sent < 3.0, err
        assert "Traceback" not in err and "stopped during a cycle, nothing of it loaded" in err, err


def test_the_deadline_flag_is_checked(tmp_path, capsys):
    db = tmp_path / "x.duckdb"
    assert main(["ingest", "--from", "prometheus://127.0.0.1:1", "--db", str(db), "--deadline", "soon"]) == 2
    assert main(["ingest", "--from", str(tmp_path), "--db", str(db), "--deadline", "1m"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["gpuwatch ingest: --deadline: 'soon' is not a duration (use 500ms, 90s, 15m, 1h, 1d or 1w)",
                   "gpuwatch ingest: --deadline: only with a Prometheus source (--from prometheus://host:port)"]
    assert not db.exists()


# --- item 13: replies no Prometheus sends -------------------------------------------------------------

def _matrix(result) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


JUNK = {
    "null value": [{"metric": _labels("GPU-a"), "values": [[T0, None]]}],
    "boolean value": [{"metric": _labels("GPU-a"), "values": [[T0, True]]}],
    "timestamp 1e20": [{"metric": _labels("GPU-a"), "values": [[1e20, "50"]]}],
    "entry not an object": ["GPU-a"],
    "labels not text": [{"metric": {**_labels("GPU-a"), "gpu": 0}, "values": [[T0, "50"]]}],
    "point not a pair": [{"metric": _labels("GPU-a"), "values": [[T0, "50", "x"]]}],
    "values not a list": [{"metric": _labels("GPU-a"), "values": {"t": T0}}],
}


@pytest.mark.parametrize("case", list(JUNK))
def test_a_junk_reply_is_one_line_and_the_store_is_untouched(case, tmp_path, capsys):
    db = str(tmp_path / "s.duckdb")
    good = Script(series={"DCGM_FI_DEV_GPU_UTIL": [_util([40.0] * 10)]})
    with serving(good) as url:
        assert main(["ingest", "--from", url, "--db", db, "--start", _utc(T0).isoformat(),
                     "--end", _utc(T0 + 10 * STEP).isoformat()]) == 0
    before = _snapshot(db)

    def junk(path, params):
        return (200, {}, _matrix(JUNK[case])) if path == "/api/v1/query_range" else None

    capsys.readouterr()
    with serving(Script(series=good.series, override=junk)) as url:
        code = main(["ingest", "--from", url, "--db", db, "--start", _utc(T0).isoformat(),
                     "--end", _utc(T0 + 10 * STEP).isoformat()])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    [line] = [x for x in err.splitlines() if x.startswith("gpuwatch ingest:")]
    assert "_over_time(DCGM_FI_DEV_GPU_UTIL" in line and "malformed series" in line
    assert _snapshot(db) == before


def test_an_integer_value_is_a_number_and_a_bad_gpu_instance_id_names_no_device(tmp_path, capsys):
    """JSON numbers where Prometheus sends strings read as numbers; a series whose GPU_I_ID is no
    instance id is left out with a note (it names no device), never a traceback."""
    series = {"DCGM_FI_DEV_GPU_UTIL": [(_labels("GPU-a"), [[T0 + i * STEP, 40] for i in range(5)]),
                                       _util([50.0] * 5, uuid="GPU-m", GPU_I_ID="x")]}
    db = str(tmp_path / "s.duckdb")
    with serving(Script(series=series)) as url:
        assert main(["ingest", "--from", url, "--db", db, "--start", _utc(T0).isoformat(),
                     "--end", _utc(T0 + 5 * STEP).isoformat()]) == 0
    con = store.connect(db, read_only=True)
    assert con.execute("SELECT gpu_uuid, count(*), sum(gpu_util) FROM samples GROUP BY ALL").fetchall() == [
        ("GPU-a", 5, pytest.approx(2.0))]
    con.close()


# --- item 15: redirects ---------------------------------------------------------------------------------

def test_a_redirect_to_another_host_is_refused_and_never_followed(tmp_path, capsys):
    other = Script(series={"DCGM_FI_DEV_GPU_UTIL": [_util([40.0] * 5)]})
    with serving(other) as elsewhere:
        def moved(path, params):
            return 302, {"Location": f"{elsewhere}{path}"}, b""

        with serving(Script(override=moved)) as url:
            code = main(["ingest", "--from", url.replace("http", "prometheus", 1), "--db", str(tmp_path / "r.duckdb"),
                         "--start", _utc(T0).isoformat(), "--end", _utc(T0 + 5 * STEP).isoformat()])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"HTTP 302, a redirect to '{elsewhere}/api/v1/label/__name__/values': not followed" in err
    assert other.hits == []

