"""Writes the Grafana dashboards in this directory (plain JSON, fixed uids, `${datasource}` variable).

The JSON files are what Grafana, the Helm chart and users import; this script is how they are
edited, so every dashboard shares the same datasource variable, tags and panel conventions.
`python dashboards/build.py` rewrites them; tests/test_dashboards.py fails when they drift.

Queries use the recording rules of gpuwatch-rules.yaml where they can, because those normalise
gpuwatch's and NVIDIA dcgm-exporter's labels (`Hostname`/`hostname`, `exported_pod`/`pod`). Raw
series are queried with both spellings (`A{pod=...} or A{exported_pod=...}`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
EXPORTER_JOBS = '.*(gpuwatch-exporter|dcgm-exporter).*'
# one value per device (shared GPUs have one series per pod)
ALLOCATED = '{pod!=""}'
DEVICES = "max by (hostname, UUID, GPU_I_ID, GPU_I_PROFILE, modelName) ({m})"


def team(expr: str) -> str:
    """``expr`` (with namespace, pod labels) joined to kube-state-metrics' pod label `team`;
    the namespace stands in when the pod has none (or kube-state-metrics is absent)."""
    joined = (f"({expr}) * on (namespace, pod) group_left (label_team) "
              "max by (namespace, pod, label_team) (kube_pod_labels)")
    with_team = f"({joined}) or on (namespace, pod) ({expr})"
    return (f'label_replace(label_replace({with_team}, "team", "$1", "namespace", "(.*)"), '
            f'"team", "$1", "label_team", "(.+)")')


def raw(metric: str, *, selector: str = "") -> str:
    """A raw DCGM series for the chosen pod, whichever label spelling the exporter used."""
    extra = f",{selector}" if selector else ""
    return (f'{metric}{{namespace="$namespace",pod="$pod"{extra}}} '
            f'or {metric}{{exported_namespace="$namespace",exported_pod="$pod"{extra}}}')


def target(expr: str, legend: str = "", *, instant: bool = False, ref: str = "A") -> dict:
    t = {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend or "__auto"}
    if instant:
        t |= {"instant": True, "range": False, "format": "table"}
    return t


def panel(kind: str, title: str, targets: list[dict], grid: tuple[int, int, int, int], *,
          unit: str = "", description: str = "", minmax: tuple | None = None, options: dict | None = None) -> dict:
    x, y, w, h = grid
    defaults: dict = {"unit": unit} if unit else {}
    if minmax:
        defaults |= {"min": minmax[0], "max": minmax[1]}
    return {"type": kind, "title": title, "description": description, "datasource": DS,
            "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []}, "options": options or {}}


def query_var(name: str, label: str, query: str, *, multi: bool = False) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"}, "definition": query, "refresh": 2,
            "sort": 1, "multi": multi, "includeAll": multi, "current": {}, "options": [], "hide": 0}


def dashboard(uid: str, title: str, description: str, panels: list[dict], variables: list[dict] = ()) -> dict:
    datasource = {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
                  "current": {}, "options": [], "refresh": 1, "regex": "", "hide": 0}
    for number, item in enumerate(panels, start=1):
        item["id"] = number
    return {"uid": uid, "title": title, "description": description, "tags": ["gpuwatch", "gpu"],
            "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1, "timezone": "utc",
            "time": {"from": "now-24h", "to": "now"}, "refresh": "1m", "fiscalYearStartMonth": 0,
            "links": [{"title": "gpuwatch", "type": "dashboards", "tags": ["gpuwatch"], "asDropdown": True}],
            "annotations": {"list": []}, "templating": {"list": [datasource, *variables]}, "panels": panels}


def fleet() -> dict:
    reported, effective = "gpuwatch:gpu_reported_utilization:ratio", "gpuwatch:gpu_effective_utilization:ratio"
    node = '{hostname=~"$node"}'
    pct = {"unit": "percentunit", "minmax": (0, 1)}
    return dashboard("gpuwatch-fleet", "gpuwatch / Fleet efficiency",
                     "Reported (GPU_UTIL, or GR_ENGINE_ACTIVE on MIG) against effective (SM_ACTIVE) utilization.", [
        panel("stat", "Reported utilization", [target("gpuwatch:fleet_reported_utilization:ratio")], (0, 0, 4, 4),
              description="Mean over devices of GPU_UTIL/100 (GR_ENGINE_ACTIVE for MIG instances).", **pct),
        panel("stat", "Effective utilization", [target("gpuwatch:fleet_effective_utilization:ratio")], (4, 0, 4, 4),
              description="Mean over devices of SM_ACTIVE; empty without profiling metrics.", **pct),
        panel("stat", "GPUs and MIG instances", [target(f"count({DEVICES.format(m=reported)})")], (8, 0, 4, 4)),
        panel("stat", "Allocated", [target(f"count({DEVICES.format(m=reported + ALLOCATED)})")], (12, 0, 4, 4)),
        panel("stat", "Idle while allocated", [target("count(pod:gpuwatch_gpu_idle:bool5m == 1) or vector(0)")],
              (16, 0, 4, 4), description="Allocated devices idle over the last 5 minutes."),
        panel("stat", "Falsely utilized", [target("count(pod:gpuwatch_gpu_false_util:bool5m == 1) or vector(0)")],
              (20, 0, 4, 4), description="Reported >= 50 % while SM activity < 25 % (last 5 minutes)."),
        panel("timeseries", "Fleet: reported vs effective", [
            target("gpuwatch:fleet_reported_utilization:ratio", "reported"),
            target("gpuwatch:fleet_effective_utilization:ratio", "effective", ref="B")], (0, 4, 12, 9), **pct),
        panel("timeseries", "Gap (reported - effective) by model", [
            target(f"avg by (modelName) ({DEVICES.format(m=reported + node)}) - "
                   f"avg by (modelName) ({DEVICES.format(m=effective + node)})", "{{modelName}}")],
              (12, 4, 12, 9), unit="percentunit",
              description="Large gaps mean kernels are running but using few SMs (false utilization)."),
        panel("timeseries", "Reported utilization by node", [
            target(f"avg by (hostname) ({DEVICES.format(m=reported + node)})", "{{hostname}}")],
              (0, 13, 12, 9), **pct),
        panel("timeseries", "Effective utilization by node", [
            target(f"avg by (hostname) ({DEVICES.format(m=effective + node)})", "{{hostname}}")],
              (12, 13, 12, 9), **pct),
        panel("timeseries", "Power draw", [target("sum(max by (UUID) (DCGM_FI_DEV_POWER_USAGE))", "watts")],
              (0, 22, 12, 8), unit="watt",
              description="Per GPU once (MIG instances repeat their GPU's power series)."),
        panel("timeseries", "Waste by kind (analyzer findings)", [
            target("sum by (kind) (gpuwatch_waste_usd)", "{{kind}}")], (12, 22, 12, 8), unit="currencyUSD",
              description="From `gpuwatch export-derived`: idle, false_util, stranded and unallocated cost."),
        *topology(node),
    ], [query_var("node", "Node", f"label_values({reported}, hostname)", multi=True)])


def topology(node: str) -> list[dict]:
    """The Topology row: free GPUs against free NVLink k-blocks per pool (GPU model), from the recording
    rules over gpuwatch's exporter series (dcgm-exporter serves none: the row stays empty there)."""
    pool = "sum by (modelName{extra}) ({m} * on (cluster, hostname) group_left (modelName) gpuwatch:node_model:info)"
    stuck = ('count((gpuwatch:pool_free_gpus:sum{k="8"} >= 8) and on (cluster, modelName, k) '
             '(gpuwatch:pool_free_nvlink_block:max == 0)) or vector(0)')
    return [
        {**panel("row", "Topology", [], (0, 30, 24, 1)), "collapsed": False, "panels": []},
        panel("stat", "Pools with 8+ GPUs free but no 8-GPU NVLink block", [target(stuck)], (0, 31, 6, 9),
              description="GPU pools (per cluster and model) where 8 or more whole GPUs are free on nodes that can "
                          "hold an 8-GPU NVLink block, yet none has one free: the GpuwatchFreeGpusNoBlock condition."),
        panel("timeseries", "Free GPUs vs free NVLink blocks by pool", [
            target(pool.format(extra="", m=f"gpuwatch:node_free_gpus:max{node}"), "{{modelName}} free GPUs"),
            target(pool.format(extra=", k", m='gpuwatch:node_free_nvlink_block:max{k=~"4|8",hostname=~"$node"}'),
                   "{{modelName}} nodes with a free NVLink {{k}}-block", ref="B")], (6, 31, 18, 9),
              description="Whole GPUs free per the kubelet against the nodes where a free, fully NVLink-connected "
                          "k-GPU block exists (each can start one k-GPU job): many free GPUs and no blocks is "
                          "fragmentation. gpuwatch's exporter only."),
    ]


def idle_by_team() -> dict:
    idle = "pod:gpuwatch_gpu_idle:bool5m"
    allocated = "(pod:gpuwatch_gpu_reported_utilization:avg5m * 0 + 1)"
    return dashboard("gpuwatch-idle-teams", "gpuwatch / Idle allocated GPUs by team",
                     "Team = kube-state-metrics pod label `team` (kube_pod_labels, needs "
                     "--metric-labels-allowlist=pods=[team]); the namespace when a pod has none.", [
        panel("bargauge", "Idle allocated GPUs by team (now)", [
            target(f"sort_desc(sum by (team) ({team(idle)}))", "{{team}}", instant=True)], (0, 0, 12, 9),
              options={"orientation": "horizontal", "displayMode": "gradient"}),
        panel("bargauge", "Idle share of allocated GPUs by team (now)", [
            target(f"sum by (team) ({team(idle)}) / sum by (team) ({team(allocated)})", "{{team}}", instant=True)],
              (12, 0, 12, 9), unit="percentunit", minmax=(0, 1),
              options={"orientation": "horizontal", "displayMode": "gradient"}),
        panel("timeseries", "Idle allocated GPUs by team", [
            target(f"sum by (team) ({team(idle)})", "{{team}}")], (0, 9, 24, 9),
              options={"legend": {"displayMode": "table", "placement": "right", "calcs": ["mean", "max"]}}),
        panel("table", "Idle pods now", [target(f"{team(idle)} == 1", instant=True)], (0, 18, 24, 9),
              description="Each row: a pod holding a device idle for the last 5 minutes."),
        panel("bargauge", "Idle GPU-hours by team (analyzer)", [
            target("sort_desc(sum by (team) (gpuwatch_idle_gpu_hours))", "{{team}}", instant=True)],
              (0, 27, 12, 9), unit="h", options={"orientation": "horizontal"}),
        panel("bargauge", "Waste by team and kind (analyzer)", [
            target("sort_desc(sum by (team, kind) (gpuwatch_waste_usd))", "{{team}} {{kind}}", instant=True)],
              (12, 27, 12, 9), unit="currencyUSD", options={"orientation": "horizontal"}),
    ])


def pod_detail() -> dict:
    sel = '{namespace="$namespace",pod="$pod"}'
    legend = "{{hostname}} {{UUID}} {{GPU_I_PROFILE}}"
    pct = {"unit": "percentunit", "minmax": (0, 1)}
    return dashboard("gpuwatch-pod", "gpuwatch / Pod GPU detail", "Everything gpuwatch knows about one pod's GPUs.", [
        panel("timeseries", "Reported vs effective utilization", [
            target(f"gpuwatch:gpu_reported_utilization:ratio{sel}", f"reported {legend}"),
            target(f"gpuwatch:gpu_effective_utilization:ratio{sel}", f"effective {legend}", ref="B")],
              (0, 0, 24, 9), **pct),
        panel("state-timeline", "Idle / falsely utilized (5 m)", [
            target(f"pod:gpuwatch_gpu_idle:bool5m{sel}", f"idle {legend}"),
            target(f"pod:gpuwatch_gpu_false_util:bool5m{sel}", f"false-util {legend}", ref="B")], (0, 9, 24, 6)),
        panel("timeseries", "SM occupancy, tensor pipe, DRAM activity", [
            target(raw("DCGM_FI_PROF_SM_OCCUPANCY"), f"SM occupancy {legend}"),
            target(raw("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), f"tensor {legend}", ref="B"),
            target(raw("DCGM_FI_PROF_DRAM_ACTIVE"), f"DRAM {legend}", ref="C")], (0, 15, 12, 9), **pct),
        panel("timeseries", "Framebuffer used", [
            target(f"({raw('DCGM_FI_DEV_FB_USED')}) * 1048576", legend)], (12, 15, 12, 9), unit="bytes",
              description="Memory held while idle is a model kept loaded, not work."),
        panel("timeseries", "Power", [target(raw("DCGM_FI_DEV_POWER_USAGE"), legend)], (0, 24, 12, 8), unit="watt"),
        panel("timeseries", "NVLink traffic", [
            target(raw("DCGM_FI_PROF_NVLINK_TX_BYTES"), f"tx {legend}"),
            target(raw("DCGM_FI_PROF_NVLINK_RX_BYTES"), f"rx {legend}", ref="B")], (12, 24, 12, 8), unit="Bps"),
        panel("table", "Allocation (kubelet pod-resources)", [
            target(f"gpuwatch_gpu_allocation_info{sel}", instant=True)], (0, 32, 24, 6),
              description="gpuwatch's exporter only: resource name, device and sharing replica (vgpu)."),
    ], [query_var("namespace", "Namespace", "label_values(pod:gpuwatch_gpu_reported_utilization:avg5m, namespace)"),
        query_var("pod", "Pod", 'label_values(pod:gpuwatch_gpu_reported_utilization:avg5m{namespace="$namespace"}, pod)')])


def mig() -> dict:
    reported = 'gpuwatch:gpu_reported_utilization:ratio{GPU_I_ID!="",hostname=~"$node"}'
    allocated = 'gpuwatch:gpu_reported_utilization:ratio{GPU_I_ID!="",hostname=~"$node",pod!=""}'
    instances = "max by (hostname, UUID, GPU_I_ID, GPU_I_PROFILE) ({m})"
    fb = ('max by (hostname, UUID, GPU_I_ID, GPU_I_PROFILE) (label_replace(DCGM_FI_DEV_FB_USED{GPU_I_ID!=""}, '
          '"hostname", "$1", "Hostname", "(.+)")) * 1048576')
    return dashboard("gpuwatch-mig", "gpuwatch / MIG instances", "MIG GPU instances: profiles, use and stranded slices.", [
        panel("stat", "MIG instances", [target(f"count({instances.format(m=reported)})")], (0, 0, 6, 4)),
        panel("stat", "Allocated instances",
              [target(f"count({instances.format(m=allocated)}) or vector(0)")], (6, 0, 6, 4)),
        panel("stat", "Stranded memory slices (analyzer)", [target("sum(gpuwatch_mig_stranded_slices)")], (12, 0, 6, 4),
              description="Free slices no profile in the demand mix can use (gpuwatch analyze)."),
        panel("stat", "Reclaimable GPUs (analyzer)", [target("sum(gpuwatch_reclaimable_gpus)")], (18, 0, 6, 4)),
        panel("bargauge", "Instances by profile", [
            target(f"count by (GPU_I_PROFILE) ({instances.format(m=reported)})", "{{GPU_I_PROFILE}}", instant=True)],
              (0, 4, 12, 8), options={"orientation": "horizontal"}),
        panel("table", "Placements (gpuwatch exporter)", [
            target('gpuwatch_mig_instance_info{hostname=~"$node"}', instant=True)], (12, 4, 12, 8),
              description="Profile id and placement start/size in memory slices, per instance."),
        panel("timeseries", "Engine activity per instance", [
            target(reported, "{{hostname}} {{UUID}} {{GPU_I_PROFILE}}/{{GPU_I_ID}} {{pod}}")], (0, 12, 24, 9),
              unit="percentunit", minmax=(0, 1)),
        panel("timeseries", "Framebuffer used per instance", [
            target(fb, "{{hostname}} {{UUID}} {{GPU_I_PROFILE}}/{{GPU_I_ID}}")], (0, 21, 12, 8), unit="bytes"),
        panel("bargauge", "Stranded slices by node (analyzer)", [
            target("sum by (hostname) (gpuwatch_mig_stranded_slices)", "{{hostname}}", instant=True)],
              (12, 21, 12, 8), options={"orientation": "horizontal"}),
    ], [query_var("node", "Node", 'label_values(gpuwatch:gpu_reported_utilization:ratio{GPU_I_ID!=""}, hostname)',
                  multi=True)])


def exporter_health() -> dict:
    up = f'up{{job=~"{EXPORTER_JOBS}"}}'
    per_node = "count by (hostname, Hostname) (count by (hostname, Hostname, UUID) (DCGM_FI_DEV_GPU_TEMP))"
    return dashboard("gpuwatch-exporter", "gpuwatch / Exporter health",
                     "Scrape health of gpuwatch's exporter and NVIDIA dcgm-exporter, and gpuwatch's sources.", [
        panel("stat", "Exporter targets up", [target(f"sum({up})")], (0, 0, 6, 4)),
        panel("stat", "Exporter targets down", [target(f"count({up} == 0) or vector(0)")], (6, 0, 6, 4)),
        panel("stat", "GPUs lost", [target("count(gpuwatch_gpu_lost == 1) or vector(0)")], (12, 0, 6, 4)),
        panel("stat", "Nodes without pod attribution",
              [target("count(gpuwatch_attribution_error_info == 1) or vector(0)")], (18, 0, 6, 4)),
        panel("timeseries", "Target up", [target(up, "{{job}} {{node}} {{instance}}")], (0, 4, 12, 8)),
        panel("timeseries", "Scrape duration", [
            target(f'scrape_duration_seconds{{job=~"{EXPORTER_JOBS}"}}', "{{job}} {{node}} {{instance}}")],
              (12, 4, 12, 8), unit="s"),
        panel("timeseries", "Source up (gpuwatch)", [target("gpuwatch_source_up", "{{source}} {{node}} {{instance}}")],
              (0, 12, 12, 8), minmax=(0, 1)),
        panel("timeseries", "Source read duration (gpuwatch)", [
            target("gpuwatch_source_duration_seconds", "{{source}} {{node}} {{instance}}")], (12, 12, 12, 8), unit="s"),
        panel("timeseries", "GPUs reporting per node", [
            target(per_node, "{{hostname}}{{Hostname}}"),
            target("gpuwatch_gpus", "seen by source {{node}} {{instance}}", ref="B")], (0, 20, 12, 8)),
        panel("timeseries", "Samples per scrape", [
            target(f'scrape_samples_scraped{{job=~"{EXPORTER_JOBS}"}}', "{{job}} {{node}} {{instance}}")],
              (12, 20, 12, 8)),
        panel("table", "Attribution errors and lost GPUs", [
            target("gpuwatch_attribution_error_info == 1", instant=True),
            target("gpuwatch_gpu_lost == 1", instant=True, ref="B")], (0, 28, 12, 8)),
        panel("table", "Last XID per GPU", [target("DCGM_FI_DEV_XID_ERRORS > 0", instant=True)], (12, 28, 12, 8),
              description="Non-zero = the last XID error code the GPU reported."),
        panel("table", "Versions", [target("gpuwatch_build_info", instant=True)], (0, 36, 24, 5)),
    ])


DASHBOARDS = {"gpuwatch-fleet-efficiency.json": fleet, "gpuwatch-idle-by-team.json": idle_by_team,
              "gpuwatch-pod-detail.json": pod_detail, "gpuwatch-mig.json": mig,
              "gpuwatch-exporter-health.json": exporter_health}


def render() -> dict[str, str]:
    """File name -> JSON text, exactly as committed."""
    return {name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n" for name, build in DASHBOARDS.items()}


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote dashboards/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
