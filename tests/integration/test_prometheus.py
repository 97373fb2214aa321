"""A real Prometheus (Debian's `prometheus`) scrapes a running embedded stack, loads infra/alerts.yml, and
answers every query of the Grafana dashboard (infra/grafana/episodic.json) with data.

The stack gets a mixed journal with garbage in it (so dead letters exist), recalls in every mode (so
latencies by mode and memory.referenced exist), a decay run and a health snapshot of every workspace (the
health gauges); Prometheus scrapes it every second. Skips
with the reason where the binary is absent (fails instead under EPISODIC_REQUIRE_PROMETHEUS=1, as in CI).
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from infra.broker import free_port
from tests.e2e.conftest import poll, produce_lines, running_stack, stack_settings
from tests.e2e.journal import build
from tests.prom_tools import require_binary

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INFRA = Path(__file__).resolve().parents[2] / "infra"
WINDOW = "5m"  # stands in for Grafana's $__rate_interval: longer than the test, so every rate has samples
# Queries whose value must be a finite number above zero (not just a series): the pipeline did work.
MUST_BE_POSITIVE = (
    "sum(rate(episodic_gate_entries_total[5m]))",
    "sum(rate(episodic_dead_lettered_total[5m]))",
    "histogram_quantile(0.99, sum by (le) (rate(episodic_produce_to_index_seconds_bucket[5m])))",
    "histogram_quantile(0.99, sum by (le, mode) (rate(episodic_recall_duration_seconds_bucket[5m])))",
    "histogram_quantile(0.5, sum by (le) (rate(episodic_embed_batch_size_bucket[5m])))",
    "sum(rate(episodic_embed_batch_size_sum[5m]))",
    'histogram_quantile(0.99, sum by (agent, le) (rate(episodic_agent_lag_seconds_bucket{agent="linker"}[5m])))',
)


def _prometheus_binary() -> str:
    return require_binary("prometheus")


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of the dashboard, Grafana's variables filled in."""
    dash = json.loads((INFRA / "grafana" / "episodic.json").read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", WINDOW).replace('=~"$job"', '=~".*"')
            assert "$" not in expr, f"an unfilled Grafana variable in {panel['title']!r}: {expr}"
            out.append((panel["title"], expr))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":  # label_values(metric, label): the metric must be there
            metric = var["query"]["query"].removeprefix("label_values(").split(",")[0]
            out.append((f"variable {var['name']}", metric))
    return out


@asynccontextmanager
async def prometheus(tmp: Path, target_port: int) -> AsyncIterator[httpx.AsyncClient]:
    """Prometheus on a free loopback port, scraping the stack every second, with the project's rules."""
    binary = _prometheus_binary()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(INFRA / "alerts.yml")],
        "scrape_configs": [
            {
                "job_name": "episodic-up",
                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"], "labels": {"role": "all"}}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

            async def ready() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
                try:
                    return (await http.get("/-/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            await poll(ready, timeout=60, what="prometheus ready")
            yield http
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def query(http: httpx.AsyncClient, expr: str) -> list[dict[str, Any]]:
    r = await http.get("/api/v1/query", params={"query": expr})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return [{"metric": {}, "value": result}]
    return result


def _values(result: list[dict[str, Any]]) -> list[float]:
    return [float(s["value"][1]) for s in result]


async def test_prometheus_scrapes_the_stack_loads_the_rules_and_answers_every_dashboard_query(
    fresh_broker: str, tmp_path: Path
) -> None:
    broker = fresh_broker
    _prometheus_binary()
    exp = build(n_valid=120)
    settings = stack_settings(broker, tmp_path / "stack", visible_budget_ms=0)
    async with running_stack(settings) as stack, prometheus(tmp_path, stack.http_port) as prom:
        await poll(lambda: query(prom, 'up{job="episodic-up"} == 1'), timeout=60, what="prometheus scraping the stack")
        await produce_lines(broker, exp.lines)
        await poll(lambda: stack.store.count() >= len(exp.memories), timeout=180, what="memories indexed")
        base = f"http://127.0.0.1:{stack.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as svc:
            for i, mode in enumerate(("hybrid", "dense", "sparse") * 3):
                r = await svc.post(
                    "/v1/recall",
                    json={"workspace_id": "w-a", "agent_id": "planner", "query": f"checkout failed {i}", "mode": mode},
                )
                assert r.status_code == 200, r.text
                assert r.json()["hits"], r.text
            decay = await svc.post("/v1/admin/run/decay")
            assert decay.status_code == 200, decay.text
            health = await svc.post("/v1/admin/run/health")  # the health gauges come from snapshots
            assert health.status_code == 200, health.text
            workspaces = health.json()["workspaces"]
            assert workspaces == len({ws for ws, _ in exp.memories}), health.text

        # what the stack counted is what Prometheus has: the dead letters, by reason
        dlq = await poll(
            lambda: query(prom, f"sum(episodic_dead_lettered_total) >= {len(exp.dlq)}"),
            timeout=30,
            what="the dead letters scraped",
        )
        assert _values(dlq) == [float(len(exp.dlq))]
        # the linker and the importance agent have handled their events
        await poll(
            lambda: query(prom, 'sum by (agent) (episodic_agent_lag_seconds_count{agent=~"linker|importance"}) > 0'),
            timeout=60,
            what="both agents' lag observed",
        )
        await poll(lambda: query(prom, "episodic_decay_last_success_timestamp_seconds > 0"), timeout=30, what="decay")
        # the health gauges: a score for every workspace, the bands counting them all, the metrics by workspace
        await poll(
            lambda: query(prom, f"count(episodic_memory_health_score) == {workspaces}"), timeout=30, what="scores"
        )
        bands = _values(await query(prom, "sum(episodic_memory_health_workspaces)"))
        assert bands == [float(workspaces)]
        scores = _values(await query(prom, "episodic_memory_health_score"))
        assert all(0 <= v <= 100 for v in scores), scores
        by_metric = await query(prom, "count by (metric) (episodic_memory_health_metric)")
        assert {s["metric"]["metric"] for s in by_metric} >= {"freshness", "coverage"}, by_metric

        # the recalls scraped (a 1 s scrape can time out while the loop embeds: wait for one that saw them)
        await poll(lambda: query(prom, "min(episodic_recall_duration_seconds_count) >= 3"), timeout=30, what="recalls")

        async def positive(expr: str) -> list[float]:
            values = _values(await query(prom, expr))
            return values if values and all(math.isfinite(v) and v > 0 for v in values) else []

        for expr in MUST_BE_POSITIVE:
            await poll(lambda e=expr: positive(e), timeout=30, what=f"a finite value above 0 for {expr}")

        empty = []
        for title, expr in dashboard_queries():
            if not await query(prom, expr):
                empty.append(f"{title}: {expr}")
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)

        # every rule is loaded and evaluates without error; nothing fires against a healthy stack
        doc = yaml.safe_load((INFRA / "alerts.yml").read_text())
        want = {r["alert"] for g in doc["groups"] for r in g["rules"]}
        rules = (await prom.get("/api/v1/rules")).json()["data"]["groups"]
        loaded = {r["name"]: r for g in rules for r in g["rules"]}
        assert set(loaded) == want
        bad = {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"}
        assert not bad, bad
        alerts = (await prom.get("/api/v1/alerts")).json()["data"]["alerts"]
        roles_down = [a for a in alerts if a["labels"]["alertname"].endswith("Down")]
        assert not roles_down, roles_down
