"""Every surface refuses to open what it cannot protect (issue 29): the embedded broker binds loopback only,
`episodic mcp` beyond loopback needs a recall service that authenticates its callers, and the compose file's
Kafka authenticates every client with SASL. Real processes where the refusal is a process's (the CLI, the
launcher); the compose file is read as the YAML Docker reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.broker import BrokerError, free_port, open_broker, port_open

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPISODIC_")}
    env.update({"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")]), **extra})
    return env


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "broker.internal"])
@pytest.mark.parametrize("engine", ["kafka", "tansu"])
def test_the_embedded_broker_refuses_a_bind_beyond_loopback(host: str, engine: str, tmp_path: Path) -> None:
    def make(**kw: Any) -> object:
        return open_broker(engine=engine, data_dir=tmp_path, port=9092, **kw)  # type: ignore[arg-type]

    with pytest.raises(BrokerError, match="no authentication"):
        make(host=host)
    make(host=host, allow_remote=True)  # the explicit opt-in (not started)
    for loopback in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        make(host=loopback)


def test_the_launcher_process_refuses_too_and_listens_nowhere() -> None:
    port = free_port()
    run = subprocess.run(
        [sys.executable, "-m", "infra.broker", "--host", "0.0.0.0", "--port", str(port)],
        env=_env(), capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode != 0 and "refusing to run the embedded broker on '0.0.0.0'" in run.stderr
    assert not port_open("127.0.0.1", port)


def test_the_stack_refuses_a_non_loopback_broker_host_unless_told(tmp_path: Path) -> None:
    """`episodic up` with EPISODIC_BROKER_HOST beyond loopback stops before it starts anything."""
    run = subprocess.run(
        [sys.executable, "-m", "stack.cli", "up"],
        env=_env(EPISODIC_BROKER_HOST="0.0.0.0", EPISODIC_BROKER_PORT=str(free_port()), EPISODIC_EMBED_MODEL="none",
                 EPISODIC_DATA_DIR=str(tmp_path), EPISODIC_HTTP_PORT=str(free_port())),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode != 0
    assert "EPISODIC_BROKER_INSECURE" in run.stderr + run.stdout


def test_mcp_beyond_loopback_refuses_a_recall_service_it_cannot_check() -> None:
    port = free_port()
    run = subprocess.run(
        [sys.executable, "-m", "stack.cli", "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", str(port)],
        env=_env(EPISODIC_URL=f"http://127.0.0.1:{free_port()}", EPISODIC_CLIENT_RETRIES="0",
                 EPISODIC_WORKSPACE_ID="ws", EPISODIC_AGENT_ID="a"),
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "refusing to serve MCP on '0.0.0.0'" in run.stderr and "--insecure" in run.stderr
    assert not port_open("127.0.0.1", port)


def test_compose_kafka_authenticates_every_client() -> None:
    doc = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())
    kafka = doc["services"]["kafka"]["environment"]
    protocols = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    listeners = dict(item.split("://") for item in kafka["KAFKA_LISTENERS"].split(","))
    for name, address in listeners.items():
        if name == kafka["KAFKA_CONTROLLER_LISTENER_NAMES"]:
            assert address.startswith("localhost:"), "the controller listens on the container's loopback only"
        else:
            assert protocols[name].startswith("SASL_"), (name, protocols[name])
    assert kafka["KAFKA_INTER_BROKER_LISTENER_NAME"] != "CONTROLLER"
    for name in ("gate", "embedder", "serve", "linker", "importance", "health-agent", "nudge-agent"):
        env = doc["services"][name]["environment"]
        assert env["EPISODIC_KAFKA_SECURITY_PROTOCOL"].startswith("SASL_"), name
        assert "EPISODIC_KAFKA_SASL_PASSWORD" not in env, "the password comes from infra/secrets, not the file"
