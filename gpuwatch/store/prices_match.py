"""A price file's rows must name models the store has seen (``ingest --prices FILE``, the chart's prices).

The matching rule, declared once in staging.sql's ``model_key`` and used here and by staging alike: a
price's model matches a GPU's model when both are equal after trimming the ends and folding case
("nvidia h100 80gb hbm3 " = "NVIDIA H100 80GB HBM3"); nothing looser (no substring, no fuzzy match:
"H100" would also name an H100 PCIe or NVL, priced differently). A "<model>/<MIG profile>" row matches
through its model and must name a MIG profile. A row whose model matches no GPU in the store (after
this load) is an error naming the file, the row, the models seen and the closest one: with it loaded,
the GPUs it was meant for would stay unpriced while the load looked fine. A store that holds no GPU
yet (prices loaded first) cannot be checked; its GPUs, once loaded, say "unpriced" where no price matches.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from gpuwatch.store.columns import ROW
from gpuwatch.store.validate import BundleError

MODELS_NAMED = 8  # models listed in the message at most
# A MIG profile name as drivers print it: 1g.10gb, 3g.40gb, 1g.10gb+me, 1g.18gb, 1c.3g.71gb (a compute
# instance of a 3g instance); the placement table (gpuwatch.mig) decides later what it occupies.
_PROFILE = re.compile(r"^(?:\d+c\.)?\d+g\.\d+(?:\.\d+)?gb(?:[+.]me)?$")


def check(con: Any, *, file: str) -> None:
    """Every row of ``incoming`` (a typed prices part of ``file``) names a model of the store's devices."""
    seen = dict(con.execute("SELECT model_key(gpu_model), min(trim(gpu_model)) FROM devices "
                            "WHERE nullif(trim(gpu_model), '') IS NOT NULL GROUP BY 1 ORDER BY 1").fetchall())
    if not seen:
        return
    rows = con.execute(f"SELECT {ROW}, gpu_model, model_key(gpu_model) FROM incoming ORDER BY {ROW}").fetchall()
    for row, model, key in rows:
        problem = _problem(key, model.strip().rpartition("/")[2], seen)
        if problem is not None:
            raise BundleError(f"{file}: column 'gpu_model', row {row}: {model!r} {problem}")


def _problem(key: str, profile_text: str, seen: dict[str, str]) -> str | None:
    """Why the model key ``key`` matches no GPU (None when it matches)."""
    if key in seen:
        return None
    model, _, profile = key.rpartition("/")
    if model in seen:
        if _PROFILE.match(profile.strip()):
            return None
        return f"prices {seen[model]!r} per MIG profile, but {profile_text!r} is not a MIG profile (e.g. 1g.10gb)"
    names = ", ".join(repr(v) for v in list(seen.values())[:MODELS_NAMED]) + (", ..." if len(seen) > MODELS_NAMED else "")
    return (f"matches no GPU model in the store (models are matched whole, ignoring case and surrounding "
            f"spaces); models seen: {names}; closest: {seen[closest(key, list(seen))]!r}")


def closest(key: str, keys: list[str]) -> str:
    """The seen model key nearest ``key``: one containing it as a word ("h100" in "nvidia h100 80gb
    hbm3"), else the most similar text."""
    words = [k for k in keys if re.search(rf"(?<![a-z0-9]){re.escape(key)}(?![a-z0-9])", k)]
    return min(words, key=len) if words else max(keys, key=lambda k: difflib.SequenceMatcher(None, key, k).ratio())
