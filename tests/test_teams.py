"""Who pays: a pod's team is its team label, else its namespace's team (the `teams` file: exact names
and globs), else its namespace. On real DuckDB stores, the real CLI and the rendered chart.
"""

from __future__ import annotations

import pytest

from gpuwatch import cli, store
from gpuwatch.ingest.series import ksm_label
from tests.support.bundles import SAMPLE_DATA
from tests.support.helm_chart import container, find, pod_spec, render

BUNDLE = ("devices.csv", "pods.csv", "prices.csv", "samples.parquet")


def _bundle(tmp_path, teams: str | None = None):
    """sample_data without its teams file, plus ``teams`` as the teams file when given."""
    out = tmp_path / "bundle"
    out.mkdir()
    for name in BUNDLE:
        (out / name).symlink_to(SAMPLE_DATA / name)
    if teams is not None:
        (out / "teams.csv").write_text(teams)
    return out


def _teams(db) -> dict[str, set[str]]:
    con = store.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT namespace, team FROM stg_pods").fetchall()
        streams = con.execute("SELECT DISTINCT namespace, team FROM stg_streams WHERE namespace IS NOT NULL").fetchall()
    finally:
        con.close()
    out: dict[str, set[str]] = {}
    for namespace, team in rows:
        out.setdefault(namespace, set()).add(team)
    assert all(team in out.get(ns, {team}) for ns, team in streams if team is not None)  # the same team everywhere
    return out


def _unlabelled(namespace: str) -> int:
    import pandas as pd

    pods = pd.read_csv(SAMPLE_DATA / "pods.csv")
    return int(((pods["namespace"] == namespace) & pods["team"].isna()).sum())


def test_without_a_teams_file_unlabelled_pods_fall_back_to_their_namespace(tmp_path):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path)), "--db", str(db)]) == 0
    assert _unlabelled("nlp-train") > 0
    assert _teams(db)["nlp-train"] == {"nlp", "nlp-train"}  # the split the teams file exists to end


def test_the_teams_file_maps_namespaces_exact_names_first_then_the_longest_glob(tmp_path):
    teams = "namespace,team\nnlp*,language\nnlp-train,nlp\nrecsys-*,recsys\nrecsys-p*,ranking\n"
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, teams)), "--db", str(db)]) == 0
    found = _teams(db)
    assert found["nlp-train"] == {"nlp"}  # exact beats the glob; the label (nlp) agrees
    assert found["nlp-serving"] == {"nlp", "language"}  # labelled pods keep their label; the rest map by glob
    assert found["recsys-prod"] == {"recsys", "ranking"} and found["recsys-exp"] == {"recsys"}
    assert found["vision"] == {"vision"}  # no row matches: the namespace (here also the label)


def test_the_shipped_sample_data_has_five_teams(tmp_path):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(SAMPLE_DATA), "--db", str(db)]) == 0
    assert set().union(*_teams(db).values()) == {"nlp", "platform", "recsys", "research", "vision"}


def test_ingest_teams_alone_remaps_a_store_and_the_findings_follow(tmp_path):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path)), "--db", str(db)]) == 0
    mapping = tmp_path / "teams.csv"
    mapping.write_text("namespace,team\nnlp-*,nlp\n")
    assert cli.main(["ingest", "--teams", str(mapping), "--db", str(db)]) == 0
    assert _teams(db)["nlp-train"] == {"nlp"}
    out = tmp_path / "out"
    assert cli.main(["analyze", "--db", str(db), "--out", str(out)]) == 0
    import pandas as pd

    charge = pd.read_csv(out / "chargeback.csv")
    assert "nlp-train" not in set(charge["team"].dropna())


@pytest.mark.parametrize(("text", "message"), [
    ("namespace\nnlp-train\n", "missing required column(s) 'team'"),
    ("namespace,team,cost_center\nnlp,nlp,42\n", "cost_center"),
])
def test_a_bad_teams_file_is_one_line_and_the_store_is_untouched(tmp_path, capsys, text, message):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path)), "--db", str(db)]) == 0
    before = _teams(db)
    bad = tmp_path / "teams.csv"
    bad.write_text(text)
    capsys.readouterr()
    assert cli.main(["ingest", "--teams", str(bad), "--db", str(db)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and message in err, err
    assert _teams(db) == before


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--teams", "no-such.csv"], 1, "--teams no-such.csv: no such file"),
    (["--from", str(SAMPLE_DATA), "--team-label", "team label!"], 2, "--team-label: 'team label!' is not a Kubernetes label key"),
])
def test_bad_team_flags_are_refused_before_the_store_opens(tmp_path, capsys, args, code, message):
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", *args, "--db", str(db)]) == code
    assert message in capsys.readouterr().err
    assert not db.exists()


@pytest.mark.parametrize(("key", "label"), [
    ("team", "label_team"), ("example.com/team", "label_example_com_team"),
    ("app.kubernetes.io/part-of", "label_app_kubernetes_io_part_of"),
])
def test_a_team_label_key_is_read_under_the_name_kube_state_metrics_gives_it(key, label):
    assert ksm_label(key) == label


def test_the_chart_maps_namespaces_to_teams_from_values(tmp_path):
    """teams.namespaces becomes the analyzer's teams.csv and teams.label its --team-label; the rendered
    file, loaded by the real CLI, maps the namespaces."""
    docs = render({"teams": {"label": "example.com/team", "namespaces": {"nlp": ["nlp-*"], "recsys": ["recsys-prod", "recsys-exp"]}}})
    args = container(pod_spec(find(docs, "CronJob", "analyzer")), "analyzer")["args"]
    assert args[args.index("/scripts/teams.csv") - 1] == "--teams"
    assert args[args.index("--team-label") + 1] == "example.com/team"
    config = next(d for d in docs if d.kind == "ConfigMap" and d.component == "analyzer")
    text = config.obj["data"]["teams.csv"]
    assert text.splitlines() == ["namespace,team", "nlp-*,nlp", "recsys-prod,recsys", "recsys-exp,recsys"]
    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path, text)), "--db", str(db)]) == 0
    assert _teams(db)["nlp-train"] == {"nlp"} and _teams(db)["recsys-exp"] == {"recsys"}
    default = container(pod_spec(find(render(), "CronJob", "analyzer")), "analyzer")["args"]
    assert "--teams" not in default and default[default.index("--team-label") + 1] == "team"


def test_the_chart_refuses_a_team_label_that_is_not_a_label_key():
    with pytest.raises(Exception, match="teams"):
        render({"teams": {"label": "not a label"}})


def test_pod_labels_that_are_not_a_json_object_are_refused_and_the_store_is_untouched(tmp_path, capsys):
    import pandas as pd

    db = tmp_path / "g.duckdb"
    assert cli.main(["ingest", "--from", str(_bundle(tmp_path)), "--db", str(db)]) == 0
    bad = tmp_path / "badpods"
    bad.mkdir()
    pods = pd.read_csv(SAMPLE_DATA / "pods.csv").head(3)
    pods.loc[1, "labels"] = '["cost_center", "cc-1"]'
    pods.to_csv(bad / "pods.csv", index=False)
    before = _teams(db)
    capsys.readouterr()
    assert cli.main(["ingest", "--from", str(bad), "--db", str(db)]) == 1
    err = capsys.readouterr().err.strip()
    assert "column 'labels', row 2" in err and "is not a JSON object of labels" in err and len(err.splitlines()) == 1
    assert _teams(db) == before


def test_a_store_from_before_pod_labels_gains_the_column(tmp_path):
    db = tmp_path / "old.duckdb"
    con = store.connect(str(db))
    # the shape of a store an older gpuwatch wrote before labels existed (its SQL: another fingerprint)
    con.execute("ALTER TABLE pods DROP COLUMN labels")
    con.execute("UPDATE store_meta SET value = 'older' WHERE key = 'staging'")
    con.close()
    con = store.connect(str(db))
    try:
        assert "labels" in [r[0] for r in con.execute("DESCRIBE pods").fetchall()]
        store.load_bundle(con, SAMPLE_DATA)
        assert con.execute("SELECT count(*) FROM stg_pods WHERE labels LIKE '%cost_center%'").fetchone()[0] == 475
    finally:
        con.close()
