"""Dead letters: listing `journal.dlq` and replaying its records (`episodic dlq ls`, `episodic dlq replay`).

A replay sends a dead letter's original bytes back to `journal.entries`, keyed by the entry's workspace
(the key the journal uses; the dead letter's own key when the bytes name none), once the cause is fixed
upstream (a producer bug, a limit raised, the store repaired). What keeps it from looping:

- **The end it saw.** A run reads `journal.dlq` only up to the end offsets it saw when it started (on Tansu,
  whose ListOffsets misreports them, the fetch high watermarks: SPEC §10), so the dead letters that its own
  replays produce are never read by the same run.
- **A ledger.** Every replayed dead letter is marked on `journal.dlq.replays` (keyed `partition:offset`),
  after the broker acknowledged its bytes on `journal.entries`; a marked dead letter is not replayed again
  unless forced. A crash between the two replays it once more on the next run, which indexing takes as a
  re-delivery (idempotent by workspace and id).
- **A history.** The replayed record carries the `episodic-replay` header: its replay count and earlier
  failures. The gate passes it on to `journal.embeddable`, and the gate or the embedding consumer copies it
  into the new dead letter if the record fails again, so `dlq ls` shows how often and why; a dead letter
  replayed `max_replays` times already (default 3) is skipped unless forced.

Not replayed: records on `journal.dlq` that are not dead letters (garbage is listed as such, never
fatal), forgets (`bad_control`, `forget_failed`: ask the forget again), dead letters whose bytes the gate
cut (oversized), and empty values. A forgotten entry stays forgotten: its tombstone keeps it out however it
comes back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from episodic.bus.kafka import ensure_topics, start_producer
from episodic.bus.offsets import read_to, topic_ends
from schemas.events import (
    BAD_REVIEW,
    CONTROL_REASONS,
    MAX_REPLAY_HISTORY,
    DlqAttempt,
    DlqRecord,
    DlqSource,
    InvalidRecord,
    ReplayHistory,
    ReplayMark,
)
from schemas.topics import JOURNAL_DLQ, JOURNAL_DLQ_REPLAYS, JOURNAL_ENTRIES

DEFAULT_MAX_REPLAYS = 3
SEND_CHUNK = 500  # replayed records in flight at once (then their ledger marks)


@dataclass(frozen=True, slots=True)
class DlqTopics:
    """Where dead letters are read, replayed to and marked (defaults from schemas/topics.py)."""

    dlq: str = JOURNAL_DLQ
    entries: str = JOURNAL_ENTRIES
    replays: str = JOURNAL_DLQ_REPLAYS


@dataclass(frozen=True, slots=True)
class Letter:
    """One record of `journal.dlq`: a dead letter, or `problem` saying why it is not one."""

    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    record: DlqRecord | None
    problem: str | None = None
    mark: ReplayMark | None = None  # set when the ledger says it was replayed
    entry_id: str | None = None  # the `id` and `workspace_id` of the original bytes, when they name them
    workspace_id: str | None = None

    @property
    def id(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def at(self) -> datetime | None:
        return datetime.fromtimestamp(self.timestamp_ms / 1000, UTC) if self.timestamp_ms else None

    def why_not_replayable(self) -> str | None:
        """Why these bytes cannot go back to journal.entries at all (None: they can)."""
        rec = self.record
        if rec is None:
            return "not a dead-letter record"
        if rec.reason in CONTROL_REASONS:
            return "a forget, not a journal entry: ask the forget again"
        if rec.reason == BAD_REVIEW:
            return "a review (memory.reviewed), not a journal entry: send the review again"
        if rec.truncated:
            return "the gate kept only the head of the oversized bytes"
        if not rec.raw_b64:
            return "no bytes (the record had no value)"
        return None

    def status(self) -> str:
        if self.mark is not None:
            return f"replayed {self.mark.replayed_at.isoformat().replace('+00:00', 'Z')}"
        return "unreplayable" if self.why_not_replayable() else "pending"

    def view(self) -> dict[str, Any]:
        """The letter as `dlq ls --json` prints it (the bytes as text when they are UTF-8)."""
        rec = self.record
        return {
            "id": self.id,
            "at": self.at.isoformat().replace("+00:00", "Z") if self.at else None,
            "status": self.status(),
            "reason": rec.reason if rec else None,
            "error": rec.error if rec else self.problem,
            "source": {"topic": rec.source.topic, "partition": rec.source.partition, "offset": rec.source.offset}
            if rec
            else None,
            "workspace_id": self.workspace_id,
            "entry_id": self.entry_id,
            "replays": rec.replays if rec else 0,
            "history": [{"reason": h.reason, "error": h.error} for h in rec.history] if rec else [],
            "raw_text": rec.raw_text if rec else None,
        }


def letter_of(partition: int, offset: int, timestamp_ms: int | None, key: bytes | None, value: bytes | None) -> Letter:
    """Decode one journal.dlq record; never raises (garbage becomes a Letter with a `problem`)."""
    try:
        record = DlqRecord.from_json(value or b"")
    except InvalidRecord as e:
        return Letter(partition, offset, timestamp_ms, key, None, problem=str(e)[:300])
    entry = _object(record.raw_text)
    return Letter(partition, offset, timestamp_ms, key, record, entry_id=_text(entry.get("id")),
                  workspace_id=_text(entry.get("workspace_id")))  # fmt: skip


def _object(text: str | None) -> dict[str, Any]:
    """The original bytes as a JSON object, when they are one ({} otherwise)."""
    try:
        obj = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# -- selecting ----------------------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """`--since`: a duration back from now (`90s`, `30m`, `2h`, `7d`, `1w`) or an RFC 3339 time with an offset."""
    m = _DURATION.match(text)
    if m:
        try:
            return (now or datetime.now(UTC)) - timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
        except OverflowError:  # further back than datetime goes (year 1): a 4xx naming the field, not a 500
            raise ValueError(f"since: {text!r} reaches back before the year 1") from None
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, OverflowError):
        raise ValueError(f"since: {text!r} is neither a duration (30m, 2h, 7d) nor an RFC 3339 time") from None
    if at.tzinfo is None:
        raise ValueError(f"since: {text!r} has no UTC offset (add Z or +HH:MM)")
    return at


_LETTER_ID = re.compile(r"^(\d+):(\d+)$")


def parse_letter_id(text: str) -> tuple[int, int]:
    """A dead letter's id as `dlq ls` shows it: `partition:offset`."""
    m = _LETTER_ID.match(text.strip())
    if not m:
        raise ValueError(f"ids: {text!r} is not a dead-letter id (partition:offset, as `episodic dlq ls` shows)")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True, slots=True)
class Selector:
    """Which dead letters: each given condition must hold (none given: every one)."""

    reasons: frozenset[str] = frozenset()
    since: datetime | None = None
    ids: frozenset[tuple[int, int]] = frozenset()
    entry_ids: frozenset[str] = frozenset()
    workspace_id: str | None = None

    @property
    def empty(self) -> bool:
        return self == Selector()

    def matches(self, letter: Letter) -> bool:
        if self.ids and (letter.partition, letter.offset) not in self.ids:
            return False
        if self.reasons and (letter.record is None or letter.record.reason not in self.reasons):
            return False
        if self.since is not None and (letter.at is None or letter.at < self.since):
            return False
        if self.entry_ids and letter.entry_id not in self.entry_ids:
            return False
        return self.workspace_id is None or letter.workspace_id == self.workspace_id


def skip_reason(letter: Letter, *, max_replays: int, force: bool) -> str | None:
    """Why a selected dead letter is not replayed (None: replay it). `force` overrides the ledger and the
    replay limit, never what makes the bytes unusable."""
    why = letter.why_not_replayable()
    if why is not None:
        return why
    if force:
        return None
    if letter.mark is not None:
        return "replayed already (--force to replay it again)"
    rec = letter.record
    if rec is not None and rec.replays >= max_replays:
        return f"replayed {rec.replays} times already, the limit (--force, or --max-replays)"
    return None


def replay_history(letter: Letter, *, topic: str, now: datetime) -> ReplayHistory:
    """The `episodic-replay` header for replaying `letter`: its count plus one, its failure added."""
    rec = letter.record
    assert rec is not None
    attempt = DlqAttempt(
        reason=rec.reason,
        error=rec.error[:300],
        source=rec.source,
        dead_letter=DlqSource(topic=topic, partition=letter.partition, offset=letter.offset),
        replayed_at=now,
    )
    return ReplayHistory(replays=rec.replays + 1, history=[*rec.history, attempt][-MAX_REPLAY_HISTORY:])


def replay_key(letter: Letter) -> bytes | None:
    """The journal's key: the entry's workspace, else the dead letter's own key (the original one, from the
    gate), else none."""
    return letter.workspace_id.encode() if letter.workspace_id is not None else letter.key


# -- reading ------------------------------------------------------------------------------------------------


async def read_ledger(
    bootstrap: str, topic: str, *, options: Mapping[str, Any] | None = None, exact: bool = True
) -> dict[tuple[int, int], ReplayMark]:
    """(partition, offset) of every dead letter the ledger marks as replayed (the latest mark of each).
    `options`: the Kafka clients' TLS / SASL keywords (episodic.kernel.transport_security.kafka_options);
    `exact`: the broker's end offsets are right (not on Tansu: `episodic.bus.kafka.topic_ends`)."""
    marks: dict[tuple[int, int], ReplayMark] = {}
    ends = await topic_ends(bootstrap, topic, options=options, exact=exact)
    async for rec in read_to(bootstrap, topic, ends, options=options):
        try:
            mark = ReplayMark.from_json(rec.value or b"")
        except InvalidRecord:
            continue  # not ours: the ledger is advisory, a bad mark only means a letter looks unreplayed
        marks[(mark.dead_letter.partition, mark.dead_letter.offset)] = mark
    return marks


async def letters(
    bootstrap: str,
    topics: DlqTopics = DlqTopics(),
    *,
    options: Mapping[str, Any] | None = None,
    exact: bool = True,
    isolation_level: str = "read_uncommitted",
) -> AsyncIterator[Letter]:
    """Every record of the dead-letter topic up to the end it had when this started, with its ledger mark.
    `isolation_level`: read_committed under the gate's exactly-once (Settings.isolation_level), so that the dead
    letters of a transaction the gate aborted (and wrote again) are not listed twice."""
    marks = await read_ledger(bootstrap, topics.replays, options=options, exact=exact)
    reader = {**(options or {}), "isolation_level": isolation_level}
    ends = await topic_ends(bootstrap, topics.dlq, options=reader, exact=exact)
    async for rec in read_to(bootstrap, topics.dlq, ends, options=reader):
        letter = letter_of(rec.partition, rec.offset, rec.timestamp, rec.key, rec.value)
        mark = marks.get((rec.partition, rec.offset))
        yield letter if mark is None else dataclasses.replace(letter, mark=mark)


# -- replaying ----------------------------------------------------------------------------------------------


@dataclass
class ReplayReport:
    replayed: list[str] = field(default_factory=list)  # dead-letter ids sent back
    skipped: Counter[str] = field(default_factory=Counter)  # why -> how many (of the selected ones)
    selected: int = 0
    read: int = 0


async def replay(
    bootstrap: str,
    selector: Selector,
    *,
    topics: DlqTopics = DlqTopics(),
    max_replays: int = DEFAULT_MAX_REPLAYS,
    force: bool = False,
    dry_run: bool = False,
    partitions: int = 4,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    options: Mapping[str, Any] | None = None,
    exact: bool = True,
    given: Iterable[Letter] | None = None,
    isolation_level: str = "read_uncommitted",
) -> ReplayReport:
    """Send the selected dead letters' original bytes back to journal.entries (see the module doc).
    Returns once the broker acknowledged every replayed record and its ledger mark. `partitions`: of the
    ledger topic, when this creates it. `given`: the letters to select from (whole, with their ledger
    marks: the explorer's index reads the ones it names), instead of the whole topic read here."""
    report = ReplayReport()
    producer = None if dry_run else await start_producer(bootstrap, **(options or {}))
    try:
        if producer is not None:
            await ensure_topics(bootstrap, partitions=partitions, topics=(topics.replays,), options=options)
        chunk: list[Letter] = []
        source = (
            letters(bootstrap, topics, options=options, exact=exact, isolation_level=isolation_level)
            if given is None
            else _each(given)
        )
        async for letter in source:
            report.read += 1
            if not selector.matches(letter):
                continue
            report.selected += 1
            why = skip_reason(letter, max_replays=max_replays, force=force)
            if why is not None:
                report.skipped[why] += 1
                continue
            chunk.append(letter)
            if len(chunk) >= SEND_CHUNK:
                await _send(producer, chunk, topics, force, clock(), report)
                chunk = []
        await _send(producer, chunk, topics, force, clock(), report)
    finally:
        if producer is not None:
            await producer.stop()
    return report


async def _each(given: Iterable[Letter]) -> AsyncIterator[Letter]:
    for letter in given:
        yield letter


async def _send(
    producer: Any, chunk: Iterable[Letter], topics: DlqTopics, force: bool, now: datetime, report: ReplayReport
) -> None:
    todo = list(chunk)
    if not todo:
        return
    if producer is None:  # a dry run
        report.replayed += [letter.id for letter in todo]
        return
    histories = [replay_history(letter, topic=topics.dlq, now=now) for letter in todo]
    futures = []
    for letter, history in zip(todo, histories, strict=True):
        assert letter.record is not None
        futures.append(
            await producer.send(
                topics.entries, key=replay_key(letter), value=letter.record.raw_bytes(), headers=[history.header()]
            )
        )
    sent = await asyncio.gather(*futures)  # every record acknowledged before any of them is marked
    marks = []
    for letter, history, meta in zip(todo, histories, sent, strict=True):
        mark = ReplayMark(
            dead_letter=DlqSource(topic=topics.dlq, partition=letter.partition, offset=letter.offset),
            replayed_to=DlqSource(topic=topics.entries, partition=meta.partition, offset=meta.offset),
            replays=history.replays,
            replayed_at=now,
            forced=force,
        )
        marks.append(await producer.send(topics.replays, key=letter.id.encode(), value=mark.to_json()))
    await asyncio.gather(*marks)
    report.replayed += [letter.id for letter in todo]
