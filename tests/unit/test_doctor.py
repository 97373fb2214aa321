"""`episodic doctor` over a mock service: the checks it derives from /healthz, /v1/memory/stats, /metrics."""

from __future__ import annotations

from typing import Any

import httpx

from episodic.kernel.settings import Settings
from stack.commands.checks import LAG_WARN_RECORDS
from stack.commands.doctor import check_exposure, check_service
from stack.commands.doctor_roles import (
    ROLE_INPUTS,
    check_decay,
    check_health,
    check_qdrant_server,
    check_role,
    check_roles,
)


def service(stats: dict[str, Any], metrics: str = "") -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/healthz":
            return httpx.Response(200, json={"status": "ok", "episodic": "vector", "kafka": "ok", "qdrant": "ok"})
        if request.url.path == "/v1/memory/stats":
            return httpx.Response(200, json=stats)
        return httpx.Response(200, text=metrics)

    return httpx.MockTransport(handle)


def by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_quarantined_memories_are_a_warning_with_the_fix() -> None:
    stats = {"indexed": 10, "dense": 7, "sparse_only": 3, "quarantined": 2}
    checks = by_name(check_service(Settings(), "http://svc", None, transport=service(stats)))
    assert checks["store"].level == "OK" and "3 sparse-only" in checks["store"].message
    q = checks["backfill"]
    assert q.level == "WARN" and q.message.startswith("2 memories in all workspaces are quarantined")
    assert "EPISODIC_DENSIFY_MAX_ATTEMPTS" in (q.fix or "")
    clean = by_name(check_service(Settings(), "http://svc", None, transport=service({**stats, "quarantined": 0})))
    assert clean["backfill"].level == "OK"


def test_lag_above_the_threshold_is_a_warning() -> None:
    stats = {"indexed": 1, "dense": 1, "sparse_only": 0, "quarantined": 0}
    text = 'episodic_consumer_lag_records{group="episodic-embedder"} 5000.0\n'
    lag = by_name(check_service(Settings(), "http://svc", None, transport=service(stats, text)))["lag"]
    assert lag.level == "WARN" and "episodic-embedder=5000" in lag.message


def test_a_reembed_in_progress_is_shown_with_its_progress() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from episodic.kernel.metrics import Metrics

    stats = {"indexed": 1, "dense": 1, "sparse_only": 0, "quarantined": 0}
    m = Metrics(CollectorRegistry())
    m.observe_generations({"active": {"model": "all-MiniLM-L6-v2", "vector": "dense", "dim": 384}, "pending": None})
    steady = by_name(
        check_service(Settings(), "http://svc", None, transport=service(stats, generate_latest(m.registry).decode()))
    )
    steady_message = steady["embedding"].message
    assert steady["embedding"].level == "OK" and "all-MiniLM-L6-v2, pieces window (vector dense)" in steady_message
    m.observe_generations(
        {
            "active": {"model": "all-MiniLM-L6-v2", "vector": "dense", "dim": 384},
            "pending": {"model": "/models/new", "vector": "dense_1", "dim": 256, "pieces": "sentences:32:254:32"},
        }
    )
    m.reembed_ratio.set(0.25)
    m.reembed_remaining.set(300)
    text = generate_latest(m.registry).decode()
    moving = by_name(check_service(Settings(), "http://svc", None, transport=service(stats, text)))["embedding"]
    assert (
        moving.level == "WARN"
        and "re-embedding to /models/new, pieces sentences:32:254:32: 25% done, 300 memories to go" in moving.message
    )
    old = by_name(check_service(Settings(), "http://svc", None, transport=service(stats)))["embedding"]
    assert old.level == "OK" and "no embedding generation reported" in old.message


def test_the_client_commands_read_url_and_token_from_settings(monkeypatch: Any) -> None:
    monkeypatch.setenv("EPISODIC_RECALL_URL", "http://recall.example:9000/")
    monkeypatch.setenv("EPISODIC_TOKEN", "s3cret")
    s = Settings()
    assert s.service_url == "http://recall.example:9000" and s.token is not None
    assert s.token.get_secret_value() == "s3cret" and "s3cret" not in repr(s)
    monkeypatch.delenv("EPISODIC_RECALL_URL")
    assert Settings(http_host="0.0.0.0", http_port=8181).service_url == "http://127.0.0.1:8181"
    assert Settings(http_host="::1", http_port=8181).service_url == "http://[::1]:8181"


def test_a_role_that_never_committed_while_its_topic_has_records_is_not_running() -> None:
    spec = next(r for r in ROLE_INPUTS if r.role == "linker")
    c = check_role(spec, "episodic-linker", (42, False))
    assert c.level == "WARN" and "no linker is running" in c.message and "42 records" in c.message
    assert "episodic linker" in (c.fix or "") and "EPISODIC_LINKER_ENABLED" in (c.fix or "")


def test_a_role_behind_gets_the_scaling_fix_and_one_that_keeps_up_is_ok() -> None:
    spec = next(r for r in ROLE_INPUTS if r.role == "embedder")
    behind = check_role(spec, "episodic-embedder", (LAG_WARN_RECORDS + 1, True))
    assert behind.level == "WARN" and "EPISODIC_EMBED_DEVICE=cuda" in (behind.fix or "")
    assert check_role(spec, "episodic-embedder", (3, True)).level == "OK"
    assert check_role(spec, "episodic-embedder", (0, False)).level == "OK"  # an empty topic: nothing to say
    unknown = check_role(spec, "episodic-embedder", (None, True))
    assert unknown.level == "WARN" and unknown.fix


def test_check_roles_covers_every_consuming_role_and_survives_a_failing_probe() -> None:
    seen: list[tuple[str, str]] = []

    async def measure(settings: Settings, group: str, topic: str) -> tuple[int | None, bool]:
        seen.append((group, topic))
        if group.endswith("importance"):
            raise RuntimeError("offset fetch refused")
        return 0, True

    checks = by_name(check_roles(Settings(consumer_group_prefix="p"), measure))
    assert {g for g, _ in seen} == {f"p-{r.role}" for r in ROLE_INPUTS}
    assert {r.role for r in ROLE_INPUTS} == {"gate", "embedder", "linker", "importance", "health", "nudge"}
    assert checks["role-gate"].level == "OK"
    bad = checks["role-importance"]
    assert bad.level == "WARN" and "offset fetch refused" in bad.message and "episodic importance" in (bad.fix or "")


def test_every_warning_and_failure_of_the_role_checks_has_a_fix() -> None:
    for spec in ROLE_INPUTS:
        for state in ((None, False), (5, False), (LAG_WARN_RECORDS * 2, True)):
            c = check_role(spec, "g", state)
            assert c.level == "WARN" and c.fix, (spec.role, state)


def test_the_qdrant_server_check() -> None:
    def server(status: int) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            assert request.url.path == "/readyz"
            assert request.headers.get("api-key") == "k3y"
            return httpx.Response(status, text="")

        return httpx.MockTransport(handle)

    s = Settings(qdrant_url="http://qdrant:6333/", qdrant_api_key="k3y")
    assert check_qdrant_server(Settings()) is None  # embedded store: checked through the service
    ok = check_qdrant_server(s, transport=server(200))
    assert ok is not None and ok.level == "OK"
    for status in (401, 503):
        c = check_qdrant_server(s, transport=server(status))
        assert c is not None and c.level == "FAIL" and "EPISODIC_QDRANT_URL" in (c.fix or "")


def test_a_failed_decay_run_is_a_warning_with_the_fix() -> None:
    stats = {"indexed": 1, "dense": 1, "sparse_only": 0, "quarantined": 0}
    text = 'episodic_decay_runs_total{outcome="failed"} 2.0\nepisodic_decay_last_success_timestamp_seconds 0.0\n'
    decay = by_name(check_service(Settings(), "http://svc", None, transport=service(stats, text)))["decay"]
    assert (
        decay.level == "WARN" and "2 DecayAndReinforce" in decay.message and "/v1/admin/run/decay" in (decay.fix or "")
    )
    ok = check_decay({"episodic_decay_last_success_timestamp_seconds": 1000.0}, 1000.0 + 7200, "30 3 * * *")
    assert ok.level == "OK" and "2.0 h ago" in ok.message


def test_a_workspace_in_the_red_health_band_is_a_warning_with_the_fix() -> None:
    stats = {"indexed": 1, "dense": 1, "sparse_only": 0, "quarantined": 0}
    text = "".join(
        f'episodic_memory_health_workspaces{{band="{b}"}} {n}.0\n' for b, n in (("red", 2), ("yellow", 1), ("green", 4))
    )
    health = by_name(check_service(Settings(), "http://svc", None, transport=service(stats, text)))["health"]
    assert health.level == "WARN" and health.message.startswith("2 workspace(s) in the red")
    assert "episodic health --workspace" in (health.fix or "")
    fine = check_health({'episodic_memory_health_workspaces{band="green"}': 3.0})
    assert fine.level == "OK" and "3 green" in fine.message


def test_exposure_names_what_the_configuration_opens_with_the_fix(tmp_path: Any) -> None:
    """SECURITY.md's surfaces as doctor sees them (issue 29)."""
    tokens = tmp_path / "tokens.json"
    assert [c.level for c in check_exposure(Settings())] == ["OK"]  # embedded broker on loopback, open on loopback
    refused = check_exposure(Settings(broker_host="0.0.0.0"))
    assert refused[0].name == "broker-exposure" and refused[0].level == "FAIL" and "refuse" in refused[0].message
    assert check_exposure(Settings(broker_host="0.0.0.0", broker_insecure=True))[0].level == "WARN"
    kafka = check_exposure(Settings(kafka_bootstrap="kafka:9092"))
    assert kafka[0].name == "kafka-auth" and kafka[0].level == "WARN" and "SASL" in kafka[0].fix
    sasl = Settings(kafka_bootstrap="kafka:9092", kafka_security_protocol="SASL_SSL",
                    kafka_sasl_mechanism="SCRAM-SHA-512", kafka_sasl_username="episodic",
                    kafka_sasl_password="a-secret-password")  # fmt: skip
    assert [c.level for c in check_exposure(sasl)] == ["OK"]
    metrics = check_exposure(Settings(tokens_file=tokens, http_host="0.0.0.0"))
    assert [c.name for c in metrics] == ["metrics-exposure"] and "EPISODIC_METRICS_ADMIN_ONLY" in metrics[0].fix
    assert check_exposure(Settings(tokens_file=tokens, http_host="0.0.0.0", metrics_admin_only=True))[0].level == "OK"
