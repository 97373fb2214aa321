"""The engine's writer for the MCP server's `remember` (`episodic_client.mcp.tools`): `KafkaWriter`, straight to
`journal.entries` once the gate's own parser accepted the entry (`episodic mcp --writes kafka`). The other,
`HttpWriter` (`POST /v1/journal`), needs no engine and lives with the tools in the client distribution.

The Kafka writer goes around the service's journal endpoint, so it asks the service who the caller's token
is (`GET /v1/whoami`: 401 for a missing or unknown token where the service has a tokens file) and applies
the endpoint's own rule to the entry (`episodic.kernel.auth.authorize_write`: the token's workspace, a bound
token's agent and crew, no `priority`) before producing it (issue 29). A broker failure is answered without
the broker's words, which name its hosts; they go to the log under a reference."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from mcp.server.mcpserver.exceptions import ToolError

from episodic.bus.kafka import dumps, send_all, start_producer
from episodic.kernel.auth import AuthError, Principal, authorize_write
from episodic_client import AsyncMemoryClient, RequestRefused
from schemas.journal import InvalidEntry, parse_entry
from schemas.topics import JOURNAL_ENTRIES

log = logging.getLogger("episodic.mcp")

KAFKA_ACK_TIMEOUT_S = 30.0


class KafkaWriter:
    """Straight to `journal.entries` (keyed by workspace, acks=all), once the gate's parser accepted the entry."""

    via: Literal["http", "kafka"] = "kafka"

    def __init__(self, bootstrap: str, options: Mapping[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.options = dict(options or {})  # the transport's (`episodic.kernel.transport_security.kafka_options`)
        self._producer: Any = None
        self._lock = asyncio.Lock()

    async def write(self, client: AsyncMemoryClient, entry: dict[str, Any]) -> None:
        value = dumps(entry)
        try:
            parse_entry(value)
        except InvalidEntry as e:
            raise ToolError(f"entry refused: {e.error}") from None
        await authorize_entry(client, entry)
        try:
            async with self._lock:
                if self._producer is None:
                    self._producer = await start_producer(self.bootstrap, **self.options)
            records = [(str(entry["workspace_id"]).encode(), value)]
            await asyncio.wait_for(send_all(self._producer, JOURNAL_ENTRIES, records), KAFKA_ACK_TIMEOUT_S)
        except Exception as e:
            ref = uuid.uuid4().hex[:12]
            log.warning("Kafka at %s did not acknowledge an entry (ref %s): %r", self.bootstrap, ref, e)
            raise ToolError(
                f"the journal did not acknowledge the entry ({type(e).__name__}; ref {ref}: see the MCP server's log)"
            ) from None

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None


async def authorize_entry(client: AsyncMemoryClient, entry: Mapping[str, Any]) -> None:
    """The journal endpoint's rule for `entry`, for the token `client` carries (the caller's, over HTTP):
    RequestRefused 401 from the service for a missing or unknown token, 403 here for an entry outside it."""
    who = await client.whoami()
    principal = Principal(
        name=who.name,
        workspaces=frozenset(who.workspaces),
        admin=who.admin,
        agent_id=who.agent_id,
        crew_id=who.crew_id,
        role=who.role,
    )
    try:
        authorize_write(
            principal,
            workspace_id=str(entry["workspace_id"]),
            agent_id=str(entry["agent_id"]),
            crew_id=entry.get("crew_id"),
            priority=entry.get("priority"),
        )
    except AuthError as e:
        raise RequestRefused(403, e.message) from None
