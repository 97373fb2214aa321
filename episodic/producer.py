"""`episodic produce FILE.jsonl`: send a journal file to journal.entries with a progress bar.

Each line is sent as-is (key = its workspace_id when the line parses), so malformed lines reach the gate
and end up in journal.dlq like any producer's garbage would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from episodic.bus import make_producer
from episodic.settings import Settings
from schemas import topics


def _key(line: bytes) -> bytes | None:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    ws = obj.get("workspace_id") if isinstance(obj, dict) else None
    return ws.encode() if isinstance(ws, str) and ws else None


async def produce_file(
    path: Path, *, bootstrap: str, topic: str = topics.JOURNAL_ENTRIES, progress: bool = True
) -> int:
    from tqdm import tqdm

    lines = [ln.rstrip(b"\r\n") for ln in path.read_bytes().splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    producer = make_producer(bootstrap, linger_ms=10)
    await producer.start()
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


def produce_main(argv: list[str]) -> int:
    settings = Settings()
    ap = argparse.ArgumentParser(prog="episodic produce", description="send a journal file (JSONL) to Kafka")
    ap.add_argument("file", type=Path, help="one JSON journal entry per line")
    ap.add_argument("--bootstrap", default=settings.bootstrap, help="Kafka bootstrap (default %(default)s)")
    ap.add_argument("--topic", default=topics.JOURNAL_ENTRIES)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if not args.file.is_file():
        print(f"episodic produce: no such file: {args.file}", file=sys.stderr)
        return 2
    try:
        n = asyncio.run(produce_file(args.file, bootstrap=args.bootstrap, topic=args.topic, progress=not args.quiet))
    except Exception as e:
        print(f"episodic produce: cannot send to Kafka at {args.bootstrap}: {e}", file=sys.stderr)
        return 1
    print(f"sent {n} records to {args.topic} at {args.bootstrap}")
    return 0
