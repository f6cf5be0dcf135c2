"""dcgm-exporter's counters CSV (``-f/--collectors``) and the DCGM_EXP_* metrics gpuwatch computes.

Checks that a file in the shape of dcgm-exporter's default-counters.csv (tests/fixtures/counters,
written for these tests) resolves every row through the stand-in DCGM bindings' dcgm_fields, that
DCGM 4.6's renamed constants and deprecated aliases resolve too, that each bad row is one
``FILE:LINE: ...`` UsageError, that the dcgm source watches and reports a counters file's extra
field ids through the stand-in, and ExpMetrics' window semantics against a fake clock.
"""

from __future__ import annotations

import json
import types
import warnings

import pytest

from gpuwatch.exporter import counters, exp
from gpuwatch.exporter.counters import Counter, read_counters
from gpuwatch.exporter.exp import ExpMetrics, ExpSample
from gpuwatch.model import Device
from gpuwatch.sources import DeviceReading, SourceOptions, dcgm
from gpuwatch.units import UsageError
from tests.conftest import FIXTURES, ROOT

DATA = FIXTURES / "counters"
FAKES = str(ROOT / "tests" / "fakes" / "dcgm")
NOT_SUPPORTED = 0x7FFFFFFFFFFFFFF0 + 2


@pytest.fixture
def bindings():
    mods = dcgm.load_bindings(FAKES)
    import _fake_state

    return mods, _fake_state


def test_default_counters_shape_every_row_resolves(bindings):
    rows = read_counters(str(DATA / "default.csv"), bindings[0].dcgm_fields)
    by_name = {c.name: c for c in rows}
    assert len(rows) == 47 and all(c.field_id is not None or c.name in exp.EXP for c in rows)
    assert by_name["DCGM_FI_DEV_SM_CLOCK"] == Counter("DCGM_FI_DEV_SM_CLOCK", 100, "gauge", "SM clock (in MHz).", 7)
    assert by_name["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"].field_id == 112  # the older name of 112
    assert by_name["DCGM_FI_DEV_FABRIC_HEALTH_MASK"].field_id == 174
    assert [by_name[f"DCGM_FI_DEV_ECC_{e}_TOTAL"].field_id for e in ("SBE_VOL", "DBE_VOL", "SBE_AGG", "DBE_AGG")] \
        == [310, 311, 312, 313]
    assert by_name["DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"].field_id == 439
    assert by_name["DCGM_FI_DRIVER_VERSION"].type == "label"
    assert by_name["DCGM_FI_PROF_SM_OCCUPANCY"].field_id == 1003
    xid = by_name["DCGM_EXP_XID_ERRORS_COUNT"]
    assert (xid.field_id, xid.type, xid.help) == (None, "counter", "XIDs seen in the window, per XID.")
    ids = counters.field_ids(rows)
    assert len(ids) == len(set(ids)) and {112, 230, 240, 241, 392, 409, 419, 429, 174} <= set(ids)


BAD = [
    ("unknown-field.csv", "DCGM_FI_DEV_SM_CLOK: unknown DCGM field", "did you mean DCGM_FI_DEV_SM_CLOCK?"),
    ("unknown-exp.csv", "unknown DCGM_EXP_* metric", "DCGM_EXP_CLOCK_EVENTS_COUNT"),
    ("not-computed-exp.csv", "DCGM_EXP_P2P_STATUS: gpuwatch does not compute", "dcgmGetNvLinkP2PStatus"),
    ("bad-type.csv", "TYPE 'histogram' is not one of gauge, counter, label", ""),
    ("missing-columns.csv", "expected 3 fields NAME, TYPE, HELP, found 2", ""),
    ("unquoted-comma.csv", "found 4", "quote a HELP that contains commas"),
    ("duplicate-name.csv", "DCGM_FI_DEV_SM_CLOCK: listed twice (first on line 2 as DCGM_FI_DEV_SM_CLOCK)", ""),
    ("duplicate-id.csv", "100: listed twice (first on line 2 as DCGM_FI_DEV_SM_CLOCK)", ""),
    ("duplicate-field.csv", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS: DCGM field 112 is already listed on line 2 as "
     "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", ""),
    ("label-row.csv", "gpuwatch serves only DCGM_FI_DRIVER_VERSION as a label", "gauge or counter"),
    ("unterminated-quote.csv", "not a CSV row", ""),
    ("unknown-id.csv", "99999: no DCGM_FI_* constant has this field id", ""),
]


@pytest.mark.parametrize(("name", "says", "also"), BAD, ids=[b[0] for b in BAD])
def test_each_bad_row_is_one_line_naming_file_and_line(bindings, name, says, also):
    path = str(DATA / name)
    with pytest.raises(UsageError) as err:
        read_counters(path, bindings[0].dcgm_fields)
    message = str(err.value)
    assert message.startswith(f"{path}:3: ") and "\n" not in message
    assert says in message and also in message


def test_unreadable_or_empty_file_is_named(bindings, tmp_path):
    fields = bindings[0].dcgm_fields
    for path, says in ((tmp_path / "nope.csv", "cannot read the counters file: No such file"),
                       (tmp_path, "cannot read the counters file"),
                       (DATA / "empty.csv", "no counters")):
        with pytest.raises(UsageError, match=f"^{path}: {says}"):
            read_counters(str(path), fields)
    (tmp_path / "latin1.csv").write_bytes(b"DCGM_FI_DEV_SM_CLOCK, gauge, \xe9\n")
    with pytest.raises(UsageError, match="not UTF-8"):
        read_counters(str(tmp_path / "latin1.csv"), fields)


def _dcgm46(deprecated: int) -> types.ModuleType:
    """A module shaped like DCGM 4.6's dcgm_fields: new names, old ones via a warning __getattr__."""
    module = types.ModuleType("dcgm_fields")
    module.DCGM_FI_DEV_XID_ERROR = 230
    module.DCGM_FI_DEV_CLOCKS_EVENT_REASONS = 112
    module.DCGM_FI_DEV_CLOCK_THROTTLE_REASONS = 112
    module.DCGM_FE_GPU = 1
    module.DCGM_DEPRECATED = deprecated
    module._DEPRECATED_ALIASES = {"DCGM_FI_DEV_XID_ERRORS": "DCGM_FI_DEV_XID_ERROR"}

    def getattr_(name):
        if name in module._DEPRECATED_ALIASES and module.DCGM_DEPRECATED:
            warnings.warn(f"{name} is deprecated", DeprecationWarning, stacklevel=2)
            return getattr(module, module._DEPRECATED_ALIASES[name])
        raise AttributeError(name)

    module.__getattr__ = getattr_
    return module


@pytest.mark.parametrize("deprecated", [1, 0])
def test_dcgm46_names_and_aliases_resolve_quietly(tmp_path, deprecated):
    path = tmp_path / "c.csv"
    path.write_text("DCGM_FI_DEV_XID_ERRORS, gauge, old name\nDCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, new\n"
                    "DCGM_FE_GPU, gauge, an entity group and not a field\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UsageError, match=r":3: DCGM_FE_GPU: unknown DCGM field"):
            read_counters(str(path), _dcgm46(deprecated))
        path.write_text("DCGM_FI_DEV_XID_ERRORS, gauge, old name\nDCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, new\n")
        rows = read_counters(str(path), _dcgm46(deprecated))
    assert [(c.name, c.field_id) for c in rows] == [("DCGM_FI_DEV_XID_ERRORS", 230),
                                                     ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 112)]


def test_numeric_name_is_served_under_the_bindings_constant(bindings, tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("112, gauge, by id\n240, counter, by id\n")
    rows = read_counters(str(path), bindings[0].dcgm_fields)
    assert [(c.name, c.field_id) for c in rows] == [("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 112),
                                                     ("DCGM_FI_DEV_POWER_VIOLATION", 240)]


def test_dcgm_source_watches_and_reports_extra_ids(bindings):
    mods, state = bindings
    scenario = state.load(json.loads((FIXTURES / "dcgm" / "l40s.json").read_text()))
    extra = {"112": 0x44, "240": 1_250_000, "310": 3, "311": NOT_SUPPORTED, "409": 7, "174": 0, "1003": 0.25}
    scenario["values"]["1"]["0"].update(extra)
    rows = read_counters(str(DATA / "default.csv"), mods.dcgm_fields)
    source = dcgm.open_source(SourceOptions(node="n", extra_field_ids=counters.field_ids(rows)), dcgm=mods)
    assert len(source.fields) == len(set(source.fields)) and {112, 240, 310, 311, 409, 174, 1003} <= set(source.fields)
    values = source.read(0).readings[0].values
    assert {f: values.get(f) for f in (112, 240, 310, 311, 409, 174, 1003)} == {
        112: 0x44, 240: 1_250_000, 310: 3, 311: None, 409: 7, 174: 0, 1003: 0.25}  # blank -> absent
    assert values[100] == 210, "the default fields are still read"
    source.close()
    plain = dcgm.open_source(SourceOptions(node="n"), dcgm=mods)
    assert 240 not in plain.read(0).readings[0].values, "only watched fields are reported"
    off = dcgm.open_source(SourceOptions(node="n", profiling=False, extra_field_ids=(112, 1003)), dcgm=mods)
    assert 112 in off.fields and 1003 not in off.fields
    with pytest.raises(UsageError, match="at most 128 fields"):
        dcgm.open_source(SourceOptions(node="n", extra_field_ids=tuple(range(2000, 2200))), dcgm=mods)


def _reading(values: dict, uuid: str = "GPU-a", *, error: str | None = None) -> DeviceReading:
    return DeviceReading(Device("n", uuid, 0, "X", 0), values, error=error)


def _counts(family) -> dict:
    return {(s.device_key, tuple(s.labels.items())): s.value for s in family.samples}


def test_clock_events_counted_per_refresh_within_the_window():
    metrics = ExpMetrics(["DCGM_EXP_CLOCK_EVENTS_COUNT"], 10.0)
    assert metrics.field_ids == (112,)
    assert exp.clock_events(0x44) == ["power_cap", "hw_thermal"]
    assert exp.clock_events(0x1FF | 0x200) == list(exp.CLOCK_EVENTS.values()), "unnamed bits ignored"
    for now, mask in ((0.0, 0x44), (5.0, 0x04), (10.0, None), (12.0, 0)):
        metrics.update(now, [_reading({} if mask is None else {112: mask})])
    (family,) = metrics.samples()
    assert (family.name, family.type, family.help) == ("DCGM_EXP_CLOCK_EVENTS_COUNT", "counter", "reported clock events")
    # at t=12 the window is [2, 12]: t=0's events are out, t=5's power_cap is in
    assert family.samples == (ExpSample("GPU-a", {"clock_event": "power_cap", "window_size_in_ms": "10000"}, 1.0),)
    metrics.update(10.0 + 5.0, [_reading({112: 0x44})])
    assert _counts(metrics.samples()[0]) == {
        ("GPU-a", (("clock_event", "power_cap"), ("window_size_in_ms", "10000"))): 2.0,
        ("GPU-a", (("clock_event", "hw_thermal"), ("window_size_in_ms", "10000"))): 1.0}
    metrics.update(30.0, [_reading({112: 0})])
    assert metrics.samples()[0].samples == (ExpSample("GPU-a", {"window_size_in_ms": "10000"}, 0.0),)


def test_xid_counts_changes_of_the_last_xid_within_the_window():
    row = Counter("DCGM_EXP_XID_ERRORS_COUNT", None, "gauge", "XIDs in the window.", 4)
    metrics = ExpMetrics([row, "DCGM_EXP_CLOCK_EVENTS_COUNT", "DCGM_EXP_XID_ERRORS_COUNT"], 300.0,
                         windows={"DCGM_EXP_XID_ERRORS_COUNT": 60.0})
    assert metrics.field_ids == (230, 112)
    # GPU-a: baseline 0, then 79, 79 (same XID again: not visible), 48, 79. GPU-b: baseline 13.
    for now, a, b in ((0, 0, 13), (1, 79, 13), (2, 79, 13), (3, 48, 13), (4, 79, 31)):
        metrics.update(float(now), [_reading({230: a}), _reading({230: b}, "GPU-b")])
    xid, clocks = metrics.samples()
    assert (xid.type, xid.help) == ("gauge", "XIDs in the window.")
    window = ("window_size_in_ms", "60000")
    assert _counts(xid) == {("GPU-a", (window, ("xid", "79"))): 2.0, ("GPU-a", (window, ("xid", "48"))): 1.0,
                            ("GPU-b", (window, ("xid", "31"))): 1.0}
    assert _counts(clocks) == {("GPU-a", (("window_size_in_ms", "300000"),)): 0.0,
                               ("GPU-b", (("window_size_in_ms", "300000"),)): 0.0}
    metrics.update(62.5, [_reading({230: 79}), _reading({}, "GPU-b", error="lost")])
    assert _counts(metrics.samples()[0]) == {("GPU-a", (window, ("xid", "48"))): 1.0,
                                             ("GPU-a", (window, ("xid", "79"))): 1.0}, "[2.5, 62.5]; GPU-b unread"
    metrics.update(65.0, [_reading({230: 79}, "GPU-b")])  # GPU-a gone: its history is dropped
    assert _counts(metrics.samples()[0]) == {("GPU-b", (window, ("xid", "79"))): 1.0}, "[5, 65]: 31@4 is out"
    metrics.update(66.0, [_reading({230: 79})])
    assert _counts(metrics.samples()[0]) == {("GPU-a", (window,)): 0.0}, "a returning device starts a new baseline"


def test_a_counters_file_is_what_the_exporter_serves(bindings):
    """Through the collector (stand-in DCGM, fake clock): the file's rows in its order with its TYPE and
    HELP, nothing else of DCGM's, gpuwatch's own series kept, DCGM_EXP_* counts with the device's labels."""
    from gpuwatch.exporter.collector import ExporterCollector
    from gpuwatch.exporter.exposition import render
    from gpuwatch.exporter.families import Options

    mods, state = bindings
    scenario = state.load(json.loads((FIXTURES / "dcgm" / "l40s.json").read_text()))
    scenario["values"]["1"]["0"].update({"112": 0x44, "240": 1_250_000})
    rows = read_counters(str(DATA / "default.csv"), mods.dcgm_fields)
    source = dcgm.open_source(SourceOptions(node="n1", extra_field_ids=counters.field_ids(rows)), dcgm=mods)
    now = [1000.0]
    collector = ExporterCollector(source, clock=lambda: now[0], options=Options(counters=rows),
                                  exp=ExpMetrics([c for c in rows if c.field_id is None], 60.0))
    text = render(collector.collect()).decode()
    now[0] += 2
    text = render(collector.collect()).decode()
    source.close()
    helps = dict(line.split(" ", 3)[2:] for line in text.splitlines() if line.startswith("# HELP"))
    dcgm_names = [n for n in helps if n.startswith("DCGM_")]
    served_rows = [c for c in rows if c.type != "label"]
    # exactly the file's rows, in its order (a row whose field has no value on this GPU has no family),
    # the computed DCGM_EXP_* ones after the read ones
    read, computed = ([c.name for c in served_rows if c.name in helps and (c.field_id is None) is e] for e in (False, True))
    assert dcgm_names == read + computed
    assert {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_EXP_CLOCK_EVENTS_COUNT"} <= set(dcgm_names)
    assert all(helps[c.name] == c.help for c in served_rows if c.name in helps), "HELP from the file"
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert 'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0"' in text and "DCGM_FI_DEV_POWER_VIOLATION{" in text
    assert "DCGM_FI_DEV_GPU_UTIL{" not in text or "DCGM_FI_DEV_GPU_UTIL" in dcgm_names
    assert "gpuwatch_source_up" in text, "gpuwatch's own series stay"
    events = [x for x in text.splitlines() if x.startswith("DCGM_EXP_CLOCK_EVENTS_COUNT{")]
    assert {x.split('clock_event="')[1].split('"')[0] for x in events} == {"power_cap", "hw_thermal"}
    assert all('UUID="GPU-5b4e07f6' in x and 'window_size_in_ms="60000"' in x and x.endswith(" 2") for x in events)


def test_export_with_a_bad_counters_file_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    bad = DATA / "unknown-field.csv"
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--dcgm-bindings", FAKES, "-f", str(bad), "--listen", ":0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{bad}:" in done.stderr and "Traceback" not in done.stderr
    simulate = subprocess.run([*cmd[:4], "--source", "simulate", "-f", str(DATA / "default.csv")],
                              capture_output=True, text=True, timeout=60)
    assert simulate.returncode == 2 and "--collectors needs --source dcgm or nvml" in simulate.stderr
