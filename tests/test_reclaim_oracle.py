"""plan() against an oracle written from the README's reclaim rules, not from the code.

Hypothesis generates the data's as-of time (fresh, 3 days stale, missing, in the future),
colliding owners (up to three pods of one Deployment), custom protected namespaces (policies
built through ``policy.parse``, as a file is), opt-in by label or by policy, exemptions,
protected priority classes, idle runs and warnings (expired, pending, from before the idle run,
far in the future). The oracle, from README "Auto-reclaim" and issue 12: nothing but skips
unless the data is known and at most max_data_age_seconds old; a pod is warned when it is idle
for min_idle_seconds in an opted-in, unprotected namespace (the built-in protected namespaces
always count) with no exemption or protected priority class and no warning in force; an owner
is acted on when *every* one of its GPU pods has been warned at least warning_seconds ago (a
warning before the current idle run, or a hand-set future one, does not count); a warned pod
that is no longer idle is cleared.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch.reclaim import policy as policy_mod
from gpuwatch.reclaim.plan import plan
from gpuwatch.reclaim.records import PodState, rfc3339

NOW = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)
LABELLED = {"gpuwatch.io/reclaim": "enabled"}
NAMESPACES = {"ml": LABELLED, "listed": {}, "kube-system": LABELLED, "fin": LABELLED, "dark": {}}
BUILT_IN = {"kube-system", "kube-public", "kube-node-lease"}
AS_OF = {"fresh": NOW - timedelta(minutes=5), "stale": NOW - timedelta(days=3), "missing": None,
         "future": NOW + timedelta(hours=1)}
WARNINGS = (None, 10.0, 40.0, 200.0, 200.0, 200.0, 600.0, -1.0, -1440.0)  # minutes ago; < 0: future


@st.composite
def scenarios(draw):
    rules = policy_mod.parse({
        "namespaces": ["listed"],
        "protected_namespaces": draw(st.lists(st.sampled_from(["fin", "ml", "dark"]), unique=True, max_size=2)),
        "min_idle_seconds": draw(st.sampled_from(["15m", "1h"])),
        "warning_seconds": draw(st.sampled_from(["5m", "30m", "2h"])),
        "max_actions_per_hour": 1000, "max_actions_per_team_per_hour": 1000})
    pods, findings = [], []
    for o in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["Deployment", "Job", "Pod"]))
        ns = draw(st.sampled_from(["ml", "ml", "listed", *sorted(NAMESPACES)]))
        owner_exempt = draw(st.integers(0, 14)) == 0
        alike = draw(st.booleans())  # replicas idle and warned alike: the owner may be acted on
        shared = draw(st.sampled_from([5.0, 300.0, 300.0])), draw(st.sampled_from(WARNINGS))
        for i in range(draw(st.integers(1, 3)) if kind == "Deployment" else 1):
            name = f"o{o}-{i}"
            idle, warned = shared if alike else (draw(st.sampled_from([None, 5.0, 20.0, 70.0, 300.0, 300.0])),
                                                 draw(st.sampled_from(WARNINGS)))
            notes = {"gpuwatch.io/reclaim-warning": rfc3339(NOW - timedelta(minutes=warned))} if warned else {}
            if draw(st.integers(0, 14)) == 0:
                notes["gpuwatch.io/reclaim"] = "never"
            pods.append(PodState(
                namespace=ns, pod=name, owner_kind=kind, owner_name=name if kind == "Pod" else f"o{o}",
                team="t", uid=f"u-{name}", namespace_labels=NAMESPACES[ns], pod_annotations=notes,
                priority_class=draw(st.sampled_from(["", "", "", "", "system-node-critical"])),
                owner_annotations={"gpuwatch.io/reclaim": "never"} if owner_exempt else {}, gpu_count=1.0))
            if idle is not None or draw(st.booleans()):
                findings.append({"namespace": ns, "pod": name, "team": "t", "gpu_count": 1.0, "usd_per_hour": 1.0,
                                 "reclaimable_now": idle is not None,
                                 "idle_since": NOW - timedelta(minutes=idle) if idle is not None else None})
    return rules, pods, findings, draw(st.sampled_from(sorted(AS_OF)))


# -- the oracle: the README's rules, restated ------------------------------------------------
def in_scope(pod: PodState, rules) -> bool:
    if pod.namespace in BUILT_IN or pod.namespace in rules.protected_namespaces:
        return False
    return pod.namespace_labels.get("gpuwatch.io/reclaim") == "enabled" or pod.namespace in rules.namespaces


def may_touch(pod: PodState, rules) -> bool:
    return (in_scope(pod, rules) and pod.pod_annotations.get("gpuwatch.io/reclaim") != "never"
            and pod.owner_annotations.get("gpuwatch.io/reclaim") != "never"
            and pod.priority_class not in rules.protected_priority_classes and pod.owner_kind in rules.owner_kinds)


def warning_in_force(pod: PodState, idle_since: datetime) -> datetime | None:
    value = pod.pod_annotations.get("gpuwatch.io/reclaim-warning")
    if not value:
        return None
    warned = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if warned < idle_since or warned > NOW + timedelta(minutes=5):
        return None  # from before the current idle run, or not the controller's own stamp
    return warned


def expected(rules, pods, findings):
    idle = {f["pod"]: f["idle_since"] for f in findings if f["reclaimable_now"]}
    warn, ready = set(), set()
    for pod in pods:
        since = idle.get(pod.pod)
        if since is None or not may_touch(pod, rules) or (NOW - since).total_seconds() < rules.min_idle_seconds:
            continue
        warned = warning_in_force(pod, since)
        if warned is None:
            warn.add(pod.pod)
        elif (NOW - warned).total_seconds() >= rules.warning_seconds:
            ready.add(pod.pod)
    owners = {}
    for pod in pods:
        owners.setdefault((pod.namespace, pod.owner_kind, pod.owner_name), set()).add(pod.pod)
    act = {key for key, members in owners.items() if members <= ready}
    clear = {p.pod for p in pods if "gpuwatch.io/reclaim-warning" in p.pod_annotations
             and p.pod not in idle and in_scope(p, rules)}
    return warn, act, clear


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_plan_matches_the_readme_oracle(scenario):
    rules, pods, findings, freshness = scenario
    actions = plan(findings, pods, rules, NOW, data_as_of=AS_OF[freshness])
    got = {d: {a for a in actions if a.decision == d} for d in ("warn", "act", "clear")}
    if freshness != "fresh":
        assert all(a.decision == "skip" for a in actions), (freshness, actions)
        return
    warn, act, clear = expected(rules, pods, findings)
    assert {a.pod for a in got["warn"]} == warn
    assert {(a.namespace, a.owner_kind, a.owner_name) for a in got["act"]} == act
    assert {a.pod for a in got["clear"]} == clear
    members = {}
    for pod in pods:
        members.setdefault((pod.namespace, pod.owner_kind, pod.owner_name), set()).add(pod.pod)
    for action in got["act"]:  # one action per owner, covering every one of its pods
        assert set(action.pods) == members[(action.namespace, action.owner_kind, action.owner_name)]
