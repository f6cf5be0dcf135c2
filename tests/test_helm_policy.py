"""`reclaim.policy`, prices and teams in values are checked when the chart renders (`helm install`,
`helm template`), by the rules the program applies when it reads them, not first when the reclaim
controller starts or the analyzer ingests.

The schema's keys are compared with the program's own declarations (the Policy dataclasses,
ACTIONS, DAYS, BUILTIN_KINDS, MIN_WARNING_SECONDS; validate.py's price bounds; units' label-key
pattern), and a corpus of policies, good and bad, goes through both `policy.parse` and Helm's engine
(schema + validate.yaml): each must accept or refuse alike, the chart's message naming the key.
The one rule the chart cannot apply is whether business_hours.timezone is a real zone.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields

import pytest

from tests.support.helm_chart import CHART, helm, render

policy = pytest.importorskip("gpuwatch.reclaim.policy")
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
POLICY_SCHEMA = SCHEMA["properties"]["reclaim"]["properties"]["policy"]
HOURS = {"timezone": "Europe/Paris", "days": ["mon", "tue"], "start": "08:00", "end": "17:30"}
CUSTOM = {"group": "example.com", "version": "v1", "plural": "trainjobs", "patch": {"spec": {"suspend": True}},
          "restore_patch": {"spec": {"suspend": False}}}

# (policy, why): each goes through policy.parse and through the chart; the verdicts must agree
CORPUS = [
    ({}, "empty: the built-in defaults"),
    ({"namespaces": ["ml", "research"], "min_idle_seconds": 7200}, "the all-on example"),
    ({"namespace": ["ml"]}, "a misspelt key"),
    ({"namespaces": "ml"}, "a string, not a list"),
    ({"namespaces": [""]}, "an empty name"),
    ({"idle_below": 0.1}, "ratio"),
    ({"idle_below": 1}, "ratio at its top"),
    ({"idle_below": 0}, "ratio 0"),
    ({"idle_below": 5}, "a percent"),
    ({"idle_below": True}, "a boolean"),
    ({"min_idle_seconds": "15m"}, "duration with a unit"),
    ({"min_idle_seconds": "1.5h"}, "fractional duration"),
    ({"min_idle_seconds": 0.5}, "half a second"),
    ({"min_idle_seconds": "0s"}, "zero duration"),
    ({"min_idle_seconds": -60}, "negative"),
    ({"min_idle_seconds": "15 minutes"}, "words"),
    ({"max_data_age_seconds": "500ms"}, "milliseconds"),
    ({"max_data_age_seconds": "1.m"}, "a dot without decimals"),
    ({"warning_seconds": 300}, "the shortest warning"),
    ({"warning_seconds": 299}, "one second short"),
    ({"warning_seconds": "5m"}, "the shortest warning in minutes"),
    ({"warning_seconds": "4m"}, "a warning too short, in minutes"),
    ({"warning_seconds": "299999ms"}, "a warning too short, in milliseconds"),
    ({"warning_seconds": "0.1h"}, "six minutes"),
    ({"max_actions_per_hour": 0}, "no action at all"),
    ({"max_actions_per_hour": -1}, "negative count"),
    ({"max_actions_per_team_per_hour": 2.5}, "a fraction of an action"),
    ({"business_hours": HOURS}, "business hours"),
    ({"business_hours": None}, "no business hours"),
    ({"business_hours": {**HOURS, "start": "18:00", "end": "09:00"}}, "start after end"),
    ({"business_hours": {**HOURS, "start": "09:00", "end": "09:00:00"}}, "start equal to end"),
    ({"business_hours": {**HOURS, "start": "09:00:30", "end": "09:01"}}, "seconds"),
    ({"business_hours": {"end": "08:00"}}, "end before the default start"),
    ({"business_hours": {**HOURS, "days": ["Monday", "FRI"]}}, "day names in any case"),
    ({"business_hours": {**HOURS, "days": ["funday"]}}, "not a day"),
    ({"business_hours": {**HOURS, "start": "25:00"}}, "not a time"),
    ({"business_hours": {**HOURS, "lunch": "12:00"}}, "an unknown business_hours key"),
    ({"owner_kinds": ["Notebook", "Job"]}, "built-in kinds"),
    ({"owner_kinds": ["CronJob"]}, "a kind nothing reclaims"),
    ({"owner_kinds": ["TrainJob"], "custom_kinds": {"TrainJob": CUSTOM}}, "a custom kind"),
    ({"custom_kinds": {"TrainJob": {**CUSTOM, "action": "delete"}}}, "an action that does not exist"),
    ({"custom_kinds": {"TrainJob": {**CUSTOM, "action": "evict_pod"}}}, "a custom kind's action"),
    ({"custom_kinds": {"TrainJob": {k: v for k, v in CUSTOM.items() if k != "restore_patch"}}}, "no way back"),
    ({"custom_kinds": {"TrainJob": {**CUSTOM, "patch": "suspend"}}}, "a patch that is not a mapping"),
    ({"webhooks": {"*": "https://hooks.example.com/x"}}, "webhook"),
    ({"webhooks": {"ml": "hooks.example.com/x"}}, "a webhook without a scheme"),
    ({"team_label": "example.com/team"}, "team label"),
    ({"team_label": ""}, "an empty team label"),
]


def program_verdict(raw: dict) -> str | None:
    """None when the controller accepts the policy, else its error."""
    try:
        policy.parse(raw, source="values reclaim.policy")
    except policy.PolicyError as err:
        return str(err)
    return None


def chart_verdict(raw: dict) -> str | None:
    """None when the chart renders the policy, else Helm's error. What it renders must be the same
    policy to the controller, read from the mounted file as `gpuwatch reclaim --policy` reads it."""
    try:
        docs = render({"reclaim": {"enabled": True, "policy": raw}})
    except helm().HelmError as err:
        return str(err)
    mounted = [d.obj["data"]["policy.yaml"] for d in docs if d.kind == "ConfigMap" and d.component == "reclaim"]
    if raw:
        from gpuwatch.reclaim.policy_yaml import read_yaml

        assert policy.parse(read_yaml(mounted[0]), source="mounted") == policy.parse(raw, source="values")
    return None


@pytest.mark.parametrize(("raw", "why"), CORPUS, ids=[why for _, why in CORPUS])
def test_the_chart_refuses_exactly_what_the_controller_refuses(raw, why):
    program, chart = program_verdict(raw), chart_verdict(raw)
    assert (program is None) == (chart is None), f"{why}: controller says {program!r}, chart says {chart!r}"
    if chart is not None:  # the chart's message leads to the key, as the controller's does
        key = re.search(r"key '(\w+)'|unknown key '(\w+)'|key (\w+)", program)
        named = next(k for k in key.groups() if k) if key else next(iter(raw))
        assert named in chart or next(iter(raw)) in chart, (chart, named)


def test_the_corpus_holds_both_verdicts():
    verdicts = [program_verdict(raw) is None for raw, _ in CORPUS]
    assert sum(verdicts) >= 15 and verdicts.count(False) >= 15


def test_the_schemas_keys_are_the_programs():
    assert set(POLICY_SCHEMA["properties"]) == {f.name for f in fields(policy.Policy)}
    assert POLICY_SCHEMA["additionalProperties"] is False
    hours = POLICY_SCHEMA["properties"]["business_hours"]["properties"]
    assert set(hours) == {f.name for f in fields(policy.BusinessHours)}
    kind = POLICY_SCHEMA["properties"]["custom_kinds"]["additionalProperties"]
    assert set(kind["properties"]) == {f.name for f in fields(policy.CustomKind)}
    assert tuple(kind["properties"]["action"]["enum"]) == policy.ACTIONS
    # a weekday name in any case, as policy.py lower-cases its first three letters (ECMA regex: no (?i))
    any_case = "|".join("".join(f"[{c.upper()}{c}]" for c in day) for day in policy.DAYS)
    assert hours["days"]["items"]["pattern"] == f"^({any_case})"


@pytest.mark.parametrize("kind", sorted(policy.BUILTIN_KINDS))
def test_every_built_in_kind_renders(kind):
    assert chart_verdict({"owner_kinds": [kind]}) is None


def test_the_shortest_warning_is_the_programs():
    shortest = policy.MIN_WARNING_SECONDS
    assert chart_verdict({"warning_seconds": shortest}) is None
    assert "warning_seconds" in chart_verdict({"warning_seconds": shortest - 1})
    assert "warning_seconds" in chart_verdict({"warning_seconds": f"{shortest - 1}s"})


def test_a_bad_policy_fails_helm_install_not_the_controller_later():
    # before: the schema took any mapping, so this rendered and the controller crash-looped
    with pytest.raises(helm().HelmValuesError, match=re.escape("/reclaim/policy")):
        render({"reclaim": {"enabled": True, "policy": {"min_idle_secs": 600}}})


# --- prices and teams: the schema's bounds are the ones every load applies -----------------

def test_price_bounds_are_the_loaders():
    validate = pytest.importorskip("gpuwatch.store.validate")
    models = SCHEMA["properties"]["prices"]["properties"]["models"]["additionalProperties"]
    by_label = SCHEMA["properties"]["prices"]["properties"]["nodeLabels"]["additionalProperties"]["additionalProperties"]
    for price in (models, by_label):
        assert price["maximum"] == validate.UPPER_BOUNDS[("prices", "usd_per_gpu_hour")]
        assert price["minimum"] == 0 and "usd_per_gpu_hour" in validate.NON_NEGATIVE["prices"]
    top = validate.UPPER_BOUNDS[("prices", "usd_per_gpu_hour")]
    with pytest.raises(helm().HelmValuesError, match=re.escape("at '/prices/models/NVIDIA H100 80GB HBM3'")):
        render({"prices": {"models": {"NVIDIA H100 80GB HBM3": top + 0.01}}})
    with pytest.raises(helm().HelmValuesError, match=re.escape("/prices/models")):
        render({"prices": {"models": {"NVIDIA H100 80GB HBM3": -1}}})


def test_team_label_is_a_label_key_as_ingest_checks_it():
    units = pytest.importorskip("gpuwatch.units")
    pattern = SCHEMA["properties"]["teams"]["properties"]["label"]["pattern"]
    assert pattern == f"^{units._LABEL_KEY.pattern}$"
    for label in ("team", "example.com/team", "Team_1", "-team", "a/b/c", "team.", ""):
        try:
            units.parse_label_key(label, what="--team-label")
            ok = True
        except units.UsageError:
            ok = False
        rendered = True
        try:
            render({"teams": {"label": label}})
        except helm().HelmValuesError:
            rendered = False
        assert rendered is ok, label
