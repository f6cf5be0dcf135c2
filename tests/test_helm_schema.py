"""values.schema.json: Helm's engine (the check `helm install` runs) accepts the chart's default
and all-on values, and rejects bad values with a message naming the key and what is wrong.

Also checks the same schema with the Python `jsonschema` package, so the schema is valid
draft-07 and not only something Helm's validator happens to accept.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.helm_chart import CHART, all_on_values, helm

BAD_VALUES = [
    ({"exporter": {"source": "rocm"}},
     "at '/exporter/source': value must be one of 'auto', 'dcgm', 'nvml', 'simulate'"),
    ({"exporter": {"profilng": True}}, "at '/exporter': additional properties 'profilng' not allowed"),
    ({"exporter": {"port": 70000}}, "at '/exporter/port': maximum: got 70,000, want 65,535"),
    ({"exporter": {"interval": "fast"}}, "at '/exporter/interval': 'fast' does not match pattern"),
    ({"exporter": {"kubeletSocketDir": "var/lib/kubelet"}}, "at '/exporter/kubeletSocketDir'"),
    ({"exporter": {"hostnameLabel": "host"}}, "at '/exporter/hostnameLabel': value must be one of '', 'hostname', 'Hostname'"),
    ({"analyzer": {"mode": "daemon"}}, "at '/analyzer/mode': value must be one of 'cronjob', 'deployment'"),
    ({"analyzer": {"schedule": "every monday"}}, "at '/analyzer/schedule': 'every monday' does not match pattern"),
    ({"report": {"webhook": {"enabled": True}}}, "at '/report/webhook/existingSecret': minLength: got 0, want 1"),
    ({"report": {"outDir": "/tmp/reports"}}, "at '/report/outDir'"),
    ({"reclaim": {"apply": "yes"}}, "at '/reclaim/apply': got string, want boolean"),
    ({"app": {"ingress": {"enabled": True, "hosts": []}}}, "at '/app/ingress/hosts': minItems: got 0, want 1"),
    ({"persistence": {"accessModes": ["ReadOnlyMany"]}},
     "at '/persistence/accessModes/0': value must be one of 'ReadWriteOnce', 'ReadWriteMany', 'ReadWriteOncePod'"),
    ({"prometheus": {"url": "prometheus:9090"}}, "at '/prometheus/url'"),
    ({"reclaim": {"enabled": "true"}}, "at '/reclaim/enabled': got string, want boolean"),
    ({"exporterr": {}}, "additional properties 'exporterr' not allowed"),
]


@pytest.fixture(scope="module")
def chart():
    with helm().Chart.load(CHART) as loaded:
        yield loaded


@pytest.mark.parametrize("values", [{}, None], ids=["default", "all-on"])
def test_good_values_pass(chart, values):
    chart.validate_schema(chart.merge_values(all_on_values() if values is None else values))


@pytest.mark.parametrize(("bad", "message"), BAD_VALUES, ids=[m.split("'")[1] if "'" in m else m for _, m in BAD_VALUES])
def test_bad_values_are_rejected_with_a_message_naming_the_key(chart, bad, message):
    with pytest.raises(helm().HelmValuesError) as caught:
        chart.validate_schema(chart.merge_values(bad))
    assert message in str(caught.value), str(caught.value)


def test_rendering_refuses_bad_values_too(chart):
    # `helm template`/`install` validate before rendering: a typo never reaches the cluster
    with pytest.raises(Exception, match=re.escape("at '/exporter/source'")):
        chart.render({"exporter": {"source": "rocm"}}, name="gpuwatch", namespace="gpuwatch")


def test_schema_is_valid_draft7_and_agrees_with_helm():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    with helm().Chart.load(CHART) as chart:
        validator = jsonschema.Draft7Validator(schema)
        assert not list(validator.iter_errors(chart.merge_values(all_on_values())))
        for bad, _ in BAD_VALUES:
            assert list(validator.iter_errors(chart.merge_values(bad))), bad


def test_every_component_key_has_enabled_image_and_resources():
    schema = json.loads((CHART / "values.schema.json").read_text())
    for component in ("exporter", "analyzer", "app", "report", "reclaim", "derived"):
        props = schema["properties"][component]["properties"]
        assert {"enabled", "image", "resources"} <= set(props), component
