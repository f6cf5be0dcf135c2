"""plan(findings, pods, policy, now) -> actions: the controller's whole decision, pure.

A pod is reclaimed only when every rule passes, in this order (the first failing rule is the
skip reason): fresh data (of known age: unknown is no action), namespace not protected (the
built-in set plus the policy's), namespace opted in, no exemption annotation,
priority class not protected, owner kind allowed, owner not already stopped, idle long enough
(the arbiter), warned at least ``warning_seconds`` ago, inside business hours, and within the
hourly rate limits. Owner-level actions (scale, suspend, stop) need *every* GPU pod of the owner
ready, so one idle replica never stops its busy siblings.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from gpuwatch.reclaim import EXEMPT_ANNOTATION, OPT_IN_LABEL, WARNING_ANNOTATION
from gpuwatch.reclaim.freshness import SKEW_SECONDS, stale_reason
from gpuwatch.reclaim.policy import Policy, default_arbiter
from gpuwatch.reclaim.records import Action, PodState, as_records, as_utc, by_key, flag, number

Arbiter = Callable[..., bool]
Recent = tuple[datetime, str, str]  # (when, team, owner key) of an action already taken


def plan(findings, pods: Iterable[PodState], policy: Policy, now: datetime, *,
         data_as_of: datetime | None = None, as_of_problem: str = "", recent: Sequence[Recent] = (),
         arbiter: Arbiter = default_arbiter, simulate_warnings: bool = False,
         assume_opted_in: bool = False) -> list[Action]:
    """Decide, for every idle finding and every warned pod, what to do now.

    ``findings``: idle_hoarding rows (DataFrame or dicts); a pod is *idle now* when its row has
    ``reclaimable_now`` true (or, without that column, an ``idle_since``). ``pods``: cluster state.
    ``simulate_warnings`` (dry-run counterfactual): a pod with no warning annotation is treated as
    warned when its idle run reached ``min_idle_seconds``, as a live controller would have done.
    ``data_as_of``: the latest sample the findings rest on; None (or an ``as_of_problem`` saying
    why it is unknown) or older than ``max_data_age_seconds`` means no warn, act or clear at all.
    """
    now = as_utc(now)
    states = by_key(pods)
    rows = {(f["namespace"], f["pod"]): f for f in as_records(findings)}
    for f in rows.values():  # parse once; every rule below reads the parsed value
        f["idle_since"] = as_utc(f.get("idle_since"))
    idle = {key: f for key, f in rows.items() if _idle_now(f)}
    ctx = _Context(policy, now, arbiter, simulate_warnings, assume_opted_in)
    unfit = as_of_problem or stale_reason(data_as_of, now, max_age_seconds=policy.max_data_age_seconds)
    verdicts = [ctx.verdict(finding, states.get(key)) for key, finding in sorted(idle.items())]
    verdicts += [ctx.clear(s, rows.get(s.key)) for s in states.values() if _needs_clear(s, idle, ctx)]
    if unfit:  # no write of any kind (warn, act, clear) on data of unknown or excessive age
        verdicts = [a if a.decision == "skip" else _replace(a, "skip", f"{unfit} (was: {a.decision}, "
                                                               f"{a.reason})", "none") for a in verdicts]
    return _limit(_group(verdicts, states), policy, now, recent)


def _idle_now(finding: dict) -> bool:
    if "reclaimable_now" in finding:
        return flag(finding["reclaimable_now"]) and finding["idle_since"] is not None
    return finding["idle_since"] is not None


def _needs_clear(state: PodState, idle: dict, ctx: _Context) -> bool:
    return WARNING_ANNOTATION in state.pod_annotations and state.key not in idle and ctx.opted_in(state)


class _Context:
    def __init__(self, policy, now, arbiter, simulate_warnings, assume_opted_in):
        self.policy, self.now, self.arbiter = policy, now, arbiter
        self.simulate_warnings, self.assume_opted_in = simulate_warnings, assume_opted_in

    def opted_in(self, state: PodState) -> bool:
        if state.namespace in self.policy.protected:
            return False
        labelled = state.namespace_labels.get(OPT_IN_LABEL) == "enabled"
        return self.assume_opted_in or labelled or state.namespace in self.policy.namespaces

    def verdict(self, finding: dict, state: PodState | None) -> Action:
        """One pod's decision before owner grouping and rate limits."""
        if "/" in str(finding.get("namespace") or ""):  # ingest --cluster: a cluster-qualified namespace
            return _action(finding, state, "skip", "pod of a store holding several clusters "
                           f"({str(finding['namespace']).split('/', 1)[0]}): reclaim acts on one cluster's store")
        if state is None:
            return _action(finding, None, "skip", "pod not found in the cluster (or pods table)")
        idle_since = finding["idle_since"]
        idle_seconds = (self.now - idle_since).total_seconds()
        reason = self._blocked(state, finding, idle_seconds)
        if reason:
            return _action(finding, state, "skip", reason)
        warned_at, value = self._warning(state, idle_since)
        if warned_at is None:
            return self._gate(finding, state, "warn", f"idle since {_hhmm(idle_since)} "
                              f"({idle_seconds / 60:.0f} min); warning before action")
        due = warned_at + timedelta(seconds=self.policy.warning_seconds)
        if self.now < due and not value:  # simulated warning (dry-run): report it as a warning
            return self._gate(finding, state, "warn", f"idle since {_hhmm(idle_since)}; would be "
                              f"warned at {_hhmm(warned_at)}, acts after {_hhmm(due)}")
        if self.now < due:
            return _action(finding, state, "skip", f"warned at {_hhmm(warned_at)}; "
                           f"acts after {_hhmm(due)} if still idle", value)
        warned_word = "warned" if value else "dry-run: would have been warned"
        return self._gate(finding, state, "act", f"idle {idle_seconds / 60:.0f} min, {warned_word} at "
                          f"{_hhmm(warned_at)}", value)

    def _blocked(self, state: PodState, finding: dict, idle_seconds: float) -> str:
        policy = self.policy
        if state.namespace in policy.protected:
            return f"namespace {state.namespace} is protected"
        if not self.opted_in(state):
            return f"namespace not opted in (label {OPT_IN_LABEL}=enabled or policy namespaces)"
        for where, notes in (("pod", state.pod_annotations), (state.owner_kind, state.owner_annotations)):
            if notes.get(EXEMPT_ANNOTATION) == "never":
                return f"exempt: annotation {EXEMPT_ANNOTATION}=never on the {where}"
        if state.priority_class and state.priority_class in policy.protected_priority_classes:
            return f"priority class {state.priority_class} is protected"
        if state.owner_kind not in policy.owner_kinds or policy.action_for(state.owner_kind) is None:
            return f"owner kind {state.owner_kind or 'unknown'} is not in policy owner_kinds (or custom_kinds)"
        if state.owner_stopped:
            return f"{state.owner_kind} {state.owner_name} is already stopped"
        if not self.arbiter(candidate=finding, idle_seconds=idle_seconds, policy=policy, now=self.now):
            return (f"idle {idle_seconds / 60:.0f} min, below min_idle_seconds "
                    f"{policy.min_idle_seconds / 60:.0f} min (or arbiter declined)")
        return ""

    def _warning(self, state: PodState, idle_since: datetime) -> tuple[datetime | None, str]:
        value = state.pod_annotations.get(WARNING_ANNOTATION, "")
        try:
            warned_at = as_utc(value) if value else None
        except ValueError:
            warned_at = None  # a hand-edited, unparseable warning: warn again (never act on it)
        if warned_at is not None and warned_at < idle_since:
            warned_at = None  # activity after the warning: the old warning no longer counts
        if warned_at is not None and warned_at > self.now + timedelta(seconds=SKEW_SECONDS):
            # the controller stamps its own clock, so a future time was not written by it: a
            # hand-set far-future warning would postpone reclaim for ever; warn again instead
            warned_at, value = None, ""
        if warned_at is None and self.simulate_warnings:
            warned_at = idle_since + timedelta(seconds=self.policy.min_idle_seconds)
        return warned_at, value

    def _gate(self, finding: dict, state: PodState, decision: str, reason: str, value: str = "") -> Action:
        hours = self.policy.business_hours
        if hours is not None and not hours.contains(self.now):
            return _action(finding, state, "skip", f"outside business hours ({reason})", value)
        return _action(finding, state, decision, reason, value)

    def clear(self, state: PodState, finding: dict | None) -> Action:
        why = "activity since the warning" if finding is not None else "no current idle run in the data"
        return _action(finding or {}, state, "clear", why, state.pod_annotations[WARNING_ANNOTATION])


def _action(finding: dict, state: PodState | None, decision: str, reason: str, value: str = "") -> Action:
    owner_kind = state.owner_kind if state else str(finding.get("owner_kind") or "")
    action = "none"
    if decision == "act":
        action = {"Notebook": "stop_notebook", "Job": "suspend_job", "Pod": "evict_pod"}.get(
            owner_kind, "scale_to_zero")
    count = state.gpu_count if state and state.gpu_count is not None else number(finding.get("gpu_count"))
    return Action(
        decision=decision, action=action, namespace=state.namespace if state else finding["namespace"],
        pod=state.pod if state else finding["pod"], owner_kind=owner_kind,
        owner_name=state.owner_name if state else str(finding.get("owner_name") or ""),
        team=_team(finding, state), reason=reason,
        idle_since=finding.get("idle_since"), gpu_count=count,
        usd_per_hour=number(finding.get("usd_per_hour")),
        pods=(state.pod,) if state else (), pod_uids=(state.uid,) if state else (),
        warning_value=value, recommendation_id=str(finding.get("recommendation_id") or ""))


def _team(finding: dict, state: PodState | None) -> str:
    """The findings' team (what chargeback reports use), else the cluster's label."""
    team = finding.get("team")
    if isinstance(team, str) and team:
        return team
    return state.team if state else ""


def _group(verdicts: list[Action], states: dict) -> list[Action]:
    """Merge ready owner-level actions into one per owner, only when all its GPU pods are ready."""
    ready = defaultdict(list)
    out = []
    for act in verdicts:
        if act.decision == "act" and act.action != "evict_pod":
            ready[act.owner_key].append(act)
        else:
            out.append(act)
    members = defaultdict(set)
    for s in states.values():
        members[s.owner_key].add(s.pod)
    for key, acts in ready.items():
        waiting = sorted(members[key] - {a.pod for a in acts})
        if waiting:
            out += [_replace(a, "skip", f"waiting for other pods of {a.owner_kind} {a.owner_name}: "
                                        f"{', '.join(waiting)} not ready", "none") for a in acts]
        else:
            out.append(_merge(acts))
    return out


def _merge(acts: list[Action]) -> Action:
    first = acts[0]
    since = [a.idle_since for a in acts if a.idle_since]
    return replace(first, pods=tuple(a.pod for a in acts),
                   pod_uids=tuple(u for a in acts for u in a.pod_uids),
                   gpu_count=sum(a.gpu_count for a in acts), usd_per_hour=sum(a.usd_per_hour for a in acts),
                   idle_since=max(since) if since else None)


def _replace(act: Action, decision: str, reason: str, action: str) -> Action:
    return replace(act, decision=decision, reason=reason, action=action)


def _limit(actions: list[Action], policy: Policy, now: datetime, recent: Sequence[Recent]) -> list[Action]:
    """Apply max_actions_per_hour (fleet and per team), longest-idle owners first."""
    hour_ago = now - timedelta(hours=1)
    done = {key for _, _, key in recent}  # acted on already: acting again takes no new slot
    counted = [team for ts, team, _ in recent if as_utc(ts) > hour_ago]
    total, per_team = len(counted), defaultdict(int)
    for team in counted:
        per_team[team] += 1
    acts = sorted((a for a in actions if a.decision == "act"), key=lambda a: (a.idle_since or now, a.owner_key))
    out = [a for a in actions if a.decision != "act"]
    for act in acts:
        if act.owner_key not in done:
            if total >= policy.max_actions_per_hour:
                act = _replace(act, "skip", f"rate limit: {total} actions in the last hour "
                               f"(max_actions_per_hour {policy.max_actions_per_hour})", "none")
            elif per_team[act.team] >= policy.max_actions_per_team_per_hour:
                act = _replace(act, "skip", f"rate limit: team {act.team or '(none)'} had "
                               f"{per_team[act.team]} actions in the last hour", "none")
            else:
                total, per_team[act.team] = total + 1, per_team[act.team] + 1
        out.append(act)
    return out


def _hhmm(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")
