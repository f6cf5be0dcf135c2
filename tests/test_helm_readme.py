"""helm/gpuwatch/README.md: its values table is exactly what helm/values_table.py generates from
values.yaml's `# --` comments (fails when either drifts; fix with
`python helm/values_table.py --write`), every value is documented, and the install command the
project documents is there.
"""

from __future__ import annotations

import importlib.util

import yaml

from tests.support.helm_chart import CHART, ROOT


def values_table():
    spec = importlib.util.spec_from_file_location("values_table", ROOT / "helm" / "values_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_values_table_matches_values_yaml():
    module = values_table()
    readme = (CHART / "README.md").read_text()
    assert module.START in readme and module.END in readme
    block = readme.split(module.START, 1)[1].split(module.END, 1)[0].strip("\n") + "\n"
    assert block == module.table(), "README values table is stale: run `python helm/values_table.py --write`"


def test_every_component_and_leaf_value_is_documented():
    module = values_table()
    text = (CHART / "values.yaml").read_text()
    documented = dict(module.documented_keys(text))
    values = yaml.safe_load(text)
    for component in ("exporter", "analyzer", "app", "report", "reclaim", "derived", "dashboards", "rules"):
        assert component in documented, component
        for key, value in values[component].items():
            if key == "image":  # the same three fields under every component, documented once
                continue
            assert f"{component}.{key}" in documented, f"{component}.{key} has no `# --` comment"
            if isinstance(value, dict) and key in ("service", "serviceMonitor", "podMonitor", "ingress", "webhook", "rbac"):
                for sub in value:
                    assert f"{component}.{key}.{sub}" in documented, f"{component}.{key}.{sub} has no `# --` comment"


def test_generator_parses_nesting_and_continued_comments():
    module = values_table()
    text = "# -- top\na:\n  # -- first\n  # line two\n  b: 1\n  c: 2\n# -- list\nd:\n  - x: 1\n"
    assert module.documented_keys(text) == [("a", "top"), ("a.b", "first line two"), ("d", "list")]


def test_readme_documents_install_and_permissions():
    readme = (CHART / "README.md").read_text()
    assert "helm install gpuwatch ./helm/gpuwatch -n gpuwatch --create-namespace" in readme
    assert "## Permissions" in readme and "SYS_ADMIN" in readme and "pods/eviction" in readme
