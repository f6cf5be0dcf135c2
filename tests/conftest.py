"""Shared test set-up: --update-golden, the gpu marker, and the repository paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data" / "real"
GOLDEN = ROOT / "tests" / "golden"
FIXTURES = ROOT / "tests" / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from current output")


def pytest_collection_modifyitems(config, items):
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine (needs /dev/nvidia0 and libnvidia-ml)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _gpu_present() -> bool:
    return os.path.exists("/dev/nvidia0") and os.environ.get("GPUWATCH_NO_GPU") != "1"


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def golden(update_golden):
    """``golden(path, text)``: compare ``text`` with ``tests/golden/<path>``, or rewrite it."""

    def check(relpath: str, text: str) -> None:
        path = GOLDEN / relpath
        if update_golden or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if not update_golden:
                pytest.fail(f"golden file {path} did not exist; written now — review and commit it")
        assert text == path.read_text(), f"output differs from {path}; run pytest --update-golden and review the diff"

    return check


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"real traces not found at {SHARED_DATA}")
    return SHARED_DATA
