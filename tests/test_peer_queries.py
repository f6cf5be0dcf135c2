"""The peers' own PromQL against a REAL Prometheus scraping gpuwatch, in each compatibility profile.

The queries are NVIDIA dcgm-exporter's Grafana dashboard and OpenCost's DCGM queries, kept verbatim in
tests/fixtures/peer_queries/ (sources, commits and licences there). Per profile and node one exporter
(``gpuwatch export --source simulate --simulate-kubelet`` serving the fleet's "shared" node, two of its
GPUs time-sliced four ways, or its MIG node, MIG GPUs beside whole ones) and one Prometheus (1s
scrapes) run. Every query is run as an instant query
and must return data exactly when the profile serves every metric it names (any one, for or-ed queries)
under that name. The peers use dcgm-exporter 4.8 names, so in ``dcgm-exporter-4.9`` the queries of
renamed fields must return nothing: a 4.9 user needs 4.9 queries. Queries of fields the simulated node
does not report are skipped with the reason. Also checked: on every GPU, shared or not, the per-UUID sum
of power, framebuffer used and utilisation is the device's own reading (the simulator's, at the scrape;
on a MIG GPU power is the board's, repeated per instance as dcgm-exporter does or once in ``gpuwatch``),
and OpenCost's device-level queries find one series per GPU (an expected failure in the per-pod
``gpuwatch`` profile, where a shared GPU's FB_USED is split into pod series). The results table is
written to tests/artifacts/peer_queries.md and printed.
"""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from gpuwatch import fields
from gpuwatch.exporter import compat
from gpuwatch.sources import SourceOptions, simulate
from tests.support.prometheus import Prometheus, free_port, require_prometheus, running
from tests.support.promql_names import metric_names

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "peer_queries"
ARTIFACT = ROOT / "tests" / "artifacts" / "peer_queries.md"
GPUS, SEED = 40, 0
# the fleet's "shared" node (GPUs 0 and 1 time-sliced 4 ways) and its MIG node (MIG GPUs beside whole ones)
SHARED, MIG = "gpu-node-004", "gpu-node-002"
NODES = (SHARED, MIG)
SUMMED = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL")
# Prometheus aligns subquery steps to the epoch: with seconds of data, a `[1m:1m]` subquery has a step
# that sees them only when evaluated just past the next whole minute.
MINUTE_SUBQUERY = re.compile(r"\[[^\]:]+:\d+m\]")


@dataclass(frozen=True)
class Query:
    source: str
    name: str
    expr: str  # Grafana variables left in
    needs: str = "all"  # "any": or-ed branches, one served metric is enough
    series_per_gpu: str | None = None  # device-level queries: the same query counting series per group

    @property
    def id(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", f"{self.source} {self.name}").strip("-")


def go_sprintf(fmt: str, args: list) -> str:
    """Go's fmt.Sprintf for the verbs OpenCost's queries use: %s, %d, %g and %%."""
    rest = iter(args)
    render = {"s": str, "d": lambda a: str(int(a)), "g": lambda a: f"{float(a):g}"}

    def verb(m: re.Match) -> str:
        return "%" if m.group(1) == "%" else render[m.group(1)](next(rest))

    out = re.sub(r"%([sdg%])", verb, fmt)
    assert next(rest, verb) is verb, f"more args than verbs in {fmt!r}"
    return out


def dashboard_queries() -> list[Query]:
    doc = yaml.safe_load((FIXTURES / "nvidia-dcgm-exporter-dashboard.yaml").read_text())
    return [Query("dcgm-exporter dashboard", p["title"], p["expr"]) for p in doc["panels"]]


def opencost_queries() -> list[Query]:
    doc = yaml.safe_load((FIXTURES / "opencost.yaml").read_text())
    known = {**doc["bindings"], **doc["constants"]}

    def render(q: dict, args: list) -> str:
        return go_sprintf(q["format"], [known.get(a, a) for a in args])

    out = []
    for q in doc["queries"]:
        branches = q["branches"] if "branches" in q else [q["args"]]
        expr = q.get("join", "").join(render(q, args) for args in branches)
        counting = render(q, ["count", "count", *q["args"][2:]]) if q.get("device_level") else None
        out.append(Query("OpenCost", q["name"], expr, q.get("needs", "all"), counting))
    return out


QUERIES = dashboard_queries() + opencost_queries()


@dataclass(frozen=True)
class Expect:
    data: bool | None  # None: not checkable here (skipped with the reason)
    reason: str = ""


def served_names(naming: str, provided: frozenset[int]) -> set[str]:
    return {n.name for f in fields.SERIES if f.id in provided and (n := fields.name_of(f, naming))}


def why_not_served(name: str, naming: str, provided: frozenset[int]) -> tuple[str, str]:
    """(kind, text): kind "renamed" = the field is served, under another name in this naming."""
    known = fields.NAMES.get(name)
    if known is None or known.field.type is None:
        return "unknown", name
    if known.field.id not in provided:
        return "absent", name
    return "renamed", f"{name} → {fields.name_of(known.field, naming).name}"


WHY = {"renamed": "{naming} renames {names}", "absent": "the simulated node does not report {names}",
       "unknown": "no gpuwatch series (gpuwatch/fields.py): {names}"}


def expectation(query: Query, naming: str, provided: frozenset[int]) -> Expect:
    names = sorted(n for n in metric_names(query.expr) if n.startswith("DCGM_"))
    served = served_names(naming, provided)
    if (any if query.needs == "any" else all)(n in served for n in names):
        return Expect(True)
    why: dict[str, list[str]] = defaultdict(list)
    for kind, text in (why_not_served(n, naming, provided) for n in names if n not in served):
        why[kind].append(text)
    reason = "; ".join(WHY[k].format(naming=naming, names=", ".join(v)) for k, v in why.items())
    return Expect(False if "renamed" in why else None, reason)


def evaluation_time(expr: str, at: float) -> float:
    return math.ceil(at / 60) * 60 + 1 if MINUTE_SUBQUERY.search(expr) else at


def promql_regex(value: str) -> str:
    """``value`` as a regex inside a PromQL double-quoted string (as Grafana escapes variables)."""
    return re.escape(value).replace("\\", "\\\\")


def shape(result: list[dict]) -> str:
    if not result:
        return "no data"
    uuids = {r["metric"]["UUID"] for r in result if "UUID" in r["metric"]}
    pods = {(r["metric"].get("namespace"), r["metric"]["pod"]) for r in result if r["metric"].get("pod")}
    parts = [f"{len(result)} series", f"{len(uuids)} GPUs" if uuids else "", f"{len(pods)} pods" if pods else ""]
    return ", ".join(p for p in parts if p)


# --- the servers ---------------------------------------------------------------------------------

@contextlib.contextmanager
def exporter(tmp: Path, profile: str, node: str):
    """``gpuwatch export`` on a free port, serving ``node`` in ``profile``; yields host:port."""
    port, log_path = free_port(), tmp / "exporter.log"
    cmd = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--simulate-kubelet",
           "--simulate-gpus", str(GPUS), "--simulate-seed", str(SEED), "--simulate-node", node,
           "--compat", profile, "--listen", f"127.0.0.1:{port}"]
    with log_path.open("w") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _healthy(port):
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def _healthy(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/healthz"
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
        return reply.status == 200
    return False


@dataclass
class Served:
    profile: str
    node: str
    naming: str
    prom: Prometheus
    at: float  # when every query is evaluated
    variables: dict[str, str]

    @property
    def column(self) -> str:
        return column(self.profile, self.node)


def column(profile: str, node: str) -> str:
    return profile if node == SHARED else f"{profile} (MIG node)"


@dataclass
class Table:
    """(source, query) -> profile -> what came back, and notes; rendered as markdown."""

    rows: dict[tuple[str, str], dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        profiles = [column(p, n) for n in NODES for p in compat.PROFILES]
        command = (f"gpuwatch export --source simulate --simulate-kubelet --simulate-gpus {GPUS} "
                   f"--simulate-seed {SEED} --simulate-node {SHARED}|{MIG} --compat PROFILE")
        lines = [f"# Peer queries against gpuwatch ({Path(__file__).name})", "",
                 f"`{command}`, scraped every 1s by Prometheus; instant queries.", "",
                 "| source | query | " + " | ".join(profiles) + " |", "|---|---|" + "---|" * len(profiles)]
        lines += [f"| {src} | {name} | " + " | ".join(by.get(p, "") for p in profiles) + " |"
                  for (src, name), by in self.rows.items()]
        return "\n".join([*lines, "", *(f"- {n}" for n in self.notes), ""])


@pytest.fixture(scope="module")
def table():
    """Filled by every check; written to tests/artifacts/peer_queries.md (and printed) at the end."""
    results = Table()
    yield results
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(results.markdown())
    print("\n" + results.markdown())


@pytest.fixture(scope="module", params=NODES)
def node(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def source(node):
    """The exporter's node built in-process the same way (the window holds "now"): readings and pods."""
    require_prometheus()
    options = SourceOptions(node=node, simulate_gpus=GPUS, simulate_seed=SEED, simulate_node=node)
    src = simulate.open_source(options)
    snapshot = src.read(time.time())
    if node == SHARED:
        assert any(len(p) >= 2 for p in sharers(src, time.time()).values()), f"no GPU on {node} is shared now"
    else:
        assert any(r.device.is_mig for r in snapshot.readings), f"no MIG GPU on {node}"
    return src


@pytest.fixture(scope="module")
def provided(source, node, table) -> frozenset[int]:
    """Field ids the simulated node reports (within simulate.PROVIDED_FIELD_IDS where that is declared)."""
    snapshot = source.read(time.time())
    seen = {fid for r in snapshot.readings for fid in r.values}
    declared = getattr(simulate, "PROVIDED_FIELD_IDS", None)
    if declared is not None:
        assert seen <= declared, f"simulate reports fields it does not declare: {sorted(seen - declared)}"
        missing = sorted(declared - seen) or "none"
        table.notes.append(f"fields simulate declares but does not report on {node}: {missing}")
    return frozenset(seen)


def sharers(src, t: float) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set] = defaultdict(set)
    for a in src.allocations(t):
        out[a.device_id].add((a.namespace, a.pod))
    return out


@pytest.fixture(scope="module", params=list(compat.PROFILES))
def served(request, tmp_path_factory, node, source, table):
    """One exporter in the profile and one Prometheus scraping it, once it holds three scrapes."""
    profile = request.param
    tmp = tmp_path_factory.mktemp(profile)
    with exporter(tmp, profile, node) as target, running(tmp, targets=[target], interval="1s") as prom:
        prom.wait_for('count_over_time(up{job="gpuwatch"}[1m]) >= 3')
        up = {r["metric"]["source"] for r in prom.query("gpuwatch_source_up == 1")}
        assert up == {"simulate", "kubelet", "topology"}, f"a source is down: up are {up}"
        at = time.time()
        variables = dashboard_variables(prom, at, column(profile, node), table)
        yield Served(profile, node, compat.PROFILES[profile].naming, prom, at, variables)


def dashboard_variables(prom: Prometheus, at: float, profile: str, table) -> dict[str, str]:
    """Each query variable as Grafana renders "All": its label_values, as (v1|v2|...); none: `.+`."""
    doc = yaml.safe_load((FIXTURES / "nvidia-dcgm-exporter-dashboard.yaml").read_text())
    out = {}
    for var in (v for v in doc["variables"] if v["type"] == "query"):
        metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"]).groups()
        values = sorted({r["metric"][label] for r in prom.query(f"group by ({label}) ({metric})", at=at)})
        joined = "|".join(promql_regex(v) for v in values)
        out[var["name"]] = (f"({joined})" if len(values) > 1 else joined) or ".+"
        table.rows[("dcgm-exporter dashboard", f"variable ${var['name']}")][profile] = (
            f"{len(values)} value(s)" if values else f"none ({metric} not served): `.+`")
    return out


# --- the checks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("query", QUERIES, ids=[q.id for q in QUERIES])
def test_peer_query_returns_data_where_its_metrics_are_served(served, provided, table, query):
    expect = expectation(query, served.naming, provided)
    expr = re.sub(r"\$(\w+)", lambda m: served.variables[m.group(1)], query.expr)
    result = served.prom.query(expr, at=evaluation_time(expr, served.at))
    verdict = {True: "", False: f" (expected: {expect.reason})",
               None: f"; skipped: {expect.reason}"}[expect.data]
    wrong = expect.data is not None and bool(result) != expect.data
    cell = shape(result) + verdict + (" **unexpected**" if wrong else "")
    table.rows[(query.source, query.name)][served.column] = cell
    if expect.data is None:
        pytest.skip(expect.reason)
    assert bool(result) == expect.data, f"{served.profile}: {expr}\n-> {result[:3]}"


DEVICE_LEVEL = [q for q in QUERIES if q.series_per_gpu]


@pytest.mark.parametrize("query", DEVICE_LEVEL, ids=[q.id for q in DEVICE_LEVEL])
def test_opencost_device_level_queries_see_one_series_per_gpu(served, provided, table, query):
    """OpenCost's device queries avg/max by UUID: right only where each GPU is one series."""
    key = (query.source, f"{query.name}: series per GPU")
    expect = expectation(query, served.naming, provided)
    if expect.data is not True:
        table.rows[key][served.column] = f"skipped: {expect.reason}"
        pytest.skip(expect.reason)
    counts = served.prom.query(query.series_per_gpu, at=served.at)
    split = {r["metric"]["UUID"]: int(float(r["value"][1])) for r in counts if float(r["value"][1]) > 1}
    table.rows[key][served.column] = (f"{len(split)} GPUs as {sorted(set(split.values()))} series (xfail)"
                                       if split else f"1 each ({len(counts)} GPUs)")
    if split and compat.PROFILES[served.profile].shared_gpus == "per-pod":
        pytest.xfail(f"the per-pod profile splits shared GPUs into pod series {split}: OpenCost's "
                     f"{query.name} then aggregates pod shares instead of reading the device")
    assert not split


def test_per_gpu_sums_are_the_device_reading(served, source, table):
    """sum by (UUID) of power, FB used and utilisation = the device's reading, on shared GPUs too; on a
    MIG GPU the instances' own values add up, and a device-wide field (power) is the board's once per
    instance series (dcgm-exporter's shape) or once per GPU (``gpuwatch``)."""
    naming, per_pod = served.naming, compat.PROFILES[served.profile].shared_gpus == "per-pod"
    once = compat.PROFILES[served.profile].device_wide == "per-gpu"
    names = {f: fields.name_of(fields.BY_NAME[f], naming) for f in SUMMED}
    query = served.prom.query
    stamps = {float(r["value"][1]) for n in names.values() for r in query(f"timestamp({n.name})", at=served.at)}
    assert len(stamps) == 1, f"the families come from several scrapes: {stamps}"
    stamp = stamps.pop()
    snapshot, pods = source.read(stamp), sharers(source, stamp)
    split = {fid for r in snapshot.readings for p in r.processes for fid in p.values} if per_pod else set()
    for f, n in names.items():
        counts = _by_uuid(query(f"count by (UUID) ({n.name})", at=served.at))
        assert counts == _series_per_gpu(snapshot, pods, fields.BY_NAME[f].id, split, once), f"series of {n.name}"
    sums = _rounded({f: _by_uuid(query(f"sum by (UUID) ({n.name})", at=served.at)) for f, n in names.items()})
    # the exporter read its source at most one interval (1s) before the scrape
    read_at = next((t for t in (stamp - 0.05 * k for k in range(30)) if _readings(source, t, names, once) == sums), None)
    table.notes.append(f"{served.column}: per-GPU sums of {', '.join(n.name for n in names.values())} "
                       + ("= the device readings" if read_at else "DIFFER from the device readings")
                       + ("" if once or served.node == SHARED else
                          " (a MIG GPU's power once per instance, as dcgm-exporter serves it)"))
    assert read_at is not None, f"per-GPU sums {sums} match no reading in the second before {stamp}"


def _series_per_gpu(snapshot, pods: dict, fid: int, split: set[int], once: bool) -> dict[str, int]:
    """One series per device (a GPU, or each MIG instance); in a per-pod profile a shared GPU whose field
    the source measures per process has one for the unattributed remainder plus one per sharing pod;
    ``once``: a MIG GPU's device-wide field is one series for the GPU."""
    out: dict[str, int] = defaultdict(int)
    for r in snapshot.readings:
        if fid in r.values:
            uuid, sharing = r.device.gpu_uuid, pods[r.device.gpu_uuid]
            if once and r.device.is_mig and fid in fields.DEVICE_WIDE:
                out[uuid] = 1
            else:
                out[uuid] += 1 + len(sharing) if len(sharing) > 1 and fid in split else 1
    return dict(out)


def _by_uuid(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["UUID"]: float(r["value"][1]) for r in result}


def _rounded(by_field: dict[str, dict[str, float]]) -> dict:
    return {f: {u: round(v, 6) for u, v in values.items()} for f, values in by_field.items()}


def _readings(source, t: float, names: dict, once: bool) -> dict:
    """The source's device values at ``t`` in each name's unit, per GPU UUID (rounded like _rounded): a
    MIG GPU's instances added up, its device-wide fields only once with ``once``."""
    readings, out = source.read(t).readings, {}
    for f, n in names.items():
        dcgm, totals = fields.BY_NAME[f], defaultdict(float)
        for r in readings:
            if dcgm.id in r.values:
                value = r.values[dcgm.id] * dcgm.to_base / n.to_base
                if once and r.device.is_mig and dcgm.id in fields.DEVICE_WIDE:
                    totals[r.device.gpu_uuid] = value  # the board's, the same on every instance
                else:
                    totals[r.device.gpu_uuid] += value
        out[f] = {u: round(v, 6) for u, v in totals.items()}
    return out


def test_opencost_collector_scrapes_are_queried_too():
    """Collector mode reads dcgm-exporter's families directly; the queries above cover the same ones."""
    doc = yaml.safe_load((FIXTURES / "opencost.yaml").read_text())
    queried = set().union(*(metric_names(q.expr) for q in QUERIES if q.source == "OpenCost"))
    assert set(doc["collector_scrape"]["metrics"]) <= queried
