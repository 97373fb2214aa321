"""Kafka TLS / SASL and Qdrant API key / TLS: the settings, the one place that builds the client options
(`episodic.kernel.transport_security`), that every client the project opens gets them, and that no secret is printed.

Tansu 0.6 (the embedded broker) cannot serve these (see docs/security.md), so these tests look
at the clients' configuration: real aiokafka, Faust, confluent-kafka and qdrant-client objects built from
the options, and recorders in place of the client classes at each call site of the project.
"""

from __future__ import annotations

import datetime as dt
import logging
import ssl
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import (
    MASK,
    TransportConfigError,
    confluent_config,
    kafka_options,
    kafka_ssl_context,
    qdrant_options,
)
from episodic_client.models import WhoAmI

PASSWORD = "kafka-pw-7f3a9c-do-not-print"
KEY_PASSWORD = "key-pw-51be-do-not-print"
API_KEY = "qdrant-key-c0ffee-do-not-print"
SECRETS = (PASSWORD, KEY_PASSWORD, API_KEY)


class Recorded(Exception):
    """Raised by a recorder in place of a client class once it has the keywords."""


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        raise Recorded(str(len(self.calls)))


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, encrypted with KEY_PASSWORD."""
    d = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "episodic-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
        )
    )
    return {"ca": d / "cert.pem", "cert": d / "cert.pem", "key": d / "key.pem"}


def sasl(mechanism: str = "SCRAM-SHA-512", protocol: str = "SASL_PLAINTEXT", **over: Any) -> Settings:
    over.setdefault("kafka_bootstrap", "kafka.example:9093")
    return Settings(
        kafka_security_protocol=protocol,
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username="episodic",
        kafka_sasl_password=PASSWORD,
        **over,
    )


def sasl_ssl(tls_files: dict[str, Path], key_password: str = KEY_PASSWORD, **over: Any) -> Settings:
    return sasl(
        protocol="SASL_SSL",
        kafka_ssl_cafile=tls_files["ca"],
        kafka_ssl_certfile=tls_files["cert"],
        kafka_ssl_keyfile=tls_files["key"],
        kafka_ssl_key_password=key_password,
        **over,
    )


def assert_sasl(kw: dict[str, Any], mechanism: str = "SCRAM-SHA-512") -> None:
    assert kw["security_protocol"] == "SASL_PLAINTEXT"
    assert kw["sasl_mechanism"] == mechanism
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("episodic", PASSWORD)


# -- the settings -------------------------------------------------------------------------------------


def test_plaintext_is_the_default_and_adds_nothing() -> None:
    s = Settings()
    assert kafka_options(s) == {"security_protocol": "PLAINTEXT"}
    assert kafka_ssl_context(s) is None and qdrant_options(s) == {}


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"kafka_security_protocol": "SASL_SSL"}, "needs EPISODIC_KAFKA_SASL_MECHANISM, EPISODIC_KAFKA_SASL_USERNAME"),
        (
            {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_mechanism": "PLAIN", "kafka_sasl_username": "u"},
            "needs EPISODIC_KAFKA_SASL_PASSWORD",
        ),
        ({"kafka_sasl_username": "u"}, "EPISODIC_KAFKA_SASL_USERNAME set, but EPISODIC_KAFKA_SECURITY_PROTOCOL="),
        ({"kafka_ssl_cafile": "/x.pem"}, "EPISODIC_KAFKA_SSL_CAFILE set, but .* does not use TLS"),
        ({"kafka_security_protocol": "SSL", "kafka_ssl_keyfile": "/k.pem"}, "KEYFILE set without .*CERTFILE"),
        ({"kafka_sasl_mechanism": "GSSAPI"}, "kafka_sasl_mechanism"),
        ({"kafka_security_protocol": "TLS"}, "kafka_security_protocol"),
        ({"qdrant_url": "http://q:6333", "qdrant_ca_file": "/ca.pem"}, "not an https:// URL"),
    ],
)
def test_bad_transport_settings_are_refused_naming_the_setting(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**over)


def test_a_missing_tls_file_names_its_setting(tmp_path: Path) -> None:
    s = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=tmp_path / "nope.pem")
    with pytest.raises(TransportConfigError, match="EPISODIC_KAFKA_SSL_CAFILE: no such file"):
        kafka_options(s)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_options_for_each_mechanism(mechanism: str) -> None:
    opts = kafka_options(sasl(mechanism))
    assert_sasl(opts, mechanism)
    assert "ssl_context" not in opts


def test_sasl_ssl_carries_a_verifying_context_with_the_client_certificate(tls_files: dict[str, Path]) -> None:
    opts = kafka_options(sasl_ssl(tls_files))
    ctx = opts["ssl_context"]
    assert opts["security_protocol"] == "SASL_SSL" and isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert any(c["subject"] == ((("commonName", "episodic-test"),),) for c in ctx.get_ca_certs())
    off = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=tls_files["ca"], kafka_ssl_check_hostname=False)
    assert kafka_options(off)["ssl_context"].check_hostname is False
    wrong = sasl_ssl(tls_files, key_password="wrong")
    with pytest.raises(TransportConfigError, match="cannot build the TLS context"):
        kafka_options(wrong)


# -- secrets are never printed ------------------------------------------------------------------------


def test_secrets_stay_out_of_reprs_dumps_and_validation_errors(
    tls_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = sasl_ssl(tls_files, qdrant_url="https://q:6333", qdrant_api_key=API_KEY)
    from streams.app import broker_credentials

    shown = [repr(s), str(s), s.model_dump_json(), repr(kafka_options(s)), str(kafka_options(s))]
    shown += [repr(confluent_config(s)), repr(qdrant_options(s)), repr(broker_credentials(s))]
    for text in shown:
        assert not any(secret in text for secret in SECRETS), text
    assert MASK in repr(kafka_options(s)) and MASK in repr(qdrant_options(s))
    # a refused setting: pydantic would print every input, passwords included, without hide_input_in_errors
    with pytest.raises(ValidationError) as e:
        Settings(kafka_sasl_password=PASSWORD, qdrant_api_key=API_KEY)
    assert PASSWORD not in str(e.value) and "EPISODIC_KAFKA_SASL_PASSWORD set" in str(e.value)
    monkeypatch.setenv("EPISODIC_KAFKA_SASL_PASSWORD", PASSWORD)
    with pytest.raises(ValidationError) as e:
        Settings()
    assert PASSWORD not in str(e.value)


async def test_a_stack_that_cannot_connect_logs_no_secret(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infra.broker import free_port
    from stack.runtime import run_stack

    s = sasl(kafka_bootstrap=f"127.0.0.1:{free_port()}", data_dir=tmp_path, http_port=0)
    with caplog.at_level(logging.DEBUG):
        assert await run_stack(s, ("gate",)) == 2
    out = capsys.readouterr()
    assert "cannot start" in caplog.text
    assert not any(secret in text for secret in SECRETS for text in (caplog.text, out.out, out.err))


# -- every client gets them ---------------------------------------------------------------------------


async def test_real_aiokafka_clients_take_the_options(tls_files: dict[str, Path]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    from episodic.bus.kafka import make_producer

    s = sasl_ssl(tls_files)
    opts = kafka_options(s)
    clients = [
        make_producer(s.bootstrap, **opts).client,
        AIOKafkaConsumer(bootstrap_servers=s.bootstrap, **opts)._client,
        AIOKafkaAdminClient(bootstrap_servers=s.bootstrap, **opts)._client,
    ]
    for c in clients:
        assert (c._security_protocol, c._sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
        assert (c._sasl_plain_username, c._sasl_plain_password) == ("episodic", PASSWORD)
        assert c._ssl_context is opts["ssl_context"]


def test_faust_gets_the_same_credentials(tls_files: dict[str, Path]) -> None:
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    from streams.app import create_app

    for s, protocol in ((sasl(), "SASL_PLAINTEXT"), (sasl_ssl(tls_files), "SASL_SSL")):
        app = create_app(s, app_id="t")
        # what Faust's consumer, producer and admin client are built with
        auth = dict(credentials_to_aiokafka_auth(app.conf.broker_credentials, app.conf.ssl_context))
        assert auth["security_protocol"] == protocol and auth["sasl_mechanism"] == "SCRAM-SHA-512"
        assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("episodic", PASSWORD)
        assert (auth["ssl_context"] is None) == (protocol == "SASL_PLAINTEXT")
    tls = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=tls_files["ca"])
    auth = dict(credentials_to_aiokafka_auth(create_app(tls, app_id="t").conf.broker_credentials, None))
    assert auth["security_protocol"] == "SSL" and isinstance(auth["ssl_context"], ssl.SSLContext)
    assert create_app(Settings(), app_id="t").conf.broker_credentials is None


async def test_the_gate_and_the_agents_create_their_topics_with_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import streams.agents
    import streams.runner
    from streams.agents import batch_runner
    from streams.runner import GateRunner

    s = sasl()
    for module, start in (
        (streams.runner, GateRunner(s).start),
        (streams.agents, batch_runner(s, name="a", topic="t", decode=bytes, handle=print, metrics=Metrics()).start),
    ):
        rec = Recorder()
        monkeypatch.setattr(module, "ensure_topics", rec)
        with pytest.raises(Recorded):
            await start()
        assert_sasl(rec.calls[0]["options"])


async def test_the_stack_producer_and_admin_get_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import stack.runtime
    from stack.runtime import Stack

    topics: list[dict[str, Any]] = []

    async def ensure(bootstrap: str, **kw: Any) -> list[str]:
        topics.append(kw)
        return []

    rec = Recorder()
    monkeypatch.setattr(stack.runtime, "ensure_topics", ensure)
    monkeypatch.setattr(stack.runtime, "start_producer", rec)
    with pytest.raises(Recorded):
        await Stack(sasl(), roles=("gate",))._connect_kafka()  # also the recall service's publisher's connect
    assert_sasl(topics[0]["options"])
    assert_sasl(rec.calls[0])


async def test_the_embedding_consumer_and_the_lag_probe_get_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import consumers.embedding
    from consumers.embedding import EmbeddingConsumer

    rec = Recorder()
    monkeypatch.setattr(consumers.embedding, "AIOKafkaConsumer", rec)
    consumer = EmbeddingConsumer(settings=sasl(), indexer=MagicMock(), producer=MagicMock(), metrics=Metrics())
    with pytest.raises(Recorded):
        await consumer.run()
    assert_sasl(rec.calls[0])
    assert_sasl(consumer.lag.options)  # the separate lag consumer (episodic.bus.kafka.LagProbe)


def test_produce_doctor_and_the_mcp_writer_get_the_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import episodic.bus.kafka
    import episodic.bus.producer
    from stack.commands.doctor import check_broker
    from stack.commands.produce import main as produce_main

    for key, value in {
        "EPISODIC_KAFKA_BOOTSTRAP": "kafka.example:9093",
        "EPISODIC_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "EPISODIC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "EPISODIC_KAFKA_SASL_USERNAME": "episodic",
        "EPISODIC_KAFKA_SASL_PASSWORD": PASSWORD,
    }.items():
        monkeypatch.setenv(key, value)
    journal = tmp_path / "j.jsonl"
    journal.write_text('{"id": "x"}\n')
    rec = Recorder()
    monkeypatch.setattr(episodic.bus.producer, "start_producer", rec)
    assert produce_main([str(journal), "--quiet"]) == 1  # `episodic produce`
    assert_sasl(rec.calls[0])
    assert PASSWORD not in capsys.readouterr().err

    listed = Recorder()
    monkeypatch.setattr(episodic.bus.kafka, "list_topics", listed)
    assert check_broker(Settings())[0].level == "FAIL"  # `episodic doctor`
    assert_sasl(listed.calls[0]["options"])


async def test_the_mcp_kafka_writer_gets_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import stack.mcp_writers
    from stack.mcp_writers import KafkaWriter

    rec = Recorder()
    monkeypatch.setattr(stack.mcp_writers, "start_producer", rec)
    entry = {
        "id": "e1", "workspace_id": "ws", "agent_id": "a", "ts": "2026-11-21T10:00:00Z",
        "entry_type": "summary.generated", "severity": "info", "summary": "s", "payload": {},
    }  # fmt: skip
    # the caller's token, as the service describes it (the writer checks the entry against it first)
    who = WhoAmI(name="t", auth=True, admin=False, workspaces=["ws"], agent_id=None, crew_id=None, role=None,
                 scope=None)  # fmt: skip
    client = MagicMock(whoami=AsyncMock(return_value=who))
    with pytest.raises(Exception, match="did not acknowledge"):
        await KafkaWriter("kafka.example:9093", kafka_options(sasl())).write(client, entry)
    assert_sasl(rec.calls[0])


def test_confluent_kafka_accepts_the_librdkafka_config(tls_files: dict[str, Path]) -> None:
    from confluent_kafka import Producer

    conf = confluent_config(sasl_ssl(tls_files))
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert (conf["sasl.username"], conf["sasl.password"]) == ("episodic", PASSWORD)
    assert conf["ssl.ca.location"] == str(tls_files["ca"]) and conf["ssl.key.password"] == KEY_PASSWORD
    Producer(dict(conf)).flush(0)  # librdkafka validates every key and loads the certificate and key here


def test_qdrant_client_gets_the_api_key_and_the_ca(tls_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import episodic.store.qdrant_server
    from episodic.kernel.errors import StoreUnavailable
    from episodic.store.qdrant_server import QdrantServerStore
    from stack.stores import open_store

    s = Settings(qdrant_url="https://qdrant.example:6333", qdrant_api_key=API_KEY, qdrant_ca_file=tls_files["ca"])
    store = QdrantServerStore(s.qdrant_url, options=qdrant_options(s))  # a real client: no IO until a call
    try:
        remote = store.client._client
        assert remote._rest_headers["api-key"] == API_KEY and remote._https
        assert isinstance(remote._rest_args["verify"], ssl.SSLContext)
    finally:
        store.close()
    rec = Recorder()
    monkeypatch.setattr(episodic.store.qdrant_server, "QdrantClient", rec)
    with pytest.raises(StoreUnavailable):
        open_store(s, dim=384)  # what every role opens
    assert rec.calls[0]["api_key"] == API_KEY and isinstance(rec.calls[0]["verify"], ssl.SSLContext)


async def test_the_dead_letter_tools_read_and_replay_with_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import aiokafka

    import episodic.bus.kafka
    from episodic.lifecycle.dlq import Selector, letters, replay

    opts = kafka_options(sasl())
    rec = Recorder()
    monkeypatch.setattr(aiokafka, "AIOKafkaConsumer", rec)  # episodic.bus.offsets imports it where it reads
    with pytest.raises(Recorded):
        await anext(letters("kafka.example:9093", options=opts))
    assert_sasl(rec.calls[0])
    rec = Recorder()
    monkeypatch.setattr(episodic.bus.kafka, "AIOKafkaProducer", rec)
    with pytest.raises(Recorded):
        await replay("kafka.example:9093", Selector(), options=opts)
    assert_sasl(rec.calls[0])


def test_the_dlq_command_passes_the_settings_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import aiokafka

    from stack.commands.dlq import ls_main

    monkeypatch.setenv("EPISODIC_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("EPISODIC_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("EPISODIC_KAFKA_SASL_USERNAME", "episodic")
    monkeypatch.setenv("EPISODIC_KAFKA_SASL_PASSWORD", PASSWORD)
    monkeypatch.setenv("EPISODIC_KAFKA_BOOTSTRAP", "kafka.example:9093")
    rec = Recorder()
    monkeypatch.setattr(aiokafka, "AIOKafkaConsumer", rec)
    with pytest.raises(Recorded):
        ls_main([])
    assert_sasl(rec.calls[0])
