"""Device-wide fields summed per GPU by a REAL Prometheus (Debian's), in every compatibility profile.

A device-wide DCGM field (fields.DEVICE_WIDE: entity level DCGM_FE_GPU, e.g. power, energy, clocks,
temperatures) has one value per board. Served by gpuwatch, scraped by Prometheus, on whole,
time-sliced and MIG GPUs from two sources:

- the simulate source, the whole fleet at a fixed instant (gpu-node-002: MIG GPUs, which report the
  board's power on every instance; gpu-node-004: time-sliced GPUs; the rest whole);
- the dcgm source over the stand-in DCGM bindings (tests/fakes/dcgm: a FAKE at the DCGM boundary)
  with tests/fixtures/dcgm/h100-mig.json (one 98 W H100 as four GPU instances) and l40s.json.

In the ``gpuwatch`` profile ``sum by (UUID)`` of every device-wide field must equal the device's value
on every GPU. In the dcgm-exporter profiles the shape is upstream's: a MIG GPU's value is repeated on
each of its instances (``count by (UUID)`` = its instances), and the way gpuwatch's own dashboards
sum a device-wide field, ``sum(max by (UUID) (...))``, counts each board once (in ``gpuwatch`` a
plain ``sum`` does).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import threading
from collections import defaultdict

import pytest

from gpuwatch import fields
from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import render_at
from gpuwatch.exporter.exposition import render
from gpuwatch.exporter.families import Status, build
from gpuwatch.fleet import DEFAULT_START, build_fleet
from gpuwatch.sources import SourceOptions, dcgm
from gpuwatch.sources.simulate import SimulatedSource
from tests.conftest import FIXTURES, ROOT
from tests.fakes.fake_pynvml import FakeNvml
from tests.support.prometheus import Prometheus, _wait_ready, free_port, require_prometheus

pytestmark = pytest.mark.slow
T = DEFAULT_START + 2.5 * 86400 + 1234.0  # pods time-slice GPUs on gpu-node-004 then


def _dcgm_snapshot(fixture: str):
    mods = dcgm.load_bindings(str(ROOT / "tests" / "fakes" / "dcgm"))
    import _fake_state

    _fake_state.load(json.loads((FIXTURES / "dcgm" / fixture).read_text()))
    nvml = FakeNvml(json.loads((FIXTURES / "nvml" / "h100-mig.json").read_text())) if "mig" in fixture else None
    source = dcgm.open_source(SourceOptions(node="node-a"), dcgm=mods, nvml=nvml)
    try:
        return source.read(0)
    finally:
        source.close()


@pytest.fixture(scope="module")
def readings():
    """source -> the snapshot its exposition is built from."""
    fleet = build_fleet(gpus=40, seed=0)
    return {"simulate": (fleet, SimulatedSource(fleet).read(T)),
            "dcgm-h100-mig": (None, _dcgm_snapshot("h100-mig.json")),
            "dcgm-l40s": (None, _dcgm_snapshot("l40s.json"))}


def _exposition(source: str, fleet, snapshot, profile: str) -> str:
    options = compat.options(profile)
    if fleet is not None:
        return render_at(fleet, T, options=options)
    status = Status(source="dcgm", source_ok=True, source_seconds=0.0)
    return render(build(snapshot, {}, status, options=options)).decode()


@pytest.fixture(scope="module")
def prom(readings, tmp_path_factory):
    """One Prometheus scraping every (profile, source) exposition, each as its own job."""
    pages = {f"/{p}/{s}": _exposition(s, fleet, snap, p).encode()
             for p in compat.PROFILES for s, (fleet, snap) in readings.items()}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    binary, _ = require_prometheus()
    tmp = tmp_path_factory.mktemp("prom")
    jobs = [{"job_name": path.strip("/").replace("/", "_"), "metrics_path": path, "honor_labels": True,
             "scrape_interval": "1s", "static_configs": [{"targets": [target]}]} for path in pages]
    (tmp / "prometheus.yml").write_text(json.dumps({"scrape_configs": jobs}))
    port, log = free_port(), tmp / "prometheus.log"
    with log.open("w") as out:
        process = subprocess.Popen([binary, f"--config.file={tmp / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                   stdout=out, stderr=subprocess.STDOUT)
    p = Prometheus(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        _wait_ready(p)
        p.wait_for(f"count(up == 1) == {len(jobs)}", timeout=60)
        yield p
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        server.shutdown()


def _boards(snapshot) -> dict[int, dict[str, float]]:
    """field id -> GPU UUID -> the board's value (every reading of a GPU carries the same one)."""
    seen: dict[int, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for r in snapshot.readings:
        for fid in fields.DEVICE_WIDE & set(r.values):
            seen[fid][r.device.gpu_uuid].add(r.values[fid])
    out = {}
    for fid, by_gpu in seen.items():
        assert all(len(v) == 1 for v in by_gpu.values()), f"field {fid} differs between a GPU's instances"
        out[fid] = {uuid: v.pop() for uuid, v in by_gpu.items()}
    return out


def _by_uuid(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["UUID"]: float(r["value"][1]) for r in result}


CASES = [(p, s) for p in compat.PROFILES for s in ("simulate", "dcgm-h100-mig", "dcgm-l40s")]


@pytest.mark.parametrize(("profile", "source"), CASES, ids=[f"{p}-{s}" for p, s in CASES])
def test_device_wide_fields_count_once_per_gpu(prom, readings, profile, source):
    _, snapshot = readings[source]
    job = f"{profile}_{source}"
    boards = _boards(snapshot)
    assert 155 in boards  # power is served by every source here
    instances = defaultdict(int)
    for r in snapshot.readings:
        instances[r.device.gpu_uuid] += 1
    mig = {r.device.gpu_uuid for r in snapshot.readings if r.device.is_mig}
    assert mig or source == "dcgm-l40s"
    per_gpu = compat.PROFILES[profile].device_wide == "per-gpu"
    for fid, by_gpu in sorted(boards.items()):
        name = fields.name_of(fields.BY_ID[fid], compat.PROFILES[profile].naming)
        if name is None or fields.BY_ID[fid].type is None:
            continue
        factor = fields.BY_ID[fid].to_base / name.to_base
        want = {uuid: pytest.approx(v * factor, rel=1e-6, abs=1e-6) for uuid, v in by_gpu.items()}
        selector = f'{name.name}{{job="{job}"}}'
        sums = _by_uuid(prom.query(f"sum by (UUID) ({selector})"))
        # per board once: a plain sum where each board is served once (gpuwatch: a shared GPU's
        # GPU_UTIL is split into the pods' shares, which add up), else the dashboards' max per UUID
        total = f"sum({selector})" if per_gpu else f"sum(max by (UUID) ({selector}))"
        shipped = float(prom.query(total)[0]["value"][1])
        assert shipped == pytest.approx(sum(v * factor for v in by_gpu.values()), rel=1e-6), name.name
        if per_gpu:
            assert sums == want, f"{profile} {source}: sum by (UUID) of {name.name}"
            continue
        counts = _by_uuid(prom.query(f"count by (UUID) ({selector})"))
        assert counts == {uuid: instances[uuid] for uuid in by_gpu}, f"{profile}: upstream repeats {name.name}"
        assert _by_uuid(prom.query(f"max by (UUID) ({selector})")) == want, name.name
    if source == "dcgm-h100-mig":  # the case: one 98 W H100 in four instances
        power = fields.name_of(fields.BY_ID[155], compat.PROFILES[profile].naming).name
        total = float(prom.query(f'sum({power}{{job="{job}"}})')[0]["value"][1])
        assert total == (98.0 if per_gpu else 4 * 98.0)
