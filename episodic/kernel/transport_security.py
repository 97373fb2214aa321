"""Transport security for every client the project opens, built in one place from the settings.

Kafka: EPISODIC_KAFKA_SECURITY_PROTOCOL (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the SASL mechanism
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with its username and password, and the TLS files (CA bundle, client
certificate and key for mutual TLS). `kafka_options` is what every aiokafka producer, consumer and admin
client gets (`episodic.bus.kafka.make_producer`, `ensure_topics`, `list_topics`, the lag probe, the embedding
consumer, `episodic produce`, the MCP writer, the recall service's publisher); `streams.app` turns the same
options into Faust's `broker_credentials`, and `confluent_config` gives librdkafka's keys for a confluent-kafka
client (the journal producers of users who prefer it).

Qdrant: EPISODIC_QDRANT_API_KEY and TLS (an https:// EPISODIC_QDRANT_URL; EPISODIC_QDRANT_CA_FILE for a
private CA) become `qdrant_options`, the keyword arguments of qdrant-client.

Secrets stay `SecretStr` in the settings and are unwrapped only here, into `ClientOptions`: a dict whose
repr masks them, so that logging a client's options never prints a password.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from episodic.kernel.errors import EpisodicError
from episodic.kernel.settings import Settings

SECRET_KEYS = frozenset({"sasl_plain_password", "sasl.password", "ssl.key.password", "api_key"})
MASK = "**********"


class ClientOptions(dict[str, Any]):
    """Keyword arguments for a client; `repr`/`str` mask the secrets (SECRET_KEYS)."""

    def __repr__(self) -> str:
        shown = {k: (MASK if k in SECRET_KEYS and v is not None else v) for k, v in self.items()}
        return f"ClientOptions({shown!r})"

    __str__ = __repr__


class TransportConfigError(EpisodicError):
    """A TLS file that cannot be read or used; the message names the setting."""


def _readable(path: Path | None, env: str) -> str | None:
    if path is None:
        return None
    if not path.is_file():
        raise TransportConfigError(f"{env}: no such file: {path}")
    return str(path)


def kafka_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of the Kafka clients (SSL and SASL_SSL), None for the plaintext protocols. Verifies
    the broker against EPISODIC_KAFKA_SSL_CAFILE (else the system's CAs), and presents a client certificate
    when EPISODIC_KAFKA_SSL_CERTFILE is set (mutual TLS)."""
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    from aiokafka.helpers import create_ssl_context

    key_password = settings.kafka_ssl_key_password
    try:
        ctx = create_ssl_context(
            cafile=_readable(settings.kafka_ssl_cafile, "EPISODIC_KAFKA_SSL_CAFILE"),
            certfile=_readable(settings.kafka_ssl_certfile, "EPISODIC_KAFKA_SSL_CERTFILE"),
            keyfile=_readable(settings.kafka_ssl_keyfile, "EPISODIC_KAFKA_SSL_KEYFILE"),
            password=key_password.get_secret_value() if key_password is not None else None,
        )
    except ssl.SSLError as e:
        raise TransportConfigError(
            f"EPISODIC_KAFKA_SSL_CAFILE / _CERTFILE / _KEYFILE: cannot build the TLS context: {e}"
        ) from e
    ctx.check_hostname = settings.kafka_ssl_check_hostname
    return ctx


def kafka_options(settings: Settings) -> ClientOptions:
    """aiokafka's security keywords (AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient alike)."""
    opts = ClientOptions(security_protocol=settings.kafka_security_protocol)
    ctx = kafka_ssl_context(settings)
    if ctx is not None:
        opts["ssl_context"] = ctx
    if settings.kafka_security_protocol.startswith("SASL"):
        password = settings.kafka_sasl_password
        opts.update(
            sasl_mechanism=settings.kafka_sasl_mechanism,
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=password.get_secret_value() if password is not None else None,
        )
    return opts


def confluent_config(settings: Settings) -> ClientOptions:
    """librdkafka's configuration for the same transport (confluent-kafka's Producer / Consumer / AdminClient)."""
    conf = ClientOptions(
        {"bootstrap.servers": settings.bootstrap, "security.protocol": settings.kafka_security_protocol}
    )
    if settings.kafka_security_protocol.endswith("SSL"):
        for key, path in (
            ("ssl.ca.location", settings.kafka_ssl_cafile),
            ("ssl.certificate.location", settings.kafka_ssl_certfile),
            ("ssl.key.location", settings.kafka_ssl_keyfile),
        ):
            if path is not None:
                conf[key] = str(path)
        if settings.kafka_ssl_key_password is not None:
            conf["ssl.key.password"] = settings.kafka_ssl_key_password.get_secret_value()
        conf["ssl.endpoint.identification.algorithm"] = "https" if settings.kafka_ssl_check_hostname else "none"
    if settings.kafka_security_protocol.startswith("SASL"):
        assert settings.kafka_sasl_password is not None  # the settings' validator
        conf.update(
            {
                "sasl.mechanisms": settings.kafka_sasl_mechanism,
                "sasl.username": settings.kafka_sasl_username,
                "sasl.password": settings.kafka_sasl_password.get_secret_value(),
            }
        )
    return conf


def qdrant_options(settings: Settings) -> ClientOptions:
    """qdrant-client's keywords for a server: the API key, and the CA to verify an https:// URL against."""
    opts = ClientOptions()
    if settings.qdrant_api_key is not None:
        opts["api_key"] = settings.qdrant_api_key.get_secret_value()
    if settings.qdrant_ca_file is not None:
        cafile = _readable(settings.qdrant_ca_file, "EPISODIC_QDRANT_CA_FILE")
        opts["verify"] = ssl.create_default_context(cafile=cafile)  # httpx's verify: an SSLContext
    return opts
