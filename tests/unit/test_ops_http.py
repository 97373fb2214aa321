"""`/metrics` and `/healthz` of a role process without the recall service (`stack.ops_http`)."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter

from stack.ops_http import OpsServer


def test_healthz_follows_the_health_callable_and_metrics_the_registry() -> None:
    registry = CollectorRegistry()
    Counter("episodic_probe_total", "a probe", registry=registry).inc(3)
    state: dict[str, Any] = {"status": "ok", "roles": {"gate": "ok"}}

    def health() -> dict[str, Any]:
        if state.get("boom"):
            raise RuntimeError("store handle gone")
        return dict(state)

    server = OpsServer("127.0.0.1", 0, registry, health)
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert server.port > 0
        r = httpx.get(f"{base}/healthz", timeout=5)
        assert r.status_code == 200 and r.json() == {"status": "ok", "roles": {"gate": "ok"}}
        assert "episodic_probe_total 3.0" in httpx.get(f"{base}/metrics", timeout=5).text
        state.update(status="degraded", roles={"gate": "crashed: boom"})
        r = httpx.get(f"{base}/healthz", timeout=5)
        assert r.status_code == 503 and r.json()["roles"] == {"gate": "crashed: boom"}
        state["boom"] = True
        r = httpx.get(f"{base}/healthz", timeout=5)
        assert r.status_code == 503 and r.json() == {"status": "degraded", "error": "RuntimeError: store handle gone"}
        assert httpx.get(f"{base}/other", timeout=5).status_code == 404
    finally:
        server.shutdown()
    try:
        httpx.get(f"{base}/healthz", timeout=2)
        raise AssertionError("still answering after shutdown")
    except httpx.ConnectError:
        pass
