"""The operations files parse, and name only metrics (and labels) that episodic.kernel.metrics defines.

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

from episodic.kernel.metrics import Metrics

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
        if not METRIC_RE.search(expr):  # Prometheus's own `up` (a target, or every target of a role)
            assert re.search(r"\bup\{", expr), f"alert {name} names neither an episodic metric nor up"
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


# What an operator must find on the dashboard (issue 13): a pattern every one of these needs in some query.
REQUIRED_PANELS = {
    "ingest rate by decision": r"sum by \(decision\) \(rate\(episodic_gate_entries_total",
    "dead letters by reason": r"sum by \(reason\) \(rate\(episodic_dead_lettered_total",
    "embedding throughput": r"rate\(episodic_embed_batch_size_sum",
    "embedding batch size": r"histogram_quantile\(0\.99, sum by \(le\) \(rate\(episodic_embed_batch_size_bucket",
    "index lag p50": r"histogram_quantile\(0\.5, sum by \(le\) \(rate\(episodic_index_lag_seconds_bucket",
    "index lag p99": r"histogram_quantile\(0\.99, sum by \(le\) \(rate\(episodic_index_lag_seconds_bucket",
    "recall latency by mode": r"histogram_quantile\(0\.99, sum by \(le, mode\) \(rate\(episodic_recall_duration",
    "sparse-only state": r"max\(episodic_sparse_only",
    "maintenance agents' lag": r"sum by \(agent, le\) \(rate\(episodic_agent_lag_seconds_bucket",
    "consumer lag by group": r"max by \(group\) \(episodic_consumer_lag_records",
    "health score by workspace": r"by \(workspace_id\) \(episodic_memory_health_score",
    "health metrics by workspace": r"by \(workspace_id, metric\) \(episodic_memory_health_metric",
    "workspaces by health band": r"by \(band\) \(episodic_memory_health_workspaces",
    "health snapshots": r"episodic_health_snapshots_total",
    "nudges": r"episodic_nudges_total",
}


def test_the_dashboard_has_the_panels_operators_need() -> None:
    exprs = [e for _, e in _dashboard_exprs()]
    missing = [what for what, pattern in REQUIRED_PANELS.items() if not any(re.search(pattern, e) for e in exprs)]
    assert not missing, f"no panel for: {missing}"


def test_every_panel_has_a_unique_place_and_its_targets_unique_ref_ids() -> None:
    dash = _dashboard()
    cells: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for y in range(g["y"], g["y"] + g["h"]):
            for x in range(g["x"], g["x"] + g["w"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}", p["title"]


def _expand_braces(text: str) -> str:
    """`EPISODIC_RRF_{DENSE,SPARSE}_WEIGHT` -> `EPISODIC_RRF_DENSE_WEIGHT EPISODIC_RRF_SPARSE_WEIGHT`."""
    pattern = re.compile(r"([A-Z0-9_]*)\{([A-Z0-9_,]+)\}([A-Z0-9_]*)")
    while m := pattern.search(text):
        text = text[: m.start()] + " ".join(m[1] + x + m[3] for x in m[2].split(",")) + text[m.end() :]
    return text


DOCS = INFRA.parent / "docs"


def test_the_configuration_reference_names_every_setting() -> None:
    """docs/configuration.md and the page it points to for security (docs/security.md) name every setting,
    the client's included (the engine's Settings extends them)."""
    from episodic.kernel.settings import Settings

    config = (DOCS / "configuration.md").read_text()
    tables = config + (DOCS / "security.md").read_text()
    # the settings tables: Configuration, and Security settings (Kafka TLS and SASL, Qdrant)
    rows = "\n".join(line.split("|")[1] for line in tables.splitlines() if line.startswith("| `EPISODIC_"))
    named = set(re.findall(r"EPISODIC_[A-Z0-9_]+", _expand_braces(rows)))
    missing = sorted(f"EPISODIC_{f.upper()}" for f in Settings.model_fields if f"EPISODIC_{f.upper()}" not in named)
    assert not missing, f"settings without a row in a settings table of docs/: {missing}"
    assert "[Security settings](security.md)" in config
    assert _expand_braces("`EPISODIC_A_{B,C}_D`") == "`EPISODIC_A_B_D EPISODIC_A_C_D`"


def test_the_operations_reference_covers_running_it() -> None:
    ops = (DOCS / "operations.md").read_text()
    for heading in ("## Deployment", "## Sizing", "## Upgrade", "## Backup and restore of the store"):
        assert heading in ops, heading


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def test_the_readme_links_every_reference_page_and_every_link_resolves() -> None:
    """The README keeps what a newcomer reads first and links the reference in docs/: every page is linked
    from the README and from docs/README.md, and every relative link of both and of the pages leads to a
    file that exists."""
    readme = (INFRA.parent / "README.md").read_text()
    index = (DOCS / "README.md").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert len(pages) >= 10, pages
    for page in pages:
        assert f"](docs/{page}" in readme, f"README.md does not link docs/{page}"
        assert f"]({page})" in index, f"docs/README.md does not list {page}"
    for doc in [INFRA.parent / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in LINK.findall(doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"
    # the two commands stay where a newcomer starts
    first = readme[: readme.index("## Try it")]
    assert "make up" in first and "make test" in first
