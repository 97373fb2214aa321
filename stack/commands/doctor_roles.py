"""`episodic doctor`: the checks of each role and of the Qdrant server, as Kafka and the server see them.

Every role that consumes a topic (gate, embedder, linker, importance, health, nudge) does so in its own
consumer group (`<consumer_group_prefix>-<role>`), in
`episodic up` as in distributed mode, so the broker tells whether a role keeps up wherever it runs: the
records its group has not committed yet (high watermark - committed offset). A group that never committed
while its topic has records means that role is not running anywhere. The recall service (serve) is checked
through its own HTTP endpoints (doctor.check_service); the nightly decay through its metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from episodic.kernel.settings import Settings
from schemas.topics import JOURNAL_EMBEDDABLE, JOURNAL_ENTRIES, MEMORY_INDEXED, MEMORY_REFERENCED
from stack.commands.checks import LAG_WARN_RECORDS, Check


@dataclass(frozen=True)
class RoleInput:
    role: str
    topic: str
    start: str  # how to run it
    scale: str  # what to do when it falls behind


ROLE_INPUTS: tuple[RoleInput, ...] = (
    RoleInput(
        "gate",
        JOURNAL_ENTRIES,
        "start `episodic gate` (or `episodic up`)",
        "run more `episodic gate` processes (up to journal.entries' partitions, EPISODIC_TOPIC_PARTITIONS)",
    ),
    RoleInput(
        "embedder",
        JOURNAL_EMBEDDABLE,
        "start `episodic embedder` (or `episodic up`)",
        "run more `episodic embedder` processes (up to journal.embeddable's partitions), one per GPU with "
        "EPISODIC_EMBED_DEVICE=cuda, or check the store's upsert latency",
    ),
    RoleInput(
        "linker",
        MEMORY_INDEXED,
        "start `episodic linker` (EPISODIC_LINKER_ENABLED=false leaves it out of `episodic up` on purpose: "
        "then ignore this)",
        "run more `episodic linker` processes (up to memory.indexed's partitions) or check the store's latency",
    ),
    RoleInput(
        "importance",
        MEMORY_REFERENCED,
        "start `episodic importance` (or `episodic up`)",
        "run more `episodic importance` processes (up to memory.referenced's partitions)",
    ),
    RoleInput(
        "health",
        JOURNAL_EMBEDDABLE,
        "start `episodic health-agent` (or `episodic up`); one replica, its daily schedule is not leader-elected",
        "check the store's latency and the agent's log (episodic_agent_errors_total{agent=\"health\"})",
    ),
    RoleInput(
        "nudge",
        JOURNAL_ENTRIES,
        "start `episodic nudge-agent` (or `episodic up`)",
        "check the state store's latency and the agent's log (episodic_agent_errors_total{agent=\"nudge\"})",
    ),
)

# (lag in records or None when unknown, whether the group ever committed on the topic)
GroupState = tuple[int | None, bool]
Measure = Callable[[Settings, str, str], Awaitable[GroupState]]


async def measure_group(settings: Settings, group: str, topic: str) -> GroupState:
    """The group's lag on `topic` and whether it ever committed there (without joining the group), over the
    same transport (TLS, SASL) as every other client of the project."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from episodic.bus.offsets import LagProbe, partitions_of
    from episodic.kernel.transport_security import kafka_options

    bootstrap = settings.bootstrap
    probe = LagProbe(
        bootstrap=bootstrap, group_id=group, topic=topic, report=lambda _lag: None, exact=not settings.broker_is_tansu
    )
    consumer = AIOKafkaConsumer(
        **kafka_options(settings),
        bootstrap_servers=bootstrap,
        group_id=group,  # OffsetFetch only: with manual assignment it never joins the group
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=1,
        request_timeout_ms=10_000,
    )
    await consumer.start()
    try:
        lag = await probe.measure(consumer)
        parts = await partitions_of(consumer, topic)
        committed = [await consumer.committed(TopicPartition(topic, p)) for p in parts]
        return lag, any(c is not None for c in committed)
    finally:
        await consumer.stop()


def check_role(spec: RoleInput, group: str, state: GroupState) -> Check:
    lag, committed = state
    name = f"role-{spec.role}"
    if lag is None:
        return Check(name, "WARN", f"lag of {group} on {spec.topic} unknown (no fetch answered)", spec.start)
    if not committed and lag > 0:
        return Check(
            name,
            "WARN",
            f"{group} has never committed on {spec.topic} ({lag} records waiting): no {spec.role} is running",
            spec.start,
        )
    if lag > LAG_WARN_RECORDS:
        return Check(name, "WARN", f"{group} is {lag} records behind on {spec.topic}", spec.scale)
    return Check(name, "OK", f"{group} keeps up on {spec.topic} ({lag} records behind)")


def check_roles(settings: Settings, measure: Measure | None = None, timeout: float = 30.0) -> list[Check]:
    """One check per consuming role, from its consumer group's lag; nothing when Kafka is unreachable (the
    broker check says so)."""
    run = measure or measure_group

    async def all_roles() -> list[Check]:
        out = []
        for spec in ROLE_INPUTS:
            group = f"{settings.consumer_group_prefix}-{spec.role}"
            try:
                state = await asyncio.wait_for(run(settings, group, spec.topic), timeout)
            except Exception as e:
                out.append(Check(f"role-{spec.role}", "WARN", f"could not read {group}'s offsets: {e!r}", spec.start))
                continue
            out.append(check_role(spec, group, state))
        return out

    return asyncio.run(all_roles())


def check_qdrant_server(settings: Settings, transport: httpx.BaseTransport | None = None) -> Check | None:
    """With EPISODIC_QDRANT_URL: the server answers /readyz (with the API key when one is set)."""
    if not settings.qdrant_url:
        return None
    from episodic.kernel.transport_security import qdrant_options

    url = settings.qdrant_url.rstrip("/")
    opts = qdrant_options(settings)  # the API key, and the CA for an https:// URL (EPISODIC_QDRANT_CA_FILE)
    headers = {"api-key": str(opts["api_key"])} if "api_key" in opts else {}
    fix = (
        "check that the Qdrant server runs and that EPISODIC_QDRANT_URL (and EPISODIC_QDRANT_API_KEY) are right; "
        "`curl $EPISODIC_QDRANT_URL/readyz` must answer 200"
    )
    try:
        with httpx.Client(timeout=10.0, transport=transport, verify=opts.get("verify", True)) as c:
            r = c.get(f"{url}/readyz", headers=headers)
    except httpx.HTTPError as e:
        return Check("qdrant", "FAIL", f"Qdrant server not reachable at {url}: {e}", fix)
    if r.status_code in (401, 403):
        return Check("qdrant", "FAIL", f"Qdrant at {url} refuses the API key (HTTP {r.status_code})", fix)
    if r.status_code != 200:
        return Check("qdrant", "FAIL", f"Qdrant at {url} is not ready (HTTP {r.status_code})", fix)
    return Check("qdrant", "OK", f"Qdrant server ready at {url}")


def check_decay(metrics: dict[str, float], now: float, schedule: str) -> Check:
    """From the service's metrics (the importance role runs the decay in `episodic up`)."""
    failed = metrics.get('episodic_decay_runs_total{outcome="failed"}', 0.0)
    last = metrics.get("episodic_decay_last_success_timestamp_seconds", 0.0)
    if failed > 0:
        return Check(
            "decay",
            "WARN",
            f"{int(failed)} DecayAndReinforce run(s) failed since the process started",
            "read the importance role's log; `POST /v1/admin/run/decay` (admin token) runs it now and answers "
            "what it did, and the next scheduled run resumes from its cursor",
        )
    if last > 0:
        return Check("decay", "OK", f"last decay run finished {(now - last) / 3600:.1f} h ago (schedule {schedule})")
    return Check("decay", "OK", f"no decay run in this process yet (schedule {schedule}, UTC)")


def check_health(metrics: dict[str, float]) -> Check:
    """Memory health from the service's metrics (the health agent's gauges, in `episodic up`)."""
    bands = {
        b: int(metrics.get(f'episodic_memory_health_workspaces{{band="{b}"}}', 0)) for b in ("red", "yellow", "green")
    }
    snapshots = sum(v for k, v in metrics.items() if k.startswith("episodic_health_snapshots_total"))
    if bands["red"]:
        return Check(
            "health",
            "WARN",
            f"{bands['red']} workspace(s) in the red memory-health band (score < 50)",
            "`episodic health --workspace W` shows the weak metric: coverage (the embedder or the store), "
            "freshness (old memories), reachability (the linker), coherence or efficiency (what agents store)",
        )
    if not sum(bands.values()):
        return Check("health", "OK", f"no workspace snapshot in this process yet ({int(snapshots)} taken)")
    return Check("health", "OK", f"workspaces by band: {bands['green']} green, {bands['yellow']} yellow, 0 red")
