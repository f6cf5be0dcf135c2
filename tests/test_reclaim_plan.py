"""plan(): the reclaim controller's pure decision — one table-driven test per rule, then laws.

Hypothesis generates clusters (namespaces opted in or not, exemptions on pods and owners,
priority classes, owner kinds with several replicas, idle runs, existing warnings, recent
actions) and policies (thresholds, warning periods, rate limits, business hours): 10,000
examples in total. Laws: never a write decision in a namespace that is not opted in (or is
protected); never a warning or action on an exempt workload or a protected priority class; never
an action on a pod idle for less than the minimum or warned less than the warning period ago;
never more new actions than the hourly limits allow; never an owner-level action while a sibling
pod is not ready; never a warning or action outside business hours; and the plan does not depend
on the order of its inputs.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, time, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch.reclaim.plan import plan
from gpuwatch.reclaim.policy import BusinessHours, Policy
from gpuwatch.reclaim.records import PodState, rfc3339

NOW = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)  # Wednesday 10:00 UTC
OPTED = {"gpuwatch.io/reclaim": "enabled"}


def state(name="p", *, ns="ml", kind="Job", owner=None, labels=OPTED, notes=None, owner_notes=None,
          priority="", stopped=False, gpus=1.0):
    return PodState(namespace=ns, pod=name, owner_kind=kind, owner_name=owner or name, team="t",
                    priority_class=priority, uid=f"uid-{name}", namespace_labels=labels,
                    pod_annotations=notes or {}, owner_annotations=owner_notes or {},
                    owner_stopped=stopped, gpu_count=gpus)


def finding(name="p", *, ns="ml", idle_minutes=120.0, now_idle=True, team="t"):
    since = NOW - timedelta(minutes=idle_minutes) if now_idle else None
    return {"namespace": ns, "pod": name, "team": team, "idle_since": since,
            "reclaimable_now": now_idle, "gpu_count": 1.0, "usd_per_hour": 2.0}


def warned(minutes_ago: float) -> dict:
    return {"gpuwatch.io/reclaim-warning": rfc3339(NOW - timedelta(minutes=minutes_ago))}


def decide(states, findings, policy=None, **kwargs):
    kwargs.setdefault("data_as_of", NOW)
    return {(a.namespace, a.pod): a for a in plan(findings, states, policy or Policy(), NOW, **kwargs)}


@pytest.mark.parametrize(("pod", "found", "policy", "decision", "reason"), [
    (state(notes=warned(60)), finding(), Policy(), "act", "idle 120 min"),
    (state(), finding(), Policy(), "warn", "warning before action"),
    (state(notes=warned(10)), finding(), Policy(), "skip", "acts after"),
    (state(labels={}), finding(), Policy(), "skip", "not opted in"),
    (state(labels={}), finding(), Policy(namespaces=("ml",)), "warn", ""),
    (state(ns="kube-system", labels=OPTED), finding(ns="kube-system"), Policy(), "skip", "protected"),
    (state(notes={"gpuwatch.io/reclaim": "never"}), finding(), Policy(), "skip", "exempt"),
    (state(owner_notes={"gpuwatch.io/reclaim": "never"}), finding(), Policy(), "skip", "exempt"),
    (state(priority="system-node-critical"), finding(), Policy(), "skip", "priority class"),
    (state(kind="RayCluster"), finding(), Policy(), "skip", "owner kind RayCluster"),
    (state(kind="Job"), finding(), Policy(owner_kinds=("Notebook",)), "skip", "owner kind Job"),
    (state(stopped=True), finding(), Policy(), "skip", "already stopped"),
    (state(), finding(idle_minutes=10), Policy(), "skip", "below min_idle_seconds"),
    (state(notes=warned(60)), finding(), Policy(max_actions_per_hour=0), "skip", "rate limit"),
    (state(notes=warned(60)), finding(),
     Policy(business_hours=BusinessHours(timezone="Asia/Tokyo")), "skip", "outside business hours"),
    (state(notes=warned(60)), finding(),
     Policy(business_hours=BusinessHours(timezone="Europe/Berlin")), "act", ""),
    (state(notes=warned(150)), finding(idle_minutes=120), Policy(), "warn", ""),  # busy since warning
])
def test_each_rule(pod, found, policy, decision, reason):
    [action] = plan([found], [pod], policy, NOW, data_as_of=NOW)
    assert action.decision == decision and reason in action.reason


def test_activity_clears_a_warning_and_missing_data_clears_too():
    pods = [state("a", notes=warned(5)), state("b", notes=warned(5))]
    got = decide(pods, [finding("a", now_idle=False)])
    assert {k[1]: (a.decision, a.reason) for k, a in got.items()} == {
        "a": ("clear", "activity since the warning"), "b": ("clear", "no current idle run in the data")}


def test_an_owner_acts_only_when_every_gpu_pod_is_ready():
    pods = [state(f"w-{i}", kind="Deployment", owner="web", notes=warned(60)) for i in range(3)]
    some = decide(pods, [finding("w-0"), finding("w-1")])
    assert {k[1]: a.decision for k, a in some.items()} == {"w-0": "skip", "w-1": "skip", "w-2": "clear"}
    assert "w-2 not ready" in some[("ml", "w-0")].reason
    [merged] = decide(pods, [finding(f"w-{i}") for i in range(3)]).values()
    assert (merged.decision, merged.action, merged.pods, merged.gpu_count) == (
        "act", "scale_to_zero", ("w-0", "w-1", "w-2"), 3.0)


def test_rate_limits_take_the_longest_idle_first_and_count_recent_actions():
    pods = [state(f"p{i}", notes=warned(60)) for i in range(4)]
    found = [finding(f"p{i}", idle_minutes=100 + 10 * i) for i in range(4)]
    recent = [(NOW - timedelta(minutes=30), "t", "ml/Job/old")]
    got = decide(pods, found, Policy(max_actions_per_hour=3, max_actions_per_team_per_hour=9), recent=recent)
    assert sorted(k[1] for k, a in got.items() if a.decision == "act") == ["p2", "p3"]


def test_stale_data_blocks_everything():
    got = decide([state(notes=warned(60))], [finding()], data_as_of=NOW - timedelta(hours=1))
    assert got[("ml", "p")].decision == "skip" and "stale" in got[("ml", "p")].reason


def test_dry_run_simulates_the_warning_a_live_controller_would_have_given():
    got = decide([state("a"), state("b")], [finding("a", idle_minutes=50), finding("b", idle_minutes=30)],
                 simulate_warnings=True)
    assert got[("ml", "a")].decision == "act"  # 15 min to the warning + 30 min warning period
    assert got[("ml", "b")].decision == "warn" and "would be warned" in got[("ml", "b")].reason


def test_injected_arbiter_decides():
    calls = []

    def only_big(*, candidate, idle_seconds, policy, now):
        calls.append(candidate["pod"])
        return candidate["gpu_count"] >= 2

    got = decide([state(notes=warned(60))], [finding()], arbiter=only_big)
    assert calls == ["p"] and got[("ml", "p")].decision == "skip"


# -- laws -------------------------------------------------------------------------------------
KINDS = ("Job", "Deployment", "StatefulSet", "Notebook", "Pod", "RayCluster")
PROTECTED_PC = "system-cluster-critical"


def _pick(code: int, options, shift: int):
    """Decode one choice from a drawn integer's bits (one draw per pod keeps 10,000 examples fast)."""
    return options[(code >> shift) % len(options)]


HOURS = (None, BusinessHours(), BusinessHours(timezone="Asia/Tokyo"),
         BusinessHours(timezone="America/New_York", start=time(5, 0)))


@st.composite
def clusters(draw):
    """(pods, findings, policy, recent) for a random small cluster; one integer per pod."""
    how = [draw(st.sampled_from(["label", "listed", "no", "protected"])) for _ in range(3)]
    code = draw(st.integers(0, 2**24))
    policy = Policy(
        namespaces=tuple(f"ns{i}" for i, h in enumerate(how) if h == "listed"),
        protected_namespaces=tuple(f"ns{i}" for i, h in enumerate(how) if h == "protected"),
        min_idle_seconds=_pick(code, (60.0, 900.0, 3600.0), 0),
        warning_seconds=_pick(code, (0.0, 1800.0, 7200.0), 2),
        max_actions_per_hour=_pick(code, range(7), 4), max_actions_per_team_per_hour=_pick(code, range(5), 7),
        business_hours=_pick(code, HOURS, 10),
        owner_kinds=tuple(k for bit, k in enumerate(KINDS[:5]) if (code >> (12 + bit)) & 1) or ("Job",))
    pods, findings = [], []
    for i, bits in enumerate(draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=12))):
        ns = f"ns{bits % 3}"
        kind = _pick(bits, KINDS, 2)
        warning = _pick(bits, (None, 0.0, 10.0, 29.0, 31.0, 90.0, 240.0, 599.0), 5)
        idle = _pick(bits, (None, None, 0.5, 5.0, 14.0, 16.0, 46.0, 61.0, 120.0, 599.0), 8)
        pods.append(PodState(
            namespace=ns, pod=f"p{i}", owner_kind=kind,
            owner_name=f"o{(bits >> 12) % 4}" if kind != "Pod" else f"p{i}", team=_pick(bits, "ab", 14),
            priority_class=_pick(bits, ("", "batch", PROTECTED_PC), 15), uid=f"u{i}",
            namespace_labels=OPTED if how[bits % 3] == "label" else {},
            pod_annotations={**({"gpuwatch.io/reclaim": "never"} if (bits >> 17) % 4 == 0 else {}),
                             **(warned(warning) if warning is not None else {})},
            owner_annotations={"gpuwatch.io/reclaim": "never"} if (bits >> 19) % 5 == 0 else {},
            owner_stopped=(bits >> 22) % 6 == 0, gpu_count=1.0))
        if idle is not None or (bits >> 25) & 1:
            findings.append({**finding(f"p{i}", ns=ns, idle_minutes=idle or 0.0, now_idle=idle is not None),
                             "team": pods[-1].team})
    recent = [(NOW - timedelta(minutes=m), _pick(int(m), "ab", 0), f"x/Job/r{j}")
              for j, m in enumerate(draw(st.lists(st.sampled_from([1, 30, 59, 60, 61, 120]), max_size=4)))]
    return pods, findings, policy, recent


def _opted_in(pod, policy):
    if pod.namespace in policy.protected_namespaces:
        return False
    return pod.namespace_labels.get("gpuwatch.io/reclaim") == "enabled" or pod.namespace in policy.namespaces


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans())
def test_policy_laws(cluster, simulate):
    pods, findings, policy, recent = cluster
    by_pod = {(p.namespace, p.pod): p for p in pods}
    idle = {(f["namespace"], f["pod"]): f for f in findings if f["reclaimable_now"]}
    actions = plan(findings, pods, policy, NOW, data_as_of=NOW, recent=recent, simulate_warnings=simulate)
    new_acts = [a for a in actions if a.decision == "act"]
    for action in actions:
        if action.decision == "skip":
            continue
        for name in action.pods:
            pod = by_pod[(action.namespace, name)]
            assert _opted_in(pod, policy), action
            if action.decision == "clear":
                continue
            assert pod.pod_annotations.get("gpuwatch.io/reclaim") != "never", action
            assert pod.owner_annotations.get("gpuwatch.io/reclaim") != "never", action
            assert pod.priority_class != PROTECTED_PC and not pod.owner_stopped, action
            assert pod.owner_kind in policy.owner_kinds, action
            idle_for = NOW - idle[(action.namespace, name)]["idle_since"]
            assert idle_for.total_seconds() >= policy.min_idle_seconds, action
            assert policy.business_hours is None or policy.business_hours.contains(NOW), action
            if action.decision == "act" and not simulate:
                warned_at = datetime.fromisoformat(pod.pod_annotations["gpuwatch.io/reclaim-warning"])
                assert (NOW - warned_at).total_seconds() >= policy.warning_seconds, action
        if action.decision == "act" and action.action != "evict_pod":
            siblings = {p.pod for p in pods if (p.namespace, p.owner_kind, p.owner_name)
                        == (action.namespace, action.owner_kind, action.owner_name)}
            assert set(action.pods) == siblings, action
    last_hour = [r for r in recent if r[0] > NOW - timedelta(hours=1)]
    assert len(new_acts) + len(last_hour) <= max(policy.max_actions_per_hour, len(last_hour))
    for team in "ab":
        earlier = sum(1 for _, t, _ in last_hour if t == team)
        mine = sum(1 for a in new_acts if a.team == team)
        assert mine == 0 or earlier + mine <= policy.max_actions_per_team_per_hour


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.randoms(use_true_random=False))
def test_plan_does_not_depend_on_input_order(cluster, rng: random.Random):
    pods, findings, policy, recent = cluster
    first = plan(findings, pods, policy, NOW, data_as_of=NOW, recent=recent)
    shuffled_pods, shuffled_findings = pods[:], findings[:]
    rng.shuffle(shuffled_pods)
    rng.shuffle(shuffled_findings)
    again = plan(shuffled_findings, shuffled_pods, policy, NOW, data_as_of=NOW, recent=recent)
    key = lambda a: (a.namespace, a.pod, a.decision)  # noqa: E731
    assert sorted(first, key=key) == sorted(again, key=key)


def test_exempt_replaced_policy_field_is_honoured():
    """A protected priority class listed by the policy (not a default one) is honoured too."""
    policy = replace(Policy(), protected_priority_classes=("research-high",))
    [action] = plan([finding()], [state(priority="research-high", notes=warned(60))], policy, NOW,
                    data_as_of=NOW)
    assert action.decision == "skip" and "research-high" in action.reason


def test_a_future_dated_warning_cannot_postpone_reclaim():
    """A hand-set warning far in the future is not the controller's own (it stamps its clock):
    it is ignored and the pod warned afresh, so the action follows one warning period later."""
    future = {"gpuwatch.io/reclaim-warning": rfc3339(NOW + timedelta(days=365))}
    [action] = plan([finding()], [state(notes=future)], Policy(), NOW, data_as_of=NOW)
    assert action.decision == "warn" and action.warning_value == ""
    skew = {"gpuwatch.io/reclaim-warning": rfc3339(NOW + timedelta(minutes=1))}  # clock skew: kept
    [action] = plan([finding()], [state(notes=skew)], Policy(), NOW, data_as_of=NOW)
    assert action.decision == "skip" and "acts after" in action.reason


def test_the_built_in_protected_namespaces_stay_protected_under_a_custom_list():
    pods = [state(ns="kube-system"), state("q", ns="finance")]
    got = decide(pods, [finding(ns="kube-system"), finding("q", ns="finance")],
                 Policy(protected_namespaces=("finance",)))
    assert {k: a.decision for k, a in got.items()} == {("kube-system", "p"): "skip", ("finance", "q"): "skip"}
    assert all("protected" in a.reason for a in got.values())
