"""infra/docker-compose.yml validates against the Compose Specification's JSON schema, and every role is a
service with a health check.

No container engine runs here, so this is what checks the compose file. The schema is vendored
(infra/schema/compose-spec.json: `compose/config/compose_spec.json` from the docker-compose 1.29.2 wheel on
PyPI, Apache-2.0; see infra/schema/README.md): nothing is downloaded at test time.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

INFRA = Path(__file__).resolve().parents[2] / "infra"
ROLES = ("gate", "embedder", "linker", "importance", "health-agent", "nudge-agent", "serve")


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((INFRA / "docker-compose.yml").read_text())  # merge keys resolved
    return doc


def _errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads((INFRA / "schema" / "compose-spec.json").read_text())
    validator = jsonschema.Draft201909Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_compose_file_validates_against_the_compose_spec() -> None:
    errors = _errors(_compose())
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(
    ("where", "mutate"),
    [
        ("a misspelt health check key", lambda d: d["services"]["gate"]["healthcheck"].update(intervall="5s")),
        ("a port that is not a string or number", lambda d: d["services"]["serve"].update(ports=[{"x": [1]}])),
        ("an unknown service key", lambda d: d["services"]["kafka"].update(restart_policy="always")),
        (
            "depends_on with an unknown condition",
            lambda d: d["services"]["gate"]["depends_on"]["kafka"].update(condition="service_ready"),
        ),
    ],
)
def test_the_schema_catches_mistakes(where: str, mutate: Any) -> None:
    doc = copy.deepcopy(_compose())
    mutate(doc)
    assert _errors(doc), f"{where} passed the schema"


def test_every_role_and_server_has_a_health_check_and_waits_for_its_dependencies() -> None:
    services = _compose()["services"]
    for name in (*ROLES, "kafka", "qdrant", "prometheus", "grafana"):
        check = services[name].get("healthcheck")
        assert check and check["test"], f"{name} has no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
    for role in ROLES:
        svc = services[role]
        assert svc["command"] == [role]
        assert svc["depends_on"] == {
            "kafka": {"condition": "service_healthy"},
            "qdrant": {"condition": "service_healthy"},
        }, role
        probe = " ".join(svc["healthcheck"]["test"])
        assert "/healthz" in probe, role
        assert svc["environment"]["EPISODIC_HTTP_PORT"] == "8080" and "127.0.0.1:8080" in probe, role
    assert services["grafana"]["depends_on"] == {"prometheus": {"condition": "service_healthy"}}


def test_prometheus_and_grafana_get_the_rules_and_the_dashboard() -> None:
    services = _compose()["services"]
    prom = services["prometheus"]["volumes"]
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in prom
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prom
    graf = services["grafana"]["volumes"]
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in graf
    mounted = next(v for v in graf if v.startswith("./grafana/episodic.json:"))
    dash_dir = mounted.split(":")[1].rsplit("/", 1)[0]
    prov = yaml.safe_load((INFRA / "grafana" / "provisioning" / "dashboards" / "episodic.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == dash_dir
    for src in (v.split(":")[0] for v in (*prom, *graf) if v.startswith("./")):
        assert (INFRA / src).exists(), f"the compose file mounts {src}, which is not in infra/"
