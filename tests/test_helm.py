"""The Helm chart, rendered and linted by Helm's own Go engine (helm-python-sdk; no helm binary).

Checks, for the default values and helm/gpuwatch/ci/all-on-values.yaml (every component on):
`helm lint` reports no errors; every rendered object validates against the newest Kubernetes
schema kubernetes-validate ships (strict: unknown fields fail); the prometheus-operator objects
validate against tests/fixtures/helm/monitoring-crds.yaml (kubernetes-validate has no CRD
schemas); and what each component must be: the exporter's node selection, tolerations,
read-only socket mount, securityContext matrix (SYS_ADMIN only for DCGM profiling), probes, no
API token; reclaim off and dry-run by default with exactly its RBAC; the PrometheusRule and the
dashboards ConfigMap carry the repository's files byte for byte (through the files -> dashboards
symlink, also inside a packaged .tgz). Rendered command lines are parsed by the real `gpuwatch`
CLI parsers, so a flag the CLI does not know fails here.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.support.helm_chart import (
    CHART,
    ROOT,
    all_on_values,
    container,
    find,
    helm,
    kinds,
    pod_spec,
    render,
    render_raw,
    with_choice,
)

DASHBOARDS = ROOT / "dashboards"
VALUE_SETS = {"default": {}, "all-on": None}  # None = ci/all-on-values.yaml


def values_for(name: str) -> dict:
    return all_on_values() if VALUE_SETS[name] is None else VALUE_SETS[name]


@pytest.fixture(scope="module")
def default_docs():
    return render()


@pytest.fixture(scope="module")
def all_on_docs():
    return render(all_on_values())


# --- lint and schema validation -------------------------------------------------------------

@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_lint_has_no_errors_or_warnings(value_set):
    report = helm().lint(CHART, with_choice(values_for(value_set)), strict=True, namespace="gpuwatch")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_builtin_object_validates_against_current_kubernetes(value_set):
    kv = pytest.importorskip("kubernetes_validate")
    version = kv.utils.latest_version()
    checked = 0
    for doc in render(values_for(value_set)):
        if doc.obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: kubernetes-validate has no schema; see the next test
        try:
            kv.validate(doc.obj, version, strict=True)
        except kv.ValidationError as err:
            pytest.fail(f"{doc.template}: {doc.kind}/{doc.name} invalid for Kubernetes {version} at "
                        f"{'.'.join(map(str, err.path))}: {err.message}")
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_prometheus_operator_objects_validate_against_their_crd_schemas(value_set):
    jsonschema = pytest.importorskip("jsonschema")
    crds = yaml.safe_load((ROOT / "tests/fixtures/helm/monitoring-crds.yaml").read_text())
    seen = set()
    for doc in render(values_for(value_set)):
        if not doc.obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        schema = {**crds["kinds"][doc.kind], "definitions": crds["definitions"]}
        errors = list(jsonschema.Draft7Validator(schema).iter_errors(doc.obj))
        assert not errors, f"{doc.kind}/{doc.name}: " + "; ".join(
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors)
        seen.add(doc.kind)
    expected = {"ServiceMonitor", "PrometheusRule"} | ({"PodMonitor"} if value_set == "all-on" else set())
    assert seen == expected


def test_crd_schema_fixture_catches_a_misspelt_field():
    jsonschema = pytest.importorskip("jsonschema")
    crds = yaml.safe_load((ROOT / "tests/fixtures/helm/monitoring-crds.yaml").read_text())
    monitor = find(render(), "ServiceMonitor", "exporter")
    monitor["spec"]["endpoints"][0]["honourLabels"] = True
    schema = {**crds["kinds"]["ServiceMonitor"], "definitions": crds["definitions"]}
    assert any("honourLabels" in e.message for e in jsonschema.Draft7Validator(schema).iter_errors(monitor))


# --- what is on by default -------------------------------------------------------------------

def test_default_components(default_docs):
    assert kinds(default_docs) >= {
        ("DaemonSet", "exporter"), ("Service", "exporter"), ("ServiceMonitor", "exporter"),
        ("CronJob", "analyzer"), ("Job", "analyzer"), ("Deployment", "app"), ("Service", "app"),
        ("CronJob", "report"), ("Deployment", "derived"), ("ServiceMonitor", "derived"),
        ("ConfigMap", "dashboards"), ("PrometheusRule", "rules"), ("PersistentVolumeClaim", "data")}
    assert not [d for d in default_docs if d.component == "reclaim"], "reclaim must be off by default"
    assert not [d for d in default_docs if d.kind in ("Ingress", "PodMonitor", "ClusterRole", "Role")]


def test_components_can_be_switched_off_one_by_one():
    for component in ("exporter", "analyzer", "app", "report", "reclaim", "derived"):
        values = {component: {"enabled": False}} if component != "reclaim" else {}
        docs = render(values)
        assert not [d for d in docs if d.component == component], component


# --- exporter --------------------------------------------------------------------------------

def exporter_pod(values: dict | None = None) -> dict:
    return pod_spec(find(render(values), "DaemonSet", "exporter"))


def test_exporter_runs_on_gpu_nodes_only_and_tolerates_gpu_taints():
    spec = exporter_pod()
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert "priorityClassName" not in exporter_pod({"exporter": {"priorityClassName": ""}})


def test_exporter_needs_no_api_token_and_mounts_the_socket_dir_read_only():
    spec = exporter_pod()
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    volume = next(v for v in spec["volumes"] if v["name"] == "pod-resources")
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    mount = next(m for m in container(spec, "exporter")["volumeMounts"] if m["name"] == "pod-resources")
    assert mount == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    k0s = exporter_pod({"exporter": {"kubeletSocketDir": "/var/lib/k0s/kubelet/pod-resources/"}})
    args = container(k0s, "exporter")["args"]
    assert args[args.index("--kubelet-socket") + 1] == "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"
    off = exporter_pod({"exporter": {"attribution": False}})
    assert not [v for v in off["volumes"] if v["name"] == "pod-resources"]
    off_args = container(off, "exporter")["args"]
    assert off_args[off_args.index("--kubelet-socket") + 1] == ""


def test_exporter_env_probes_and_ports():
    c = container(exporter_pod(), "exporter")
    node_name = next(e for e in c["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]


@pytest.mark.parametrize(("source", "profiling", "run_as_root", "sys_admin", "uid"), [
    ("dcgm", True, True, True, 0),
    ("dcgm", False, True, False, 0),
    ("nvml", True, True, False, 0),
    ("nvml", True, False, False, 10001),
    ("auto", True, False, False, 10001),
    ("simulate", False, False, False, 10001),
])
def test_exporter_security_context(source, profiling, run_as_root, sys_admin, uid):
    spec = exporter_pod({"exporter": {"source": source, "profiling": profiling, "runAsRoot": run_as_root}})
    ctx = container(spec, "exporter")["securityContext"]
    assert ctx["capabilities"]["drop"] == ["ALL"]
    assert ctx["capabilities"].get("add", []) == (["SYS_ADMIN"] if sys_admin else [])
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsUser"] == uid
    assert spec["securityContext"]["runAsNonRoot"] is (uid != 0)


def test_default_exporter_is_dcgm_with_profiling_hence_sys_admin():
    spec = exporter_pod()
    c = container(spec, "exporter")
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert c["image"] == 'ghcr.io/gpuwatch/gpuwatch-exporter:' + __import__("gpuwatch").__version__


def test_every_gpuwatch_container_names_its_command(all_on_docs):
    # the exporter image's ENTRYPOINT is `gpuwatch export`: args alone would run `gpuwatch export app ...`
    for doc in all_on_docs:
        if doc.kind not in ("Deployment", "CronJob", "Job", "DaemonSet"):
            continue
        spec = pod_spec(doc.obj)
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c.get("command", [""])[0] in ("gpuwatch", "python"), (doc.name, c["name"])


def test_dcgm_profiling_without_root_is_refused_with_a_clear_message():
    with pytest.raises(helm().HelmRenderError, match=re.escape("exporter.source=dcgm with exporter.profiling=true needs CAP_SYS_ADMIN")):
        render({"exporter": {"source": "dcgm", "profiling": True, "runAsRoot": False}})


def test_exporter_args_are_accepted_by_gpuwatch_export():
    cli = pytest.importorskip("gpuwatch.cli")
    for values in ({}, all_on_values()):
        args = container(exporter_pod(values), "exporter")["args"]
        parsed = parse(cli, args)
        exporter = values.get("exporter", {})
        assert parsed.source == exporter.get("source", "dcgm")
        assert parsed.listen == ":9400"
        assert parsed.kubelet_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
        assert parsed.no_profiling is (not exporter.get("profiling", True))
        assert parsed.compat == exporter.get("compat", "dcgm-exporter-4.8.2")
        assert parsed.hostname_label == (exporter.get("hostnameLabel") or None)  # None: the profile's
        assert parsed.kubernetes_virtual_gpus is exporter.get("kubernetesVirtualGpus", False)
        meta = exporter.get("kubernetes", {})
        assert parsed.kubernetes_enable_pod_uid is meta.get("enablePodUID", False)
        assert parsed.kubernetes_enable_pod_labels is meta.get("enablePodLabels", False)
        assert parsed.kubernetes_pod_label_allowlist_regex == (",".join(meta.get("podLabelAllowlistRegex", [])) or None)
        assert parsed.proc_root == ("/host/proc" if exporter.get("processOwners") else None)


def test_process_owners_mount_the_hosts_proc_read_only_and_only_when_on():
    off = exporter_pod()
    assert not [v for v in off["volumes"] if v["name"] == "host-proc"]
    on = exporter_pod({"exporter": {"processOwners": True}})
    assert next(v for v in on["volumes"] if v["name"] == "host-proc")["hostPath"] == {"path": "/proc", "type": "Directory"}
    mount = next(m for m in container(on, "exporter")["volumeMounts"] if m["name"] == "host-proc")
    assert mount == {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}


def test_pod_metadata_gets_a_list_only_cluster_role_and_the_token_only_when_on():
    off = render({})
    assert not any(d.kind in ("ClusterRole", "ServiceAccount") and d.component == "exporter" for d in off)
    assert exporter_pod({})["automountServiceAccountToken"] is False
    values = {"exporter": {"kubernetes": {"enablePodUID": True}}}
    docs = render(values)
    role = find(docs, "ClusterRole", "exporter")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    binding = find(docs, "ClusterRoleBinding", "exporter")
    account = find(docs, "ServiceAccount", "exporter")
    spec = exporter_pod(values)
    assert spec["automountServiceAccountToken"] is True
    assert spec["serviceAccountName"] == account["metadata"]["name"] == binding["subjects"][0]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_scrape_config_honours_exporter_labels_and_drops_the_target_pod():
    values = all_on_values()
    values["exporter"]["scrapeConvention"] = "gpuwatch"
    docs = render(values)
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        endpoint = find(docs, kind, "exporter")["spec"][key][0]
        assert endpoint["honorLabels"] is True
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
        drop = [r for r in endpoint["relabelings"] if r.get("action") == "labeldrop"]
        assert drop == [{"action": "labeldrop", "regex": "(pod|namespace|container)"}]
    service = find(docs, "Service", "exporter")
    monitor = find(docs, "ServiceMonitor", "exporter")
    # the rules match job="gpuwatch-exporter": the jobLabel must resolve to it for any release name
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "gpuwatch-exporter"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["port"] == 9400


@pytest.mark.parametrize("convention", ["gpuwatch", "dcgm-exporter"])
def test_the_scrape_convention_switch(convention):
    """gpuwatch: honorLabels and the target's pod labels dropped (pod = the workload); dcgm-exporter
    (the default): honorLabels false and the target's pod kept, so Prometheus moves the workload to
    exported_*, which metricRelabelings copy to pod/namespace/container (tests/test_helm_scrape_prometheus.py
    scrapes both)."""
    values = all_on_values()
    values["exporter"]["scrapeConvention"] = convention
    docs = render(values)
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        endpoint = find(docs, kind, "exporter")["spec"][key][0]
        assert endpoint["honorLabels"] is (convention == "gpuwatch")
        drops = [r for r in endpoint["relabelings"] if r.get("action") == "labeldrop"]
        assert bool(drops) is (convention == "gpuwatch")
        copies = [r for r in endpoint.get("metricRelabelings", []) if r["sourceLabels"][0].startswith("exported_")]
        assert [(r["sourceLabels"], r["targetLabel"]) for r in copies] == (
            [([f"exported_{k}"], k) for k in ("pod", "namespace", "container")] if convention == "dcgm-exporter" else [])


# OpenCost's discovery of the exporter: tests/test_helm_opencost.py


# --- analyzer, app, report, derived ----------------------------------------------------------

def test_analyzer_cronjob_and_deployment_loop():
    cron = find(render(), "CronJob", "analyzer")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    args = container(pod_spec(cron), "analyzer")["args"]
    assert args[:2] == ["--db", "/data/gpuwatch.duckdb"] and "--every" not in args
    assert "prometheus://prometheus-operated.monitoring.svc:9090" in args
    loop = find(render({"analyzer": {"mode": "deployment", "every": "10m"}}), "Deployment", "analyzer")
    assert loop["spec"]["replicas"] == 1 and loop["spec"]["strategy"]["type"] == "Recreate"
    loop_args = container(pod_spec(loop), "analyzer")["args"]
    assert loop_args[loop_args.index("--every") + 1] == "10m"


def test_analyzer_steps_are_accepted_by_gpuwatch_ingest_and_analyze():
    cli = pytest.importorskip("gpuwatch.cli")
    script = load_script("analyzer")
    args = container(pod_spec(find(render(), "CronJob", "analyzer")), "analyzer")["args"]
    ingest, analyze = script.split_args(args[args.index("--"):])
    for command, extra in (("ingest", ingest), ("analyze", analyze)):
        parse(cli, [command, *extra, "--db", "/data/gpuwatch.duckdb.next"])


def test_the_chart_installs_with_prices_from_values(tmp_path):
    """prices.models becomes the analyzer's prices.csv and every ingest loads it (winning over the
    list prices, which are on by default): run that ingest, with the rendered file, on sample_data."""
    h100, mig = "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3/1g.10gb"
    docs = render({"prices": {"models": {h100: 3.5, mig: 0.6}}})
    args = container(pod_spec(find(docs, "CronJob", "analyzer")), "analyzer")["args"]
    assert args[args.index("/scripts/prices.csv") - 1] == "--prices" and args[args.index("list") - 1] == "--prices"
    config = next(d for d in docs if d.kind == "ConfigMap" and d.component == "analyzer")
    text = config.obj["data"]["prices.csv"]
    assert text.splitlines() == ["gpu_model,usd_per_gpu_hour,node_label", f"{h100},3.5,", f"{mig},0.6,"]
    prices = tmp_path / "prices.csv"
    prices.write_text(text)
    script = load_script("analyzer")
    ingest, _ = script.split_args(args[args.index("--"):])
    ingest = [str(prices) if a == "/scripts/prices.csv" else a for a in ingest]
    ingest[ingest.index("--from") + 1] = str(ROOT / "sample_data")
    cli = pytest.importorskip("gpuwatch.cli")
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", *ingest, "--db", str(db)]) == 0
    from gpuwatch import store

    con = store.connect(str(db), read_only=True)
    applied = store.price_coverage(con).set_index("gpu_model")
    assert applied.loc[h100, "usd_per_gpu_hour"] == 3.5 and applied.loc[h100, "price_source"] == "cluster price"
    # the bundle's own prices.csv prices the A100 too (cluster price); the list price is only a fallback
    assert applied.loc["NVIDIA A100-SXM4-80GB", "price_source"] == "cluster price"
    con.close()
    spot = render({"prices": {"nodeLabels": {"karpenter.sh/capacity-type=spot": {h100: 1.6}}}})
    config = next(d for d in spot if d.kind == "ConfigMap" and d.component == "analyzer")
    assert config.obj["data"]["prices.csv"].splitlines() == ["gpu_model,usd_per_gpu_hour,node_label",
                                                             f"{h100},1.6,karpenter.sh/capacity-type=spot"]
    assert "/scripts/prices.csv" in container(pod_spec(find(spot, "CronJob", "analyzer")), "analyzer")["args"]
    with pytest.raises(Exception, match="does not match pattern"):
        render({"prices": {"nodeLabels": {"spot": {h100: 1.6}}}})  # not a key=value selector
    off = render({"prices": {"listPrices": False}})
    args = container(pod_spec(find(off, "CronJob", "analyzer")), "analyzer")["args"]
    assert "--prices" not in args


def test_app_reads_the_db_read_only_and_waits_for_it():
    spec = pod_spec(find(render(), "Deployment", "app"))
    app = container(spec, "app")
    assert app["args"] == ["app", "--db", "/data/gpuwatch.duckdb", "--address", "0.0.0.0", "--port", "8501"]
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in app["volumeMounts"]
    assert container(spec, "wait-for-db")["command"][-1] == "/data/gpuwatch.duckdb"
    cli = pytest.importorskip("gpuwatch.cli")
    parsed = parse(cli, app["args"])
    port = pytest.importorskip("gpuwatch.units").parse_port(parsed.port, what="--port")
    assert (parsed.db, parsed.address, port) == ("/data/gpuwatch.duckdb", "0.0.0.0", 8501)


def test_report_runs_mondays_at_midnight_utc():
    cron = find(render(), "CronJob", "report")
    assert cron["spec"]["schedule"] == "0 0 * * 1" and cron["spec"]["timeZone"] == "Etc/UTC"
    args = container(pod_spec(cron), "report")["args"]
    assert args == ["report", "weekly", "--db", "/data/gpuwatch.duckdb", "--out", "/data/reports"]
    cli = pytest.importorskip("gpuwatch.cli")
    parse(cli, args)


def test_report_webhook_url_comes_from_a_secret():
    spec = pod_spec(find(render(all_on_values()), "CronJob", "report"))
    assert [c["name"] for c in spec["initContainers"]] == ["report"]  # report first, then the post
    hook = container(spec, "webhook")
    url = next(e for e in hook["env"] if e["name"] == "GPUWATCH_REPORT_WEBHOOK_URL")
    assert url["valueFrom"]["secretKeyRef"] == {"name": "gpuwatch-report-webhook", "key": "url"}


def test_derived_metrics_are_served_and_scraped():
    docs = render()
    args = container(pod_spec(find(docs, "Deployment", "derived")), "derived")["args"]
    assert args[:3] == ["export-derived", "--db", "/data/gpuwatch.duckdb"]
    assert find(docs, "ServiceMonitor", "derived")["spec"]["endpoints"][0]["port"] == "metrics"
    cli = pytest.importorskip("gpuwatch.cli")
    parse(cli, args)


def test_only_reclaim_gets_an_api_token_and_non_exporter_pods_are_restricted(all_on_docs):
    # all-on turns on pod UID/labels, the exporter's one (list-only) use of the API
    for doc in all_on_docs:
        if doc.kind not in ("Deployment", "CronJob", "Job", "DaemonSet"):
            continue
        spec = pod_spec(doc.obj)
        assert spec["automountServiceAccountToken"] is (doc.component in ("reclaim", "exporter")), doc.name
        if doc.component == "exporter":
            continue
        assert spec["securityContext"]["runAsNonRoot"] is True, doc.name
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, (doc.name, c["name"])
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, (doc.name, c["name"])


def test_read_write_once_volume_keeps_the_db_pods_together():
    docs = render({"reclaim": {"enabled": True}})
    for kind, component in (("CronJob", "analyzer"), ("CronJob", "report"), ("Deployment", "derived"),
                            ("Deployment", "reclaim")):
        affinity = pod_spec(find(docs, kind, component))["affinity"]["podAffinity"]
        term = affinity["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "app"
    rwx = render({"persistence": {"accessModes": ["ReadWriteMany"]}})
    assert "affinity" not in pod_spec(find(rwx, "CronJob", "analyzer"))


def test_no_volume_with_db_components_is_refused():
    with pytest.raises(helm().HelmRenderError, match=re.escape("persistence.enabled=false gives every pod its own empty /data")):
        render({"persistence": {"enabled": False}})
    only_exporter = {c: {"enabled": False} for c in ("analyzer", "app", "report", "derived")}
    docs = render({"persistence": {"enabled": False}, **only_exporter})
    assert {d.component for d in docs} >= {"exporter"}


# --- reclaim ---------------------------------------------------------------------------------

def test_reclaim_is_dry_run_unless_apply_is_set():
    docs = render({"reclaim": {"enabled": True}})
    dry = container(pod_spec(find(docs, "Deployment", "reclaim")), "reclaim")
    assert "--apply" not in dry["args"]
    assert "--policy" not in dry["args"] and not [d for d in docs if d.kind == "ConfigMap" and d.component == "reclaim"]
    acting = container(pod_spec(find(render(all_on_values()), "Deployment", "reclaim")), "reclaim")
    assert "--apply" in acting["args"]


def test_reclaim_reads_findings_from_the_analyzer_and_keeps_its_own_store():
    args = container(pod_spec(find(render({"reclaim": {"enabled": True}}), "Deployment", "reclaim")), "reclaim")["args"]
    assert "--in-cluster" in args
    assert args[args.index("--findings") + 1] == "/data/analysis/idle_hoarding.csv"
    # never the shared file: the controller holds its store open read-write
    assert args[args.index("--db") + 1] == "/data/reclaim.duckdb"


def test_reclaim_policy_in_values_is_accepted_by_the_controller():
    policy = pytest.importorskip("gpuwatch.reclaim.policy")
    cm = find(render(all_on_values()), "ConfigMap", "reclaim")
    parsed = policy.parse(yaml.safe_load(cm["data"]["policy.yaml"]), source="values reclaim.policy")
    assert parsed.min_idle_seconds == 7200 and parsed.namespaces == ("ml-team", "research")


def test_reclaim_args_are_accepted_by_gpuwatch_reclaim():
    cli = pytest.importorskip("gpuwatch.cli")
    args = container(pod_spec(find(render(all_on_values()), "Deployment", "reclaim")), "reclaim")["args"]
    parse(cli, args)


def rules_of(obj: dict) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in obj["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_reclaim_rbac_is_exactly_least_privilege():
    """The verb sets themselves; tests/test_helm_reclaim_rbac.py checks them against the API log."""
    docs = render({"reclaim": {"enabled": True, "apply": True}})
    cluster = rules_of(find(docs, "ClusterRole", "reclaim"))
    expected = {("", "pods", v) for v in ("get", "list", "patch")} | {
        ("", "namespaces", v) for v in ("get", "list")} | {
        ("", "pods/eviction", "create"), ("", "events", "create"),
        ("apps", "replicasets", "get"), ("ray.io", "rayclusters", "get")} | {
        (g, r, v) for g, r in (("apps", "deployments"), ("apps", "statefulsets"), ("batch", "jobs"),
                               ("kubeflow.org", "notebooks"))
        for v in ("get", "patch")}
    assert cluster == expected
    assert not any(verb in ("delete", "deletecollection", "*", "escalate", "bind", "impersonate", "watch")
                   for _, _, verb in cluster)
    lease = find(docs, "Lease", "reclaim")
    args = container(pod_spec(find(docs, "Deployment", "reclaim")), "reclaim")["args"]
    assert args[args.index("--lease-name") + 1] == lease["metadata"]["name"]
    assert args[args.index("--lease-namespace") + 1] == lease["metadata"]["namespace"] == "gpuwatch"
    role = find(docs, "Role", "reclaim")
    assert rules_of(role) == {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    assert role["rules"][0]["resourceNames"] == [lease["metadata"]["name"]]
    assert role["metadata"]["namespace"] == "gpuwatch"
    spec = pod_spec(find(docs, "Deployment", "reclaim"))
    assert spec["serviceAccountName"] == find(docs, "ServiceAccount", "reclaim")["metadata"]["name"]
    binding = find(docs, "ClusterRoleBinding", "reclaim")
    assert binding["subjects"][0]["name"] == spec["serviceAccountName"]
    dry = render({"reclaim": {"enabled": True}})
    assert {verb for _, _, verb in rules_of(find(dry, "ClusterRole", "reclaim"))} == {"get", "list"}
    assert not [d for d in dry if d.kind in ("Role", "Lease")]


def test_reclaim_without_rbac_needs_a_service_account():
    with pytest.raises(helm().HelmRenderError, match=re.escape("reclaim.rbac.serviceAccountName")):
        render({"reclaim": {"enabled": True, "rbac": {"create": False}}})
    docs = render({"reclaim": {"enabled": True, "rbac": {"create": False, "serviceAccountName": "mine"}}})
    assert pod_spec(find(docs, "Deployment", "reclaim"))["serviceAccountName"] == "mine"
    assert not [d for d in docs if d.kind in ("ClusterRole", "Role", "ServiceAccount")]


# --- one source of truth for rules and dashboards ----------------------------------------------

def test_files_link_resolves_to_the_repository_dashboards():
    link = CHART / "files"
    assert link.is_symlink() and link.resolve() == DASHBOARDS.resolve()
    assert (link / "gpuwatch-rules.yaml").is_file()


def test_prometheus_rule_is_the_plain_rules_file():
    rule = find(render(), "PrometheusRule", "rules")
    plain = yaml.safe_load((DASHBOARDS / "gpuwatch-rules.yaml").read_text())
    assert rule["spec"] == plain
    assert "PrometheusRule" not in {d.kind for d in render({"rules": {"enabled": False}})}


def test_dashboards_configmap_carries_every_dashboard_for_the_sidecar():
    cm = find(render(), "ConfigMap", "dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}
    assert set(cm["data"]) == set(files)
    for name, text in files.items():
        assert json.loads(cm["data"][name]) == json.loads(text), name
    moved = find(render(all_on_values()), "ConfigMap", "dashboards")
    assert moved["metadata"]["namespace"] == "monitoring"


def test_packaged_chart_embeds_rules_and_dashboards(tmp_path):
    archive = helm().package(CHART, destination=tmp_path)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        rules = tar.extractfile("gpuwatch/files/gpuwatch-rules.yaml").read().decode()
    assert rules == (DASHBOARDS / "gpuwatch-rules.yaml").read_text()
    assert {f"gpuwatch/files/{p.name}" for p in DASHBOARDS.glob("*.json")} <= names
    assert not [n for n in names if n.endswith(".py") and "/files/" in n], "build.py must not ship"
    with helm().Chart.load(archive) as chart:  # the archive renders on its own (no link needed)
        assert any("PrometheusRule" in text for text in chart.render(with_choice({}), name="g", namespace="g").values())


def test_notes_say_how_to_reach_the_app_and_check_the_exporter():
    notes = render_raw()["gpuwatch/templates/NOTES.txt"]
    assert "kubectl -n gpuwatch port-forward svc/gpuwatch-app 8501:8501" in notes
    assert "curl -s localhost:9400/healthz" in notes and "localhost:9400/metrics" in notes
    dry = render_raw({"reclaim": {"enabled": True}})["gpuwatch/templates/NOTES.txt"]
    assert "dry-run" in dry


# --- helpers ---------------------------------------------------------------------------------

def parse(cli, args: list[str]):
    """Parse ``args`` with the real `gpuwatch` parser; skip when the command is not written yet."""
    command = args[0]
    module = cli.COMMANDS[command][0]
    pytest.importorskip(module, reason=f"`gpuwatch {command}` ({module}) is not written yet")
    try:
        return cli.build_parser(command).parse_args(args)
    except SystemExit:
        pytest.fail(f"`gpuwatch {' '.join(args)}` is rejected by the CLI (see stderr for the flag)")


def load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"chart_{name}", CHART / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scripts_in_configmaps_are_the_chart_files():
    docs = render(all_on_values())
    analyzer = find(docs, "ConfigMap", "analyzer")["data"]["analyzer.py"]
    webhook = find(docs, "ConfigMap", "report")["data"]["report_webhook.py"]
    assert analyzer == (CHART / "scripts/analyzer.py").read_text().rstrip("\n")
    assert webhook == (CHART / "scripts/report_webhook.py").read_text().rstrip("\n")


def test_chart_yaml_is_api_v2_with_an_app_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["appVersion"]
    version = __import__("gpuwatch").__version__
    assert chart["appVersion"] == version, "Chart appVersion must follow gpuwatch.__version__"
    assert Path(CHART / "values.schema.json").is_file()


def test_names_follow_the_release_but_the_scrape_job_does_not():
    docs = render({}, name="prod", namespace="gpu-system")
    daemonset = find(docs, "DaemonSet", "exporter")
    assert daemonset["metadata"]["name"] == "prod-gpuwatch-exporter"
    assert daemonset["metadata"]["namespace"] == "gpu-system"
    assert find(docs, "Service", "exporter")["metadata"]["labels"]["gpuwatch.io/job"] == "gpuwatch-exporter"
    short = render({"fullnameOverride": "gw"})
    assert find(short, "DaemonSet", "exporter")["metadata"]["name"] == "gw-exporter"
