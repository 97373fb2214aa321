"""The engine's writer for the MCP server's `remember` (`episodic_client.mcp.tools`): `KafkaWriter`, straight to
`journal.entries` once the gate's own parser accepted the entry (`episodic mcp --writes kafka`). The other,
`HttpWriter` (`POST /v1/journal`), needs no engine and lives with the tools in the client distribution."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Literal

from mcp.server.mcpserver.exceptions import ToolError

from episodic.bus.kafka import dumps, make_producer, send_all
from episodic_client import AsyncMemoryClient
from schemas.journal import InvalidEntry, parse_entry
from schemas.topics import JOURNAL_ENTRIES

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
        try:
            async with self._lock:
                if self._producer is None:
                    producer = make_producer(self.bootstrap, **self.options)
                    await producer.start()
                    self._producer = producer
            records = [(str(entry["workspace_id"]).encode(), value)]
            await asyncio.wait_for(send_all(self._producer, JOURNAL_ENTRIES, records), KAFKA_ACK_TIMEOUT_S)
        except Exception as e:
            raise ToolError(f"Kafka at {self.bootstrap} did not acknowledge the entry ({type(e).__name__}: {e})") from e

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
