"""Reclaim policy: plain data read from YAML, validated with errors that name the key.

Every key is documented in the README's reclaim section and in examples/reclaim-policy.yaml.
The decision itself can be refined by an injectable predicate (idle-culler's ``cull_arbiter``):
``arbiter(*, candidate, idle_seconds, policy, now) -> bool``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from datetime import datetime, time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from gpuwatch import units
from gpuwatch.reclaim.policy_yaml import DuplicateKey, read_yaml

ACTIONS = ("stop_notebook", "scale_to_zero", "suspend_job", "evict_pod")
BUILTIN_KINDS = {"Notebook": "stop_notebook", "Deployment": "scale_to_zero",
                 "StatefulSet": "scale_to_zero", "Job": "suspend_job", "Pod": "evict_pod"}
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# Never touched whatever a policy says: protected_namespaces adds to these, never replaces them.
BUILTIN_PROTECTED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
# A warning must give people time to react: a shorter warning_seconds is refused.
MIN_WARNING_SECONDS = 300.0


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class BusinessHours:
    """Act only on these weekdays between ``start`` and ``end`` local time in ``timezone``."""

    timezone: str = "UTC"
    days: tuple[str, ...] = DAYS[:5]
    start: time = time(9, 0)
    end: time = time(18, 0)

    def contains(self, now: datetime) -> bool:
        local = now.astimezone(ZoneInfo(self.timezone))
        return DAYS[local.weekday()] in self.days and self.start <= local.time() < self.end


@dataclass(frozen=True)
class CustomKind:
    """How to reclaim (and restore) a custom resource kind the built-ins do not cover."""

    group: str
    version: str
    plural: str
    patch: dict
    restore_patch: dict
    action: str = "suspend_job"


@dataclass(frozen=True)
class Policy:
    """What the controller may do. Defaults are the safe ones (docs/architecture.md#finding-semantics thresholds)."""

    namespaces: tuple[str, ...] = ()
    protected_namespaces: tuple[str, ...] = BUILTIN_PROTECTED_NAMESPACES
    protected_priority_classes: tuple[str, ...] = ("system-cluster-critical", "system-node-critical")
    idle_below: float = 0.05
    min_idle_seconds: float = 900.0
    warning_seconds: float = 1800.0
    max_actions_per_hour: int = 10
    max_actions_per_team_per_hour: int = 3
    business_hours: BusinessHours | None = None
    owner_kinds: tuple[str, ...] = ("Notebook", "Deployment", "StatefulSet", "Job", "Pod")
    custom_kinds: dict[str, CustomKind] = field(default_factory=dict)
    webhooks: dict[str, str] = field(default_factory=dict)
    team_label: str = "team"
    max_data_age_seconds: float = 900.0

    @property
    def protected(self) -> frozenset[str]:
        """Every protected namespace: the built-in ones always, plus the policy's."""
        return frozenset(BUILTIN_PROTECTED_NAMESPACES) | frozenset(self.protected_namespaces)

    def action_for(self, kind: str) -> str | None:
        """The action for an owner kind, or None when the policy does not cover it."""
        if kind in self.custom_kinds:
            return self.custom_kinds[kind].action
        return BUILTIN_KINDS.get(kind)


def default_arbiter(*, candidate: Any, idle_seconds: float, policy: Policy, now: datetime) -> bool:
    """Reclaim when the current idle run is at least ``min_idle_seconds`` long."""
    return idle_seconds >= policy.min_idle_seconds


def load(path: str | Path) -> Policy:
    """Read and validate a YAML policy file (duplicate keys are errors; 18:00 is a time)."""
    try:
        raw = read_yaml(Path(path).read_text()) or {}
    except DuplicateKey as exc:
        raise PolicyError(f"{path}: {exc}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: cannot read policy: {exc}") from exc
    return parse(raw, source=str(path))


def parse(raw: Any, *, source: str = "policy") -> Policy:
    """Validate a decoded policy mapping; unknown keys and wrong types are errors."""
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    known = {f.name for f in fields(Policy)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise PolicyError(f"{source}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
    values = {key: _PARSERS[key](value, f"{source}: key {key!r}") for key, value in raw.items()}
    if "protected_namespaces" in values:  # adds to the built-in set, never replaces it
        values["protected_namespaces"] = tuple(dict.fromkeys(BUILTIN_PROTECTED_NAMESPACES
                                                             + values["protected_namespaces"]))
    policy = Policy(**values)
    bad = [k for k in policy.owner_kinds if policy.action_for(k) is None]
    if bad:
        raise PolicyError(f"{source}: key 'owner_kinds': {bad[0]!r} is neither built in "
                          f"({', '.join(BUILTIN_KINDS)}) nor listed under custom_kinds")
    return policy


def duration(value: Any, where: str) -> float:
    """Seconds from a number or a string like ``15m``, ``1h``, ``90s`` (gpuwatch.units' one parser)."""
    if isinstance(value, bool):
        raise PolicyError(f"{where}: expected a duration (seconds or '15m'), got {value!r}")
    try:
        return units.parse_duration(str(value), what=where)
    except units.UsageError:
        if re.fullmatch(r"0+(\.0*)?[smhdw]?", str(value).strip()):
            return 0.0  # a zero duration: the key's own rule says why that is refused
        raise PolicyError(f"{where}: expected a duration (seconds or '15m'), got {value!r}") from None


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"{where}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def _ratio(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise PolicyError(f"{where}: expected a ratio in (0, 1], got {value!r}")
    return float(value)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PolicyError(f"{where}: expected a whole number >= 0, got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise PolicyError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _clock(value: Any, where: str) -> time:
    if not isinstance(value, str):  # e.g. 1080: a YAML 1.1 reader took 18:00 for base-60 minutes
        raise PolicyError(f"{where}: expected a time of day like '09:00' (quoted), got {value!r}")
    try:
        return time.fromisoformat(value.strip())
    except ValueError:
        raise PolicyError(f"{where}: expected a time of day like '09:00', got {value!r}") from None


def _business_hours(value: Any, where: str) -> BusinessHours | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"timezone", "days", "start", "end"}:
        raise PolicyError(f"{where}: expected a mapping with timezone, days, start, end; got {value!r}")
    hours = BusinessHours()
    tz = _text(value.get("timezone", hours.timezone), f"{where}.timezone")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise PolicyError(f"{where}.timezone: unknown time zone {tz!r}") from None
    days = tuple(d.lower()[:3] for d in _strings(value.get("days", list(hours.days)), f"{where}.days"))
    if set(days) - set(DAYS):
        raise PolicyError(f"{where}.days: expected weekday names (mon..sun), got {value['days']!r}")
    start = _clock(value.get("start", "09:00"), f"{where}.start")
    end = _clock(value.get("end", "18:00"), f"{where}.end")
    if not start < end:
        raise PolicyError(f"{where}: start {start} must be before end {end}")
    return BusinessHours(timezone=tz, days=days, start=start, end=end)


def _custom_kinds(value: Any, where: str) -> dict[str, CustomKind]:
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: expected a mapping of kind -> settings, got {value!r}")
    kinds = {}
    for kind, spec in value.items():
        at = f"{where}.{kind}"
        need = {"group", "version", "plural", "patch", "restore_patch"}
        if not isinstance(spec, dict) or need - set(spec) or set(spec) - need - {"action"}:
            raise PolicyError(f"{at}: expected keys {', '.join(sorted(need))} (and optional action)")
        if not isinstance(spec["patch"], dict) or not isinstance(spec["restore_patch"], dict):
            raise PolicyError(f"{at}: patch and restore_patch must be mappings (JSON merge patches)")
        action = spec.get("action", "suspend_job")
        if action not in ACTIONS:
            raise PolicyError(f"{at}.action: expected one of {', '.join(ACTIONS)}, got {action!r}")
        kinds[kind] = CustomKind(group=_text(spec["group"], f"{at}.group"),
                                 version=_text(spec["version"], f"{at}.version"),
                                 plural=_text(spec["plural"], f"{at}.plural"), patch=spec["patch"],
                                 restore_patch=spec["restore_patch"], action=action)
    return kinds


def _webhooks(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in value.values()):
        raise PolicyError(f"{where}: expected a mapping team -> http(s) URL ('*' = every team)")
    return {str(k): v for k, v in value.items()}


def _seconds(value: Any, where: str) -> float:
    seconds = duration(value, where)
    if seconds <= 0:
        raise PolicyError(f"{where}: must be positive, got {value!r}")
    return seconds


def _warning_seconds(value: Any, where: str) -> float:
    seconds = duration(value, where)
    if seconds < MIN_WARNING_SECONDS:
        raise PolicyError(f"{where}: must be at least {MIN_WARNING_SECONDS:.0f} s (5m) so people can "
                          f"react to the warning, got {value!r}")
    return seconds


_PARSERS = {
    "namespaces": _strings, "protected_namespaces": _strings,
    "protected_priority_classes": _strings, "idle_below": _ratio,
    "min_idle_seconds": _seconds, "warning_seconds": _warning_seconds,
    "max_actions_per_hour": _count, "max_actions_per_team_per_hour": _count,
    "business_hours": _business_hours, "owner_kinds": _strings, "custom_kinds": _custom_kinds,
    "webhooks": _webhooks, "team_label": _text, "max_data_age_seconds": _seconds,
}
