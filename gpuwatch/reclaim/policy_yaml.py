"""The policy file's YAML dialect: PyYAML's SafeLoader minus two YAML 1.1 traps.

``18:00`` stays the string "18:00" (YAML 1.1 reads it as the base-60 integer 1080, so a business
hour would silently become a number), and a repeated key is an error naming it (YAML keeps the
last value without a word, so the first setting someone reads is not the one that applies).
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class DuplicateKey(yaml.YAMLError):
    """A key that appears twice in one mapping; the message names it and both lines."""


_INT = r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"
_FLOAT = (r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
          r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_NUMBER = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _resolvers() -> dict:
    """SafeLoader's implicit resolvers with int and float re-declared without base 60."""
    table = {first: [(tag, rx) for tag, rx in pairs if tag not in _NUMBER]
             for first, pairs in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    for tag, pattern, firsts in ((_NUMBER[0], _INT, "-+0123456789"), (_NUMBER[1], _FLOAT, "-+0123456789.")):
        for first in firsts:
            table.setdefault(first, []).append((tag, re.compile(pattern)))
    return table


class _PolicyLoader(yaml.SafeLoader):
    """SafeLoader minus two YAML 1.1 traps: ``18:00`` read as the base-60 integer 1080 (here it
    stays the string "18:00"), and a repeated key silently keeping the last value (an error)."""

    yaml_implicit_resolvers = _resolvers()

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKey(f"key {key!r} appears twice (lines {seen[key]} and "
                                    f"{key_node.start_mark.line + 1}); a policy key may appear once")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml(text: str) -> Any:
    """Decode policy YAML with the loader above (what ``load`` uses; tests and the chart too)."""
    return yaml.load(text, Loader=_PolicyLoader)  # a SafeLoader subclass: no arbitrary objects
