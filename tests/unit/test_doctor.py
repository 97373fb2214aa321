"""`episodic doctor` over a mock service: the checks it derives from /healthz, /v1/memory/stats, /metrics."""

from __future__ import annotations

from typing import Any

import httpx

from episodic.settings import Settings
from stack.commands.doctor import check_service


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


def test_the_client_commands_read_url_and_token_from_settings(monkeypatch: Any) -> None:
    monkeypatch.setenv("EPISODIC_RECALL_URL", "http://recall.example:9000/")
    monkeypatch.setenv("EPISODIC_TOKEN", "s3cret")
    s = Settings()
    assert s.service_url == "http://recall.example:9000" and s.token is not None
    assert s.token.get_secret_value() == "s3cret" and "s3cret" not in repr(s)
    monkeypatch.delenv("EPISODIC_RECALL_URL")
    assert Settings(http_host="0.0.0.0", http_port=8181).service_url == "http://127.0.0.1:8181"
    assert Settings(http_host="::1", http_port=8181).service_url == "http://[::1]:8181"
