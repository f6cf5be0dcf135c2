"""The exporter's Dockerfile (cannot be built here: no docker engine) keeps its key lines: DCGM base
image, DCGM bindings on PYTHONPATH (the path the dcgm source probes first), only the exporter
extra installed, a non-root USER, ``ENTRYPOINT gpuwatch export`` and ``EXPOSE 9400``."""

from __future__ import annotations

import json
import re

from gpuwatch.sources.dcgm import BINDINGS_DIRS
from tests.conftest import ROOT

TEXT = (ROOT / "Dockerfile").read_text()
LINES = [line.strip() for line in TEXT.splitlines() if line.strip() and not line.strip().startswith("#")]


def instruction(name: str) -> list[str]:
    return [line[len(name):].strip() for line in LINES if line.upper().startswith(name + " ")]


def test_base_is_nvidias_dcgm_image():
    arg = next(a for a in instruction("ARG") if a.startswith("DCGM_IMAGE="))
    assert re.fullmatch(r"DCGM_IMAGE=nvcr\.io/nvidia/cloud-native/dcgm:4\.[\d.]+-\d+-ubuntu22\.04", arg)
    assert instruction("FROM")[-1] == "${DCGM_IMAGE}"


def test_dcgm_bindings_on_pythonpath():
    assert f"PYTHONPATH={BINDINGS_DIRS[0]}" in TEXT


def test_non_root_user_and_entrypoint_and_port():
    users = instruction("USER")
    assert users and users[-1] not in ("0", "root")
    assert json.loads(instruction("ENTRYPOINT")[-1]) == ["gpuwatch", "export"]
    assert instruction("EXPOSE") == ["9400"]


def test_installs_only_the_exporter_extra():
    installs = [line for line in LINES if "pip install" in line]
    assert installs and all("[exporter]" in line for line in installs)
    assert not any(word in line for line in LINES for word in ("analyzer", "pandas", "duckdb", "[dev]"))
