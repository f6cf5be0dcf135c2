"""User mistakes on the command line: one line on stderr naming the flag or file, exit 2 (usage) or
1 (data), never a traceback, and the store untouched. One parser per text form: `1d`, `90s`, `15m`
mean the same in every flag and policy key (gpuwatch.units)."""

from __future__ import annotations

import duckdb
import pytest

from gpuwatch import units
from gpuwatch.cli import main
from gpuwatch.reclaim import policy
from tests.support.bundles import SAMPLE_DATA


def _fails(capsys, argv: list[str], *, code: int, says: str) -> None:
    assert main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0] and says in err[0], err[0]


@pytest.mark.parametrize(("flags", "says"), [
    (["--window", "1x"], "--window: '1x' is not a duration"),
    (["--window", "0"], "--window: '0' is not a duration"),
    (["--end", "garbage"], "--end: 'garbage' is not an ISO-8601 time"),
    (["--end", "9999-12-31"], "--end: '9999-12-31' is outside 2000..2100"),
    (["--idle-below", "5"], "--idle-below: 5.0 is outside 0..1"),
    (["--idle-below", "nan"], "--idle-below: nan is outside 0..1"),
    (["--min-observed-seconds", "-1"], "--min-observed-seconds: -1.0 is outside"),
])
def test_analyze_refuses_bad_flags_before_touching_the_store(tmp_path, capsys, flags, says):
    db = tmp_path / "s.db"
    _fails(capsys, ["analyze", "--db", str(db), "--out", str(tmp_path / "o"), "--input", str(SAMPLE_DATA), *flags],
           code=2, says=says)
    assert not db.exists()  # refused before the store was created or loaded


def test_analyze_out_naming_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    _fails(capsys, ["analyze", "--db", str(tmp_path / "s.db"), "--out", str(tmp_path / "f")], code=2,
           says="--out: ")


def test_missing_input_dir(tmp_path, capsys):
    _fails(capsys, ["ingest", "--db", str(tmp_path / "s.db"), "--from", str(tmp_path / "nope")], code=1,
           says="no such file or directory")


def test_unreachable_prometheus(tmp_path, capsys):
    _fails(capsys, ["ingest", "--db", str(tmp_path / "s.db"), "--from", "prometheus://127.0.0.1:1",
                    "--start", "2026-11-09T00:00:00Z", "--end", "2026-11-09T00:05:00Z"], code=1,
           says="cannot reach Prometheus at http://127.0.0.1:1: Connection refused")


@pytest.mark.parametrize(("flags", "says"), [
    (["--step", "0"], "--step: '0' is not a duration"),
    (["--start", "yesterday"], "--start: 'yesterday' is not an ISO-8601 time"),
])
def test_prometheus_flags(tmp_path, capsys, flags, says):
    _fails(capsys, ["ingest", "--db", str(tmp_path / "s.db"), "--from", "prometheus://127.0.0.1:1", *flags],
           code=2, says=says)


def test_at_garbage_for_a_prom_file(tmp_path, capsys):
    prom = tmp_path / "m.prom"
    prom.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",modelName="X"} 5\n')
    _fails(capsys, ["ingest", "--db", str(tmp_path / "s.db"), "--from", str(prom), "--at", "garbage"], code=2,
           says="--at: 'garbage' is not an ISO-8601 time")


def test_report_on_a_duckdb_file_that_is_not_a_store(tmp_path, capsys):
    other = tmp_path / "other.db"
    duckdb.connect(str(other)).execute("CREATE TABLE t (x INTEGER)").close()
    _fails(capsys, ["report", "weekly", "--db", str(other), "--out", str(tmp_path / "r")], code=1,
           says="not a gpuwatch store")
    (tmp_path / "garbage.db").write_bytes(b"not a database at all")
    _fails(capsys, ["report", "weekly", "--db", str(tmp_path / "garbage.db"), "--out", str(tmp_path / "r")], code=1,
           says="not a gpuwatch store")


@pytest.mark.parametrize(("text", "seconds"), [("500ms", 0.5), ("90s", 90), ("90", 90), ("15m", 900), ("1.5h", 5400),
                                               ("1d", 86400), ("1w", 604800)])
def test_one_duration_grammar_everywhere(text, seconds):
    assert units.parse_duration(text, what="x") == seconds
    assert policy.duration(text, "key 'x'") == seconds


@pytest.mark.parametrize("text", [":99999", "9400", "host:", "[::1:9400"])
def test_listen_addresses_name_the_flag(text):
    with pytest.raises(units.UsageError, match="--listen: "):
        units.parse_listen(text, what="--listen")


@pytest.mark.parametrize(("argv", "says"), [
    (["export", "--listen", ":99999"], "gpuwatch export: --listen: ':99999': expected [HOST]:PORT"),
    (["export", "--interval", "soon"], "gpuwatch export: --interval: 'soon' is not a duration"),
    (["app", "--db", "x.duckdb", "--port", "99999"], "gpuwatch app: --port: '99999' is not a port"),
    (["demo", "--port", "0"], "gpuwatch demo: --port: '0' is not a port"),
    (["demo", "--exporter-listen", "::1:9400"], "gpuwatch demo: --exporter-listen: '::1:9400': put an IPv6"),
    (["demo", "--exporter-listen", "127.0.0.1:0"], "gpuwatch demo: --exporter-listen: '127.0.0.1:0': the demo needs"),
])
def test_listen_and_port_flags_exit_2_before_starting_anything(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)  # the demo would write .demo/ here if it started
    _fails(capsys, argv, code=2, says=says)
    assert not (tmp_path / ".demo").exists()


def test_report_bad_week_is_one_line_before_opening_the_store(tmp_path, capsys):
    _fails(capsys, ["report", "weekly", "--db", str(tmp_path / "nope.duckdb"), "--out", str(tmp_path / "r"),
                    "--week", "last week"], code=2, says="gpuwatch report: --week: week 'last week' is not an ISO week")


def test_analyze_an_empty_store_is_one_line_exit_1(tmp_path, capsys):
    from gpuwatch import store

    store.connect(str(tmp_path / "empty.db")).close()  # a store, with nothing loaded (a missing one: --db)
    _fails(capsys, ["analyze", "--db", str(tmp_path / "empty.db"), "--format", "table"], code=1,
           says="gpuwatch analyze: the store holds no samples or pods: nothing to analyse")
