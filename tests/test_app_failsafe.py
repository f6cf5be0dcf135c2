"""The app fails closed (issue 31, items 13 and 15): the Health & fit page in a team view (it raised
KeyError 'severity' when the team's window held no health event), and an empty ``--teams-header``,
which is no header name, never "no team scoping" (the whole fleet, here on every interface)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests import app_support as support

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "app" / "streamlit_app.py")


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    return support.load_sample(tmp_path_factory.mktemp("app") / "sample.duckdb")


@pytest.fixture(scope="module")
def no_events_db(tmp_path_factory):
    """sample_data without its health events (a store whose window has none: no unhealthy_gpu rows)."""
    import shutil

    from gpuwatch import store

    bundle = tmp_path_factory.mktemp("bundle")
    for item in Path(support.sample_bundle()).iterdir():
        if item.name != "health.csv" and item.is_file():
            shutil.copy(item, bundle / item.name)
    path = bundle / "store.duckdb"
    con = store.connect(str(path))
    store.load_bundle(con, bundle)
    con.close()
    return path


@pytest.mark.parametrize("team", ["platform", "nlp"])
def test_health_page_in_a_team_view_without_health_events(no_events_db, team, monkeypatch):
    monkeypatch.setenv("GPUWATCH_DB", str(no_events_db))
    monkeypatch.setenv("GPUWATCH_APP_TEAMS", team)
    at = AppTest.from_file(SCRIPT, default_timeout=120)
    at.run()
    at.switch_page("views/health.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Health & fit"
    assert any(m.label == "Failing GPUs under pods" for m in at.metric)


@pytest.mark.parametrize("flags", [["--teams-header="], ["--teams-header=", "--address", "0.0.0.0"],
                                   ["--teams-header", " "], ["--teams-header", "X Groups"]])
def test_an_empty_or_invalid_teams_header_is_a_usage_error(sample_db, flags, capsys):
    from gpuwatch import cli

    assert cli.main(["app", "--db", str(sample_db), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuwatch app: --teams-header: ") and "is not an HTTP header name" in err


def test_the_app_itself_reads_an_empty_header_name_as_no_team():
    sys.path.insert(0, str(ROOT / "app"))
    import ui

    assert ui.scope(["--db", "x", "--teams-header="], {"": "nlp", "X-Forwarded-Groups": "nlp"}) == ()
