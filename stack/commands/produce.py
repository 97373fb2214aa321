"""`episodic produce FILE.jsonl`: send a journal file to journal.entries with a progress bar.

Exit status: 0 sent, 1 Kafka refused or cannot be reached, 2 no such file.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from episodic.bus.producer import produce_file
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from schemas import topics


def main(argv: list[str]) -> int:
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
        run = produce_file(
            args.file,
            bootstrap=args.bootstrap,
            topic=args.topic,
            progress=not args.quiet,
            options=kafka_options(settings),
        )
        n = asyncio.run(run)
    except Exception as e:
        print(f"episodic produce: cannot send to Kafka at {args.bootstrap}: {e}", file=sys.stderr)
        return 1
    print(f"sent {n} records to {args.topic} at {args.bootstrap}")
    return 0
