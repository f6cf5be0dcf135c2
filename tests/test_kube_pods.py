"""Pod UID and labels from the Kubernetes API (gpuwatch/sources/kube_pods.py), through the REAL client.

No API server runs here, so tests/support/fake_kube.py stands in for it: a real HTTP server on
127.0.0.1 serving real Pod JSON, which the real ``kubernetes`` client lists (cluster-wide, with
``fieldSelector=spec.nodeName=…``). Checks: only this node's pods, uid and labels; the
allow-list (searched in the original key); label-name sanitizing (dcgm-exporter's rule plus a
leading ``_`` before a digit); reserved names dropped (attributes win); one list call per TTL on
a fake clock; an API that is down (last good list within the staleness bound, then an error with
``.reason``); 403 -> "forbidden" naming the rule that fixes it; open_pod_metadata on a kubeconfig.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwatch.exporter.spec import RAW_LABELS
from gpuwatch.sources import kube_pods
from gpuwatch.sources.kube_pods import (
    RBAC_RULE,
    RESERVED_LABELS,
    ApiServer,
    KubePodsError,
    PodMeta,
    PodMetadata,
    in_cluster,
    open_pod_metadata,
    sanitize_label_name,
)
from gpuwatch.units import UsageError
from tests.support.fake_kube import FakeKube, Rbac, pod

NODE = "gpu-node-1"
PROMETHEUS_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
LABELS = {"app.kubernetes.io/name": "trainer", "team-name": "vision", "3scale.net/tier": "gold",
          "pod": "evil", "gpu": "7", "Hostname": "x", "pod-uid": "y", "plain": "ok"}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def core_api(url: str) -> ApiServer:
    return ApiServer(url)


def lists(kube: FakeKube) -> list:
    return [r for r in kube.log if r.method == "GET" and r.path == "/api/v1/pods"]


@pytest.fixture
def kube():
    with FakeKube() as server:
        server.add(pod("ml", "train-0", labels=LABELS, uid="0c9d1e6a-4f1b-4b8e-9a51-3f1f2a7c8d10"))
        server.add(pod("ml", "serve-0", labels={"app": "serve"}))
        server.add(pod("ml", "elsewhere", node="gpu-node-2", labels={"app": "x"}))
        server.add(pod("infra", "unscheduled", node=""))
        yield server


def metadata(kube, clock=None, **kw) -> PodMetadata:
    kw = {"labels": True, "allowlist": None, **kw}
    return PodMetadata(core_api(kube.url), node=NODE, clock=clock or Clock(), **kw)


def test_lists_only_this_nodes_pods_with_uid_and_labels(kube):
    pods = metadata(kube).get()
    assert set(pods) == {("ml", "train-0"), ("ml", "serve-0")}
    assert pods[("ml", "train-0")] == PodMeta("0c9d1e6a-4f1b-4b8e-9a51-3f1f2a7c8d10", {
        "app_kubernetes_io_name": "trainer", "team_name": "vision", "_3scale_net_tier": "gold",
        "plain": "ok"})
    assert pods[("ml", "serve-0")].labels == {"app": "serve"}
    (request,) = lists(kube)
    assert request.query["fieldSelector"] == [f"spec.nodeName={NODE}"]
    assert request.query["resourceVersion"] == ["0"]  # served from the watch cache, not etcd


def test_without_labels_only_the_uid(kube):
    pods = metadata(kube, labels=False).get()
    assert pods[("ml", "serve-0")] == PodMeta("uid-pods-serve-0", {})


def test_allowlist_is_searched_in_the_original_key(kube):
    pods = metadata(kube, allowlist=r"kubernetes\.io/, ^team-,app_kubernetes,^pod$").get()
    # "app_kubernetes" is the sanitized spelling: it matches no key; "pod" matches but is reserved.
    assert pods[("ml", "train-0")].labels == {"app_kubernetes_io_name": "trainer", "team_name": "vision"}
    assert pods[("ml", "serve-0")].labels == {}


@pytest.mark.parametrize("allowlist", ["[unclosed", "ok,(?P<x", "a)"])
def test_a_bad_allowlist_is_a_usage_error_naming_the_flag(kube, allowlist):
    with pytest.raises(UsageError, match="--kubernetes-pod-label-allowlist-regex"):
        metadata(kube, allowlist=allowlist)
    with pytest.raises(UsageError, match="--kubernetes-pod-label-allowlist-regex"):
        open_pod_metadata(node=NODE, labels=True, allowlist=allowlist, api_url="http://127.0.0.1:9")


@pytest.mark.parametrize(("key", "name"), [
    ("app.kubernetes.io/name", "app_kubernetes_io_name"), ("team-name", "team_name"),
    ("3scale.net/tier", "_3scale_net_tier"), ("9", "_9"), ("already_ok", "already_ok"),
    ("Ünïcode.key", "_n_code_key"), ("", "_")])
def test_sanitize_label_name(key, name):
    assert sanitize_label_name(key) == name


@given(st.text())
def test_sanitized_names_are_valid_prometheus_label_names_and_stable(key):
    name = sanitize_label_name(key)
    assert PROMETHEUS_LABEL_NAME.match(name)
    assert sanitize_label_name(name) == name


def test_reserved_names_are_dropped_and_cover_the_exporters_labels():
    labels = kube_pods.pod_labels({"pod": "a", "namespace": "b", "container": "c", "pod-uid": "d",
                                   "vgpu": "e", "UUID": "f", "hostname": "g", "app": "ok"})
    assert labels == {"app": "ok"}
    assert {*RAW_LABELS, "pod_uid", "Hostname", "err_code", "err_msg"} <= RESERVED_LABELS


def test_keys_that_sanitize_alike_resolve_the_same_way_every_time():
    assert kube_pods.pod_labels({"a_b": "2", "a.b": "1", "a-b": "3"}) == {"a_b": "3"}  # "-" < "." < "_"


def test_parse_tolerates_sparse_objects():
    listing = {"items": [{"metadata": {"name": "p", "namespace": "n", "labels": None},
                          "spec": {"nodeName": NODE}},
                         {"metadata": {"name": "q", "namespace": "n"}, "spec": {}}]}
    assert kube_pods.parse(listing, node=NODE, labels=True) == {("n", "p"): PodMeta(None, {})}
    assert kube_pods.parse({"items": None}, node=NODE, labels=True) == {}


def test_one_list_call_per_ttl(kube):
    clock = Clock()
    meta = metadata(kube, clock, ttl_s=30)
    for dt in (0, 10, 29.9):
        clock.t = 1000 + dt
        assert ("ml", "new-0") not in meta.get()
    kube.add(pod("ml", "new-0"))
    assert len(lists(kube)) == 1
    clock.t = 1030
    assert ("ml", "new-0") in meta.get()
    assert len(lists(kube)) == 2


def test_concurrent_scrapes_share_one_list_call(kube):
    meta = metadata(kube)
    threads = [threading.Thread(target=meta.get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lists(kube)) == 1


def test_api_down_serves_the_last_good_list_within_staleness_then_errors(kube):
    clock = Clock()
    meta = metadata(kube, clock, ttl_s=30, max_stale_s=300)
    good = meta.get()
    kube.__exit__(None, None, None)  # the API server goes away: connections are refused
    for t in (1030, 1100, 1300):
        clock.t = t
        assert meta.get() == good
        assert meta.last_error is not None and meta.last_error.reason == "unreachable"
    clock.t = 1301
    with pytest.raises(KubePodsError, match="last good pod list 301 s ago") as caught:
        meta.get()
    assert caught.value.reason == "unreachable"


def test_recovers_after_server_errors_at_one_list_per_ttl(kube):
    clock = Clock()
    meta = metadata(kube, clock, ttl_s=30, max_stale_s=60)
    meta.get()
    kube.fail("GET", "/api/v1/pods", 503, times=3)
    for t in (1030, 1045, 1060):
        clock.t = t
        meta.get()
    for t in (1075, 1090):
        clock.t = t
        with pytest.raises(KubePodsError) as caught:
            meta.get()
        assert caught.value.reason == "unreachable"
    assert len(lists(kube)) == 4  # 1000, 1030, 1060, 1090: never more than one per TTL
    kube.add(pod("ml", "new-0"))
    clock.t = 1120
    assert ("ml", "new-0") in meta.get() and meta.last_error is None


def test_first_list_failing_is_an_error_at_once(kube):
    kube.fail("GET", "/api/v1/pods", 500)
    with pytest.raises(KubePodsError) as caught:
        metadata(kube).get()
    assert caught.value.reason == "unreachable"


@pytest.mark.parametrize(("status", "reason"), [
    (401, "error"), (404, "error"), (400, "error"), (429, "unreachable"), (502, "unreachable")])
def test_http_status_to_reason(kube, status, reason):
    kube.fail("GET", "/api/v1/pods", status)
    with pytest.raises(KubePodsError, match=f"HTTP {status}") as caught:
        metadata(kube).get()
    assert caught.value.reason == reason


def test_a_slow_api_server_is_cut_off(kube):
    kube.stall_after("GET", "/api/v1/pods")
    with pytest.raises(KubePodsError) as caught:
        metadata(kube, timeout_s=0.3).get()
    assert caught.value.reason == "unreachable"


def test_forbidden_names_the_rule_and_that_rule_is_enough():
    with FakeKube(rbac=Rbac(cluster=[])) as kube:
        kube.add(pod("ml", "train-0"))
        with pytest.raises(KubePodsError, match=re.escape(RBAC_RULE)) as caught:
            metadata(kube).get()
        assert caught.value.reason == "forbidden"
        assert 'cannot list resource "pods"' in str(caught.value)
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    with FakeKube(rbac=Rbac(cluster=[rule])) as kube:
        kube.add(pod("ml", "train-0"))
        assert ("ml", "train-0") in metadata(kube).get()


def test_open_pod_metadata_on_an_api_url(kube):
    meta = open_pod_metadata(node=NODE, labels=True, allowlist="^app$", api_url=kube.url)
    assert meta.get()[("ml", "serve-0")] == PodMeta("uid-pods-serve-0", {"app": "serve"})


def test_in_cluster_reads_the_service_account(tmp_path):
    (tmp_path / "token").write_text("t0ken\n")
    api = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, str(tmp_path))
    assert api == ApiServer("https://[fd00::1]:6443", str(tmp_path / "token"), str(tmp_path / "ca.crt"))
    assert in_cluster({}, str(tmp_path)) is None


def test_the_token_is_sent_as_a_bearer_token(kube, tmp_path):
    (tmp_path / "token").write_text("t0ken\n")
    PodMetadata(ApiServer(kube.url, str(tmp_path / "token")), node=NODE, labels=False, allowlist=None).get()
    assert lists(kube)[-1].headers.get("Authorization") == "Bearer t0ken"


def test_open_pod_metadata_without_any_configuration(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubePodsError, match="automountServiceAccountToken") as caught:
        open_pod_metadata(node=NODE, labels=True, allowlist=None)
    assert caught.value.reason == "error"


def test_a_node_name_is_required(kube):
    with pytest.raises(UsageError, match="NODE_NAME"):
        PodMetadata(core_api(kube.url), node="", labels=True, allowlist=None)


def test_importing_the_module_imports_no_kubernetes_client():
    code = "import sys, gpuwatch.sources.kube_pods; sys.exit('kubernetes' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
