"""SASL/SCRAM over TLS against a real Apache Kafka: the whole pipeline authenticates, and what should be refused is.

The broker listens SASL_SSL only (SCRAM-SHA-512 and -256; its users written into the metadata log when it is
formatted), with a certificate from a test CA (trustme). The stack's every Kafka client (the admin that makes
the topics, the producer behind POST /v1/journal, Faust's gate, the embedding consumer, the lag probes) gets
its options from `episodic.kernel.transport_security.kafka_options`, so one stack run end to end over it
proves them all; the compose file's SASL settings (infra/docker-compose.yml) are the same variables.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from cryptography.hazmat.primitives import serialization

from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from infra.broker import KafkaBroker, Security, free_port
from tests.e2e.conftest import poll, running_stack

pytestmark = pytest.mark.integration
PASSWORD = "correct horse battery staple"


class Secure:
    def __init__(self, broker: KafkaBroker, ca: Path) -> None:
        self.broker, self.ca = broker, ca

    def settings(self, tmp: Path, **over: Any) -> Settings:
        base: dict[str, Any] = {
            "kafka_bootstrap": self.broker.bootstrap,
            "kafka_security_protocol": "SASL_SSL",
            "kafka_sasl_mechanism": "SCRAM-SHA-512",
            "kafka_sasl_username": "episodic",
            "kafka_sasl_password": PASSWORD,
            "kafka_ssl_cafile": self.ca,
            "data_dir": tmp,
            "http_port": free_port(),
            "topic_partitions": 2,
            "embed_model": "none",
            "batch_max_wait_ms": 30,
        }
        base.update(over)
        return Settings(**base)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    d = tmp_path_factory.mktemp("sasl-ssl")
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    cert = ca.issue_cert("127.0.0.1", "localhost")
    # Kafka's PEM keystore wants the key as PKCS#8, then the chain
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem = d / "broker.pem"
    pem.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    broker = KafkaBroker(
        data_dir=d / "kafka", port=free_port(), security=Security(pem=pem, users={"episodic": PASSWORD})
    )
    broker.start()
    try:
        yield Secure(broker, d / "ca.pem")
    finally:
        broker.stop()


async def test_the_whole_pipeline_runs_over_sasl_scram_and_tls(secure: Secure, tmp_path: Path) -> None:
    settings = secure.settings(tmp_path)
    async with running_stack(settings) as stack, httpx.AsyncClient(base_url=stack_url(stack), timeout=30) as http:
        entry = {
                "id": "tls-1", "workspace_id": "sec", "agent_id": "a", "ts": "2026-11-21T10:00:00Z",
                "entry_type": "summary.generated", "severity": "info", "summary": "the vault rotated its keys",
            }  # fmt: skip
        r = await http.post("/v1/journal", json={"entries": [entry]})
        assert r.status_code == 202, r.text  # the producer's ack, over SASL_SSL

        async def recalled() -> bool:
            body = {"workspace_id": "sec", "agent_id": "a", "query": "vault keys", "mode": "sparse"}
            got = await http.post("/v1/recall", json=body)
            return got.status_code == 200 and [h["entry_id"] for h in got.json()["hits"]] == ["tls-1"]

        await poll(recalled, timeout=60, what="the entry through gate and consumer, over SASL_SSL")
        health = (await http.get("/healthz")).json()
        assert health["kafka"] == "ok" and health["journal"] == "durable"


def stack_url(stack: Any) -> str:
    return f"http://127.0.0.1:{stack.http_port}"


async def _produce(secure: Secure, **kw: Any) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=secure.broker.bootstrap, request_timeout_ms=8000, **kw)
    try:
        await producer.start()
        await producer.send_and_wait("sec-probe", b"x")
    finally:
        await producer.stop()


def _sasl(secure: Secure, tmp_path: Path, **over: Any) -> dict[str, Any]:
    return kafka_options(secure.settings(tmp_path, **over))


async def test_scram_sha_256_is_taken_too(secure: Secure, tmp_path: Path) -> None:
    await _produce(secure, **_sasl(secure, tmp_path, kafka_sasl_mechanism="SCRAM-SHA-256"))


@pytest.mark.parametrize(
    "case",
    ["wrong password", "unknown user", "plaintext", "tls without the sasl handshake", "an untrusted certificate"],
)
async def test_what_must_be_refused_is(secure: Secure, tmp_path: Path, case: str) -> None:
    if case == "wrong password":
        kw = _sasl(secure, tmp_path, kafka_sasl_password="hunter2")
    elif case == "unknown user":
        kw = _sasl(secure, tmp_path, kafka_sasl_username="mallory")
    elif case == "plaintext":
        kw = {"security_protocol": "PLAINTEXT"}
    elif case == "tls without the sasl handshake":
        kw = {"security_protocol": "SSL", "ssl_context": ssl.create_default_context(cafile=str(secure.ca))}
    else:  # the system's CAs do not know the test CA
        kw = {**_sasl(secure, tmp_path), "ssl_context": ssl.create_default_context()}
    with pytest.raises((KafkaError, OSError, ssl.SSLError)):
        await _produce(secure, **kw)
