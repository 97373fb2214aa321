"""The explorer's dead letters: `journal.dlq` as `episodic.lifecycle.dlq_index.DlqIndex` keeps it (read as it
comes, bounded, never from offset 0 per view), replayed with `episodic.lifecycle.dlq.replay`, the function
behind `episodic dlq replay`, against the service's own Kafka.

Who sees what: dead letters are the broker's, not a memory's, so they are not narrowed to an agent. An
admin token (or the open service) sees and replays every one; a workspace token those whose bytes name
one of its workspaces; a token bound to an agent none (403: the letters of its workspace belong to every
agent in it). A replay names its dead letters by id and is re-checked against that rule when it runs;
`force` (replay again what was replayed, past the limit) is an admin's (403 naming `force` for others: a
poison letter sent again and again is the operator's call).

No request can stall the stack through these pages: their Kafka reads and filtering run in a small executor
of their own (`DLQ_WORKERS` threads), neither on the event loop that carries the gate and the consumer in
`episodic up` nor in the thread pool that recall uses; at most `MAX_WAITING` requests wait for it, and one
more is a 503 page ("busy, retry") at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from episodic.kernel.auth import AuthError, Principal
from episodic.kernel.transport_security import kafka_options
from episodic.lifecycle.dlq import Letter, ReplayReport, Selector, replay
from episodic.lifecycle.dlq_index import DlqIndex
from recall.deps import Services

MAX_SHOWN = 200  # letters on one page (the newest), and in one replay
HEX_BYTES = 4096  # of the original bytes, when they are not UTF-8
DLQ_WORKERS = 2
MAX_WAITING = 8
_POOL = ThreadPoolExecutor(max_workers=DLQ_WORKERS, thread_name_prefix="explorer-dlq")
_SLOTS = threading.BoundedSemaphore(MAX_WAITING)
T = TypeVar("T")


class Busy(Exception):
    """Too many dead-letter requests are waiting already: the page says so (503) instead of queueing more."""


def bootstrap(services: Services) -> str:
    try:
        found = services.status().get("kafka_bootstrap")
    except Exception:
        found = None
    return str(found) if found else services.settings.bootstrap


def index_of(services: Services) -> DlqIndex:
    """The service's one index (made on first use: the stack's broker may start after the app)."""
    found: DlqIndex | None = getattr(services, "dlq_index", None)
    if found is None:
        # read committed records only under the gate's exactly-once: an aborted transaction's letters, written
        # again, would be listed twice
        options = {**kafka_options(services.settings), "isolation_level": services.settings.isolation_level}
        found = DlqIndex(lambda: bootstrap(services), options=options, exact=not services.settings.broker_is_tansu)
        services.dlq_index = found
    return found


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in the dead letters' own executor; Busy when `MAX_WAITING` requests wait already."""
    if not _SLOTS.acquire(blocking=False):
        raise Busy("the dead-letter pages are busy: try again in a moment")
    try:
        return await asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)
    finally:
        _SLOTS.release()


def require_reader(principal: Principal) -> None:
    if principal.bound:
        raise AuthError(
            "forbidden",
            f"token {principal.name!r} is bound to an agent; dead letters are read with a workspace or admin token",
            field="dlq",
        )


def require_force(principal: Principal) -> None:
    if not principal.admin:
        raise AuthError(
            "forbidden",
            f"token {principal.name!r} may replay a dead letter again (force) only with an admin token",
            field="force",
        )


def visible(principal: Principal, letter: Letter) -> bool:
    if principal.admin:
        return True
    return letter.workspace_id is not None and letter.workspace_id in principal.workspaces


@dataclass(slots=True)
class Listing:
    letters: list[Letter]
    total: int  # matching, before MAX_SHOWN (among the letters the index keeps)
    reasons: list[str]
    kept: int = 0  # letters the index keeps (the newest read)
    read: int = 0  # letters read since the service started


def _listing(index: DlqIndex, principal: Principal, selector: Selector) -> Listing:
    found: list[Letter] = []
    reasons: set[str] = set()
    kept = index.letters()
    for letter in kept:
        if not visible(principal, letter):
            continue
        if letter.record is not None:
            reasons.add(letter.record.reason)
        if selector.matches(letter):
            found.append(letter)
    found.sort(key=lambda x: (x.timestamp_ms or 0, x.partition, x.offset), reverse=True)
    return Listing(found[:MAX_SHOWN], len(found), sorted(reasons), len(kept), index.total_read)


async def listing(services: Services, principal: Principal, selector: Selector) -> Listing:
    """The visible dead letters that match, newest first (at most MAX_SHOWN), and every reason seen."""
    require_reader(principal)
    return await off_loop(_listing, index_of(services), principal, selector)


async def one(services: Services, principal: Principal, partition: int, offset: int) -> Letter | None:
    """The letter whole (its bytes), when the caller may see it."""
    require_reader(principal)
    got = await off_loop(index_of(services).fetch, [(partition, offset)])
    letter = got.get((partition, offset))
    return letter if letter is not None and visible(principal, letter) else None


def shown_bytes(letter: Letter) -> tuple[str, str]:
    """("text", the bytes as text) when they are UTF-8, else ("hex", a hex dump of the first HEX_BYTES)."""
    rec = letter.record
    if rec is None:
        return "text", ""
    if rec.raw_text is not None:
        return "text", rec.raw_text
    try:
        raw = base64.b64decode(rec.raw_b64)
    except (binascii.Error, ValueError):
        return "text", "(the dead letter's raw_b64 is not base64)"
    lines = []
    for at in range(0, min(len(raw), HEX_BYTES), 16):
        chunk = raw[at : at + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {text}")
    if len(raw) > HEX_BYTES:
        lines.append(f"… {len(raw) - HEX_BYTES} more bytes")
    return "hex", "\n".join(lines)


def _replay(services: Services, principal: Principal, ids: frozenset[tuple[int, int]], force: bool) -> ReplayReport:
    index = index_of(services)
    given = [x for x in index.fetch(ids).values() if visible(principal, x)]
    report = asyncio.run(
        replay(bootstrap(services), Selector(ids=ids), force=force, partitions=services.settings.topic_partitions,
               options=kafka_options(services.settings), exact=index.exact, given=given,
               isolation_level=services.settings.isolation_level)
    )  # fmt: skip
    index.invalidate()  # their ledger marks are new
    return report


async def replay_ids(
    services: Services, principal: Principal, ids: frozenset[tuple[int, int]], *, force: bool
) -> ReplayReport:
    """Replay the named dead letters the caller may see (read whole, one record each), `force` for an admin
    only."""
    require_reader(principal)
    if force:
        require_force(principal)
    return await off_loop(_replay, services, principal, ids, force)
