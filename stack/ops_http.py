"""`/metrics` and `/healthz` for a process without the recall service (`episodic run gate`, `embedder`, ...).

Every role process answers the same two paths on EPISODIC_HTTP_HOST:EPISODIC_HTTP_PORT, the recall
service through its FastAPI routes and every other role through this small server: `/metrics` is the
Prometheus exposition of the process's registry, `/healthz` a JSON body from the Stack's `health()`, 200
while it is "ok" and 503 otherwise (a crashed role, Kafka unreachable, the store down), so that a
container orchestrator's probe and Prometheus see each role on its own.

A WSGI app under wsgiref in a daemon thread, written here because prometheus_client's own server serves
the exposition on every path and takes no second route; the Stack stops it on drain.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger("episodic")

Health = Callable[[], dict[str, Any]]  # {"status": "ok" | "degraded", ...}


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds: no access log."""


def ops_app(registry: CollectorRegistry, health: Health) -> Callable[..., Iterable[bytes]]:
    """The WSGI app: /healthz (JSON, 200 or 503), /metrics (Prometheus), 404 elsewhere."""
    metrics_app = make_wsgi_app(registry)

    def app(request: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = request.get("PATH_INFO", "/")  # the WSGI request dict (not the process environment)
        if path == "/metrics":
            return metrics_app(request, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            try:
                body = health()
            except Exception as e:  # the probe says what failed instead of a 500 without a body
                body = {"status": "degraded", "error": f"{type(e).__name__}: {e}"}
            code = "200 OK" if body.get("status") == "ok" else "503 Service Unavailable"
            data = json.dumps(body, default=str).encode()
            start_response(code, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
            return [data]
        data = b'{"error": "not found: this role serves /healthz and /metrics"}'
        start_response("404 Not Found", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return app


class OpsServer:
    """The /metrics + /healthz server in a daemon thread; `port` is the one bound (0 picks a free one)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, health: Health) -> None:
        self._server = make_server(
            host, port, ops_app(registry, health), server_class=_ThreadingServer, handler_class=_Quiet
        )
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="ops-http", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
