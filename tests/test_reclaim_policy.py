"""Reclaim policy files: the shipped example loads, every bad key or value is an error naming the
key, durations and business hours (time-zone aware) parse as documented."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

import pytest
import yaml

from gpuwatch.reclaim import policy
from tests.conftest import ROOT


def test_example_policy_loads_and_documents_every_key():
    loaded = policy.load(ROOT / "examples" / "reclaim-policy.yaml")
    assert loaded.min_idle_seconds == 900 and loaded.warning_seconds == 1800
    assert loaded.business_hours.timezone == "Europe/Berlin"
    assert loaded.action_for("RayCluster") == "suspend_job" and loaded.action_for("Job") == "suspend_job"
    text = (ROOT / "examples" / "reclaim-policy.yaml").read_text()
    documented = {line.split(":")[0] for line in text.splitlines() if line and line[0].isalpha()}
    assert documented == {f.name for f in fields(policy.Policy)}


def test_defaults_are_the_safe_ones():
    rules = policy.parse({})
    assert rules.namespaces == () and "kube-system" in rules.protected_namespaces
    assert rules.min_idle_seconds == 900 and rules.business_hours is None


@pytest.mark.parametrize(("raw", "message"), [
    ({"warning_period": "30m"}, "unknown key 'warning_period'"),
    ({"min_idle_seconds": "soon"}, "key 'min_idle_seconds': expected a duration"),
    ({"min_idle_seconds": 0}, "key 'min_idle_seconds': must be positive"),
    ({"idle_below": 5}, "key 'idle_below': expected a ratio"),
    ({"max_actions_per_hour": -1}, "key 'max_actions_per_hour': expected a whole number"),
    ({"max_actions_per_hour": True}, "key 'max_actions_per_hour'"),
    ({"namespaces": "ml"}, "key 'namespaces': expected a list"),
    ({"owner_kinds": ["RayCluster"]}, "key 'owner_kinds': 'RayCluster' is neither built in"),
    ({"business_hours": {"timezone": "Mars/Olympus"}}, "business_hours'.timezone: unknown time zone"),
    ({"business_hours": {"days": ["someday"]}}, "business_hours'.days"),
    ({"business_hours": {"start": "18:00", "end": "09:00"}}, "must be before end"),
    ({"business_hours": {"start": "9am"}}, "business_hours'.start: expected a time of day"),
    ({"webhooks": {"ml": "ftp://x"}}, "key 'webhooks'"),
    ({"custom_kinds": {"RayCluster": {"group": "ray.io"}}}, "custom_kinds'.RayCluster: expected keys"),
    ({"custom_kinds": {"X": {"group": "g", "version": "v1", "plural": "xs", "patch": {}, "restore_patch": {},
                             "action": "delete"}}}, "custom_kinds'.X.action"),
    (["not", "a", "mapping"], "expected a mapping at the top level"),
])
def test_bad_policies_name_the_key(raw, message):
    with pytest.raises(policy.PolicyError) as error:
        policy.parse(raw, source="policy.yaml")
    assert str(error.value).startswith("policy.yaml: ") and message in str(error.value)


def test_unreadable_yaml_names_the_file(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("min_idle_seconds: [unclosed")
    with pytest.raises(policy.PolicyError, match=r"p\.yaml: cannot read policy"):
        policy.load(bad)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), (90, 90), ("15m", 900), ("1.5h", 5400), ("2d", 172800)])
def test_durations(text, seconds):
    assert policy.duration(text, "k") == seconds


@pytest.mark.parametrize(("utc", "inside"), [
    (datetime(2026, 11, 16, 7, 59, tzinfo=UTC), False),  # Monday 08:59 in Berlin (UTC+1 in November)
    (datetime(2026, 11, 16, 8, 0, tzinfo=UTC), True),    # Monday 09:00 in Berlin
    (datetime(2026, 11, 16, 16, 59, tzinfo=UTC), True),
    (datetime(2026, 11, 16, 17, 0, tzinfo=UTC), False),  # 18:00 in Berlin: the end is exclusive
    (datetime(2026, 11, 21, 10, 0, tzinfo=UTC), False),  # Saturday
    (datetime(2026, 7, 6, 7, 30, tzinfo=UTC), True),     # summer time: 09:30 in Berlin (UTC+2)
])
def test_business_hours_are_time_zone_aware(utc, inside):
    rules = policy.parse(yaml.safe_load("business_hours: {timezone: Europe/Berlin}"))
    assert rules.business_hours.contains(utc) is inside


# -- issue 12 hardening -------------------------------------------------------------------------

def test_protected_namespaces_add_to_the_built_in_set_never_replace_it(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("protected_namespaces: [finance]\n")
    rules = policy.load(path)
    assert {"kube-system", "kube-public", "kube-node-lease", "finance"} <= set(rules.protected_namespaces)
    # even a Policy built in code without them keeps the built-ins protected
    assert "kube-system" in policy.Policy(protected_namespaces=("finance",)).protected


def test_unquoted_times_parse_as_times_not_yaml_1_1_base_60(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("business_hours:\n  timezone: UTC\n  start: 08:30\n  end: 18:00\n")
    hours = policy.load(path).business_hours
    assert (hours.start.hour, hours.start.minute, hours.end.hour) == (8, 30, 18)
    with pytest.raises(policy.PolicyError, match=r"business_hours'.end: expected a time of day .*got 1080"):
        policy.parse({"business_hours": {"end": 1080}}, source="p.yaml")  # what plain safe_load makes of 18:00


@pytest.mark.parametrize("value", [0, "0s", "4m", 299])
def test_warning_seconds_below_the_documented_minimum_is_refused(value):
    with pytest.raises(policy.PolicyError, match=r"key 'warning_seconds': must be at least 300 s"):
        policy.parse({"warning_seconds": value}, source="p.yaml")
    assert policy.parse({"warning_seconds": "5m"}).warning_seconds == policy.MIN_WARNING_SECONDS == 300


@pytest.mark.parametrize(("text", "key"), [
    ("warning_seconds: 30m\nmin_idle_seconds: 15m\nwarning_seconds: 5m\n", "warning_seconds"),
    ("business_hours:\n  start: '09:00'\n  start: '10:00'\n", "start"),
])
def test_duplicate_keys_are_errors_naming_the_key(tmp_path, text, key):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(policy.PolicyError, match=rf"p\.yaml: key '{key}' appears twice \(lines"):
        policy.load(path)
