"""The values table of helm/gpuwatch/README.md, generated from values.yaml's `# --` comments.

`python helm/values_table.py` prints the table; `--write` replaces the block between the
README's `<!-- values-table:start -->` / `<!-- values-table:end -->` markers;
tests/test_helm_readme.py fails when the README and values.yaml drift. Stdlib + PyYAML only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent / "gpuwatch"
START, END = "<!-- values-table:start -->", "<!-- values-table:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-/\"]+):(?:\s|$)")


def documented_keys(text: str) -> list[tuple[str, str]]:
    """``(dotted.key, description)`` for every key preceded by a ``# -- description`` comment.

    Keys are found by indentation (list items are not descended into), so the result follows
    the file's order. A comment continued on following ``#`` lines is joined.
    """
    found: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and pending:
            pending.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match:
            if stripped and not stripped.startswith("-"):
                pending = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [match["key"].strip('"')])
        stack.append((indent, match["key"].strip('"')))
        if pending:
            found.append((path, " ".join(pending)))
        pending = []
    return found


def lookup(values: dict, dotted: str):
    node = values
    for part in dotted.split("."):
        node = node[part]
    return node


def table(values_path: Path = CHART / "values.yaml") -> str:
    """The Markdown table: key, type, default (JSON), description."""
    text = values_path.read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, description in documented_keys(text):
        value = lookup(values, key)
        kind = {bool: "bool", int: "int", float: "number", str: "string", list: "list", dict: "object"}.get(
            type(value), type(value).__name__)
        default = json.dumps(value, separators=(",", ":")) if not isinstance(value, dict) or len(
            json.dumps(value)) <= 60 else "see values.yaml"
        rows.append(f"| `{key}` | {kind} | `{default}` | {description.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def splice(readme: str, generated: str) -> str:
    """``readme`` with the marked block replaced by ``generated``."""
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{generated}{END}{tail}"


def main(argv: list[str]) -> int:
    generated = table()
    if "--write" in argv:
        readme = CHART / "README.md"
        readme.write_text(splice(readme.read_text(encoding="utf-8"), generated), encoding="utf-8")
        print(f"updated {readme}")
    else:
        sys.stdout.write(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
