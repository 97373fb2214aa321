"""`episodic dlq ls` and `episodic dlq replay`: the dead letters of `journal.dlq`, straight from Kafka.

    episodic dlq ls [--reason R ...] [--since 2h|RFC3339] [--workspace W] [--entry E ...] [--id P:O ...] [--json]
    episodic dlq replay (--reason R ... | --since T | --workspace W | --entry E ... | --id P:O ... | --all)
                        [--max-replays N] [--force] [--dry-run] [--json]

A dead letter's id is `partition:offset` on journal.dlq. `replay` sends the original bytes back to
journal.entries (see `episodic.lifecycle.dlq` for what keeps a replay from looping) and needs a selection, or `--all`.
Exit statuses: 0 done, 1 Kafka cannot be reached, 2 usage, 5 (replay) some selected dead letters were
skipped (the summary says why). Kafka: --bootstrap, else EPISODIC_KAFKA_BOOTSTRAP (or the embedded broker's
address).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from collections.abc import Sequence

from episodic.kernel.errors import BrokerUnavailable
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from episodic.lifecycle.dlq import DEFAULT_MAX_REPLAYS, Letter, Selector, letters, parse_letter_id, parse_since, replay
from stack.commands.recall import Column, text_table
from stack.engine import resolved

SKIPPED = 5
LS_COLUMNS: list[Column] = [("id", 9, "<"), ("at", 20, "<"), ("reason", 17, "<"), ("replays", 7, ">"),
                            ("status", 12, "<"), ("workspace", 12, "<"), ("entry", 16, "<")]  # fmt: skip


def _selection(ap: argparse.ArgumentParser, settings: Settings) -> None:
    ap.add_argument("--reason", action="append", default=[], help="only this dead-letter reason (repeatable)")
    ap.add_argument("--since", help="only those dead-lettered since: a duration back (30m, 2h, 7d) or RFC 3339")
    ap.add_argument("--workspace", "-w", help="only entries of this workspace")
    ap.add_argument("--entry", action="append", default=[], metavar="ENTRY_ID", help="only this entry id (repeatable)")
    ap.add_argument("--id", "--ids", dest="ids", nargs="+", action="extend", default=[], metavar="P:O",
                    help="only these dead letters (partition:offset, as `dlq ls` shows)")  # fmt: skip
    ap.add_argument("--bootstrap", default=settings.bootstrap, help="Kafka bootstrap (default %(default)s)")
    ap.add_argument("--json", action="store_true", help="JSON lines")


def _selector(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Selector:
    try:
        return Selector(
            reasons=frozenset(args.reason),
            since=parse_since(args.since) if args.since else None,
            ids=frozenset(parse_letter_id(i) for i in args.ids),
            entry_ids=frozenset(args.entry),
            workspace_id=args.workspace,
        )
    except ValueError as e:
        ap.error(str(e))


def format_letters(found: Sequence[Letter], *, width: int = 120) -> str:
    if not found:
        return "(no dead letters)"
    rows = []
    for letter in found:
        v = letter.view()
        status = "replayed" if letter.mark is not None else str(v["status"])
        rows.append(
            [str(v[k] if v[k] is not None else "-") for k in ("id", "at", "reason", "replays")]
            + [status, v["workspace_id"] or "-", v["entry_id"] or "-", str(v["error"] or "")]
        )
    return text_table(LS_COLUMNS, rows, width=width, last="error")


def ls_main(argv: list[str]) -> int:
    settings = resolved(Settings())  # Kafka, or the Tansu fallback: how its end offsets are read
    ap = argparse.ArgumentParser(prog="episodic dlq ls", description="the dead letters, oldest first per partition")
    _selection(ap, settings)
    args = ap.parse_args(argv)
    selector = _selector(ap, args)

    async def collect() -> list[Letter]:
        options = kafka_options(settings)
        exact = not settings.broker_is_tansu
        found = letters(args.bootstrap, options=options, exact=exact, isolation_level=settings.isolation_level)
        return [letter async for letter in found if selector.matches(letter)]

    try:
        found = asyncio.run(collect())
    except BrokerUnavailable as e:
        print(f"episodic dlq ls: {e}", file=sys.stderr)
        return 1
    if args.json:
        for letter in found:
            print(json.dumps(letter.view(), ensure_ascii=False))
    else:
        print(format_letters(found, width=shutil.get_terminal_size((120, 24)).columns))
        if found:
            print(f"{len(found)} dead letters", file=sys.stderr)
    return 0


def replay_main(argv: list[str]) -> int:
    settings = resolved(Settings())  # Kafka, or the Tansu fallback: how its end offsets are read
    ap = argparse.ArgumentParser(prog="episodic dlq replay", description="send dead letters back to journal.entries")
    _selection(ap, settings)
    ap.add_argument("--all", action="store_true", help="every dead letter (no selection)")
    ap.add_argument("--max-replays", type=int, default=DEFAULT_MAX_REPLAYS,
                    help="skip dead letters replayed this many times already (default %(default)s)")  # fmt: skip
    ap.add_argument("--force", action="store_true", help="replay again what was replayed, past --max-replays")
    ap.add_argument("--dry-run", action="store_true", help="say what would be replayed, send nothing")
    args = ap.parse_args(argv)
    selector = _selector(ap, args)
    if selector.empty and not args.all:
        ap.error("select the dead letters (--reason, --since, --workspace, --entry, --id), or --all for every one")
    if args.max_replays < 1:
        ap.error("--max-replays must be at least 1")
    try:
        report = asyncio.run(
            replay(
                args.bootstrap,
                selector,
                max_replays=args.max_replays,
                force=args.force,
                dry_run=args.dry_run,
                partitions=settings.topic_partitions,
                options=kafka_options(settings),
                exact=not settings.broker_is_tansu,
                isolation_level=settings.isolation_level,
            )
        )
    except BrokerUnavailable as e:
        print(f"episodic dlq replay: {e}", file=sys.stderr)
        return 1
    skipped = sum(report.skipped.values())
    if args.json:
        print(json.dumps({"replayed": report.replayed, "skipped": dict(report.skipped), "selected": report.selected,
                          "read": report.read, "dry_run": args.dry_run}))  # fmt: skip
    else:
        verb = "would replay" if args.dry_run else "replayed"
        print(f"{verb} {len(report.replayed)} of {report.selected} selected dead letters ({report.read} read)")
        for why, n in report.skipped.most_common():
            print(f"  skipped {n}: {why}")
    return SKIPPED if skipped else 0


SUBCOMMANDS = {"ls": ls_main, "replay": replay_main}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SUBCOMMANDS:
        print("usage: episodic dlq {ls,replay} ... (--help after either for its options)", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return SUBCOMMANDS[argv[0]](argv[1:])
