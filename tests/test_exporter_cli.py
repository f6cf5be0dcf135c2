"""``gpuwatch export`` flags: durations, listen addresses, and bad input exits 2 naming the problem."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuwatch import units
from gpuwatch.exporter.server import parse_listen


def duration(text: str) -> float:
    return units.parse_duration(text, what="--interval")  # the exporter's duration flags use units' parser


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("500ms", 0.5), ("2m", 120.0), ("1.5", 1.5), ("1h", 3600.0)])
def test_duration(text, seconds):
    assert duration(text) == seconds


def test_bad_duration_names_it():
    with pytest.raises(units.UsageError, match="--interval: 'soon'"):
        duration("soon")


@pytest.mark.parametrize(("text", "addr"), [(":9400", ("", 9400)), ("127.0.0.1:0", ("127.0.0.1", 0)),
                                            ("[::1]:9400", ("::1", 9400))])
def test_parse_listen(text, addr):
    assert parse_listen(text) == addr


@pytest.mark.parametrize(("argv", "message"), [
    (["--listen", "nine-four-hundred"], "expected [HOST]:PORT"),
    (["--simulate-node", "nope"], "--simulate-node 'nope' is not in the simulated fleet"),
    (["--listen", ":99999"], "gpuwatch export: --listen: ':99999': expected [HOST]:PORT with a port 0-65535"),
    (["--interval", "0"], "gpuwatch export: --interval: '0' is not a duration"),
    (["--kubelet-timeout", "soon"], "gpuwatch export: --kubelet-timeout: 'soon' is not a duration"),
    (["--simulate-kubelet", "--source", "nvml"], "gpuwatch export: --simulate-kubelet needs --source simulate"),
])
def test_bad_input_exits_2_with_reason(argv, message):
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-gpus", "8",
           "--kubelet-socket", "", *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr


def test_port_in_use_is_one_line_exit_1():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-gpus", "8",
               "--kubelet-socket", "", "--listen", f"127.0.0.1:{port}"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines() == [f"gpuwatch export: --listen 127.0.0.1:{port}: cannot listen: "
                                               "Address already in use"], out.stderr


def test_exporter_process_stays_lean():
    """The node agent never loads the analyzer's stack (pandas, duckdb, streamlit, kubernetes)."""
    code = ("import sys, gpuwatch.exporter.command, gpuwatch.exporter.collector, gpuwatch.exporter.server, "
            "tests.support.exporter_history, gpuwatch.sources.simulate, gpuwatch.sources.nvml, gpuwatch.sources.dcgm, "
            "gpuwatch.attribution; from gpuwatch.fleet import build_fleet; "
            "from gpuwatch.exporter.collector import render_at; render_at(build_fleet(gpus=8), 1.763e9); "
            "print(sorted(m for m in ('pandas', 'duckdb', 'streamlit', 'kubernetes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
