"""The operations files parse, and name only metrics (and labels) that episodic.metrics defines.

Names come from the registry of a fresh `Metrics()`, so a renamed metric breaks this test instead of
silently emptying a dashboard panel or disarming an alert.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml  # a dev dependency (pyproject): a missing one fails here instead of skipping silently
from prometheus_client import CollectorRegistry

from episodic.metrics import Metrics

INFRA = Path(__file__).resolve().parents[2] / "infra"
METRIC_RE = re.compile(r"\bepisodic_[a-z0-9_]+\b")
SELECTOR_RE = re.compile(r"(episodic_[a-z0-9_]+)\{([^}]*)\}")
BY_RE = re.compile(r"\bby\s*\(([^)]*)\)")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}
# Labels PromQL or Prometheus add on top of the ones a metric declares.
IMPLICIT_LABELS = {"le", "job", "instance", "role", "__name__"}


def _registry_names() -> dict[str, set[str]]:
    """Every series name the registry can expose -> the label names it carries."""
    metrics = Metrics(CollectorRegistry())
    labels_by_family: dict[str, set[str]] = {}
    for attr in vars(metrics).values():
        names = getattr(attr, "_labelnames", None)
        name = getattr(attr, "_name", None)
        if names is not None and name:
            labels_by_family[name] = set(names)
    out: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        labels = labels_by_family.get(family.name, set())
        for suffix in SUFFIXES[family.type]:
            out[family.name + suffix] = labels
        for sample in family.samples:
            out.setdefault(sample.name, labels)
    return out


def _alert_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load((INFRA / "alerts.yml").read_text())
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"] if "alert" in r]


def _dashboard() -> dict[str, Any]:
    return json.loads((INFRA / "grafana" / "episodic.json").read_text())


def _dashboard_exprs() -> list[tuple[str, str]]:
    out = []
    for p in _dashboard()["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def _check_expr(where: str, expr: str, known: dict[str, set[str]]) -> list[str]:
    problems = []
    used = set(METRIC_RE.findall(expr))
    if not used:
        problems.append(f"{where}: no episodic metric in {expr!r}")
    for name in used - known.keys():
        problems.append(f"{where}: unknown metric {name}")
    for name, body in SELECTOR_RE.findall(expr):
        for label in re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!=|!~|=)", body):
            if name in known and label not in known[name] | IMPLICIT_LABELS:
                problems.append(f"{where}: {name} has no label {label!r}")
    all_labels = set().union(*(known.get(n, set()) for n in used)) | IMPLICIT_LABELS
    for group in BY_RE.findall(expr):
        for label in (x.strip() for x in group.split(",") if x.strip()):
            if label not in all_labels:
                problems.append(f"{where}: grouping by {label!r}, which none of {sorted(used)} carries")
    return problems


def test_registry_lists_the_core_metrics() -> None:
    known = _registry_names()
    for name in (
        "episodic_gate_entries_total",
        "episodic_dead_lettered_total",
        "episodic_embed_batch_size_bucket",
        "episodic_produce_to_index_seconds_bucket",
        "episodic_consumer_lag_records",
        "episodic_recall_duration_seconds_bucket",
    ):
        assert name in known
    assert "decision" in known["episodic_gate_entries_total"]
    assert "episodic_not_a_metric_total" not in known


def test_alert_rules_parse_and_name_real_metrics() -> None:
    known = _registry_names()
    rules = _alert_exprs()
    names = {name for name, _ in rules}
    for wanted in (
        "EpisodicConsumerLagHigh",
        "EpisodicDeadLetterRate",
        "EpisodicSparseOnly",
        "EpisodicRecallLatencyP99High",
        "EpisodicIndexLagP99High",
        "EpisodicConsumerErrors",
        "EpisodicAuthFailuresSpike",
    ):
        assert wanted in names
    problems = []
    for name, expr in rules:
        if name == "EpisodicTargetDown":  # Prometheus's own `up`
            assert "up{" in expr
            continue
        problems += _check_expr(f"alert {name}", expr, known)
    assert not problems, "\n".join(problems)
    doc = yaml.safe_load((INFRA / "alerts.yml").read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("info", "warning", "critical")
            assert rule["annotations"]["summary"]


def test_dashboard_parses_and_names_real_metrics() -> None:
    known = _registry_names()
    dash = _dashboard()
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    exprs = _dashboard_exprs()
    problems = []
    for title, expr in exprs:
        problems += _check_expr(f"panel {title!r}", expr, known)
    assert not problems, "\n".join(problems)
    used = {m for _, e in exprs for m in METRIC_RE.findall(e)}
    # every metric family the pipeline defines is on the dashboard (upsert duration included)
    families = {n.removesuffix(s) for n in used for s in ("_bucket", "_sum", "_count", "_total") if n.endswith(s)}
    families |= used
    for family in Metrics(CollectorRegistry()).registry.collect():
        assert family.name in families or f"{family.name}_total" in used, f"{family.name} not on the dashboard"


def test_a_typo_is_caught() -> None:
    known = _registry_names()
    assert _check_expr("x", "rate(episodic_gate_entrie_total[5m])", known)
    assert _check_expr("x", 'rate(episodic_dead_lettered_total{reasn="x"}[5m])', known)
    assert _check_expr("x", "sum by (mode) (rate(episodic_dead_lettered_total[5m]))", known)
    assert not _check_expr("x", "sum by (reason) (rate(episodic_dead_lettered_total[5m]))", known)


def test_prometheus_config_loads_the_rules() -> None:
    doc = yaml.safe_load((INFRA / "prometheus.yml").read_text())
    assert "/etc/prometheus/alerts.yml" in doc["rule_files"]
    jobs = {j["job_name"] for j in doc["scrape_configs"]}
    assert {"episodic-serve", "episodic-gate", "episodic-embedder"} <= jobs
    for j in doc["scrape_configs"]:
        assert j["static_configs"][0]["targets"]


def test_compose_runs_each_role_against_kafka_and_qdrant() -> None:
    doc = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    services = doc["services"]
    assert {"kafka", "qdrant", "gate", "embedder", "serve", "prometheus", "grafana"} <= services.keys()
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft
    for role in ("gate", "embedder", "serve"):
        svc = services[role]
        assert svc["command"] == [role]
        env = svc["environment"]
        assert env["EPISODIC_KAFKA_BOOTSTRAP"] == "kafka:9092"
        assert env["EPISODIC_QDRANT_URL"].startswith("http://qdrant:")
    for svc in services.values():  # host ports on loopback only
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), port
    # the server must understand what the adapter sends: weighted RRF (1.17) and the IDF corpus (1.19)
    image = services["qdrant"]["image"]
    name, _, tag = image.partition(":")
    assert name == "qdrant/qdrant" and re.fullmatch(r"v\d+\.\d+\.\d+", tag), image
    assert tuple(int(x) for x in tag[1:].split(".")) >= (1, 19, 0), image
    prov = yaml.safe_load((INFRA / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert prov["datasources"][0]["uid"] == "prometheus"
