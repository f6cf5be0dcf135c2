"""Contracts between gpuwatch's parts that no single module owns.

Checks: every CLI command resolves to a module with add_arguments/run and its --help works;
the core imports no heavy client (``gpuwatch --help`` works without extras); the bundle's
columns (model.BUNDLE_COLUMNS) equal the store's raw tables and sample_data's files; the app
only imports what may present data (never reclaim or kubernetes).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest

from gpuwatch import cli
from gpuwatch.model import BUNDLE_COLUMNS
from tests.conftest import ROOT

HEAVY = ("duckdb", "grpc", "pynvml", "prometheus_client", "streamlit", "kubernetes", "pandas")
# the app reads the store and findings, and presents: facts (model, units, topology's link classes) and the
# report's topology summary (the same tables the weekly report shows), nothing that acts
APP_ALLOWED = ("gpuwatch.store", "gpuwatch.analyses", "gpuwatch.findings", "gpuwatch.recommendations", "gpuwatch.idle_bridge",
               "gpuwatch.model",
               "gpuwatch.units", "gpuwatch.topology", "gpuwatch.report.topology", "gpuwatch.signals")


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_has_a_module(name):
    module = importlib.import_module(cli.COMMANDS[name][0])
    assert callable(module.add_arguments) and callable(module.run)


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_command_help_works(name):
    out = subprocess.run([sys.executable, "-m", "gpuwatch", name, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage: gpuwatch" in out.stdout


def test_help_needs_no_heavy_client():
    code = ("import sys, gpuwatch.cli as c; c.build_parser(); "
            f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_store_raw_tables_are_the_bundle_columns():
    store = importlib.import_module("gpuwatch.store")
    con = store.connect(None)
    for table, columns in BUNDLE_COLUMNS.items():
        got = [r[0] for r in con.execute(f"describe {table}").fetchall()]
        assert tuple(got) == columns, f"raw table {table} drifted from model.BUNDLE_COLUMNS"


def test_sample_data_files_have_the_bundle_columns():
    pq = pytest.importorskip("pyarrow.parquet")
    found = 0
    for table, columns in BUNDLE_COLUMNS.items():
        for path in (ROOT / "sample_data").glob(f"{table}.*"):
            if path.suffix == ".csv":
                header = tuple(path.read_text().splitlines()[0].split(","))
            else:
                header = tuple(pq.read_schema(path).names)
            assert header == columns, f"{path} columns differ from model.BUNDLE_COLUMNS[{table!r}]"
            found += 1
    assert found == len(BUNDLE_COLUMNS), "sample_data must hold every bundle file"


def _imports(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_app_only_presents():
    files = sorted((ROOT / "app").rglob("*.py"))
    assert files, "app/ has no pages"
    for path in files:
        for name in _imports(path):
            if name.startswith("gpuwatch"):
                assert name.startswith(APP_ALLOWED), f"{path.relative_to(ROOT)} imports {name}: the app may not act"
            assert not name.startswith(("kubernetes", "duckdb")), f"{path.relative_to(ROOT)} imports {name}"
