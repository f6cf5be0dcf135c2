"""A teams row may name a namespace of one cluster ("prod/nlp-train", "prod/nlp-*"): before, such a row
was ignored, since rows were matched against the namespace without its cluster (issue 31 item 14).
A bare row maps the namespace in every cluster; a qualified one in its cluster only, and wins there.
On a real DuckDB store loaded as two clusters."""

from __future__ import annotations

import pandas as pd

from gpuwatch import store


def _load(con, cluster: str) -> None:
    store.load(con, {
        "devices": pd.DataFrame([{"node": "n1", "gpu_uuid": f"GPU-{cluster}", "gpu_model": "NVIDIA L40S"}]),
        "pods": pd.DataFrame([{"namespace": ns, "pod": f"{ns}-0", "gpu_count": 1.0, "node": "n1"}
                              for ns in ("nlp-train", "nlp-serve", "vision")])}, source=cluster, cluster=cluster)


def test_qualified_teams_rows_map_their_cluster_only(tmp_path):
    teams = tmp_path / "teams.csv"
    teams.write_text("namespace,team\nnlp-*,nlp\nprod/nlp-train,nlp-prod-training\ndev/nlp-*,nlp-sandbox\n"
                     "prod/vision,vision-prod\n")
    con = store.connect(None)
    try:
        _load(con, "prod")
        _load(con, "dev")
        store.load(con, {}, source="teams", teams=[str(teams)])
        got = dict(con.execute("SELECT namespace, team FROM stg_pods").fetchall())
    finally:
        con.close()
    assert got == {"prod/nlp-train": "nlp-prod-training", "prod/nlp-serve": "nlp", "prod/vision": "vision-prod",
                   "dev/nlp-train": "nlp-sandbox", "dev/nlp-serve": "nlp-sandbox", "dev/vision": "dev/vision"}
