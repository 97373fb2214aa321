"""Send a journal file (JSONL) to journal.entries, with a progress bar: the library behind `episodic produce`.

Each line is sent as-is (key = its workspace_id when the line parses), so malformed lines reach the gate
and end up in journal.dlq like any producer's garbage would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from episodic.bus.kafka import start_producer
from schemas import topics


def _key(line: bytes) -> bytes | None:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    ws = obj.get("workspace_id") if isinstance(obj, dict) else None
    return ws.encode() if isinstance(ws, str) and ws else None


async def produce_file(
    path: Path,
    *,
    bootstrap: str,
    topic: str = topics.JOURNAL_ENTRIES,
    progress: bool = True,
    options: Mapping[str, Any] | None = None,
) -> int:
    """Send every non-blank line of `path`; `options`: the transport's (`client_options.kafka_options`)."""
    from tqdm import tqdm

    lines = [ln.rstrip(b"\r\n") for ln in path.read_bytes().splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    producer = await start_producer(bootstrap, linger_ms=10, **(options or {}))
    sent = 0
    try:
        futures: list[asyncio.Future[Any]] = []
        with tqdm(total=len(lines), unit="entry", disable=not progress, desc=f"-> {topic}") as bar:
            for line in lines:
                futures.append(await producer.send(topic, key=_key(line), value=line))
                if len(futures) >= 500:
                    await asyncio.gather(*futures)
                    bar.update(len(futures))
                    sent += len(futures)
                    futures = []
            if futures:
                await asyncio.gather(*futures)
                bar.update(len(futures))
                sent += len(futures)
    finally:
        await producer.stop()
    return sent
