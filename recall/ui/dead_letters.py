"""The explorer's dead letters: `journal.dlq` read and replayed with `episodic.lifecycle.dlq`, the functions
`episodic dlq ls` and `episodic dlq replay` call, against the service's own Kafka.

Who sees what: dead letters are the broker's, not a memory's, so they are not narrowed to an agent. An
admin token (or the open service) sees and replays every one; a workspace token those whose bytes name
one of its workspaces; a token bound to an agent none (403: the letters of its workspace belong to every
agent in it). A replay names its dead letters by id and is re-checked against that rule when it runs.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from episodic.kernel.auth import AuthError, Principal
from episodic.kernel.transport_security import kafka_options
from episodic.lifecycle.dlq import Letter, ReplayReport, Selector, letters, replay
from recall.deps import Services

MAX_SHOWN = 200  # letters on one page (the newest)
HEX_BYTES = 4096  # of the original bytes, when they are not UTF-8


def bootstrap(services: Services) -> str:
    try:
        found = services.status().get("kafka_bootstrap")
    except Exception:
        found = None
    return str(found) if found else services.settings.bootstrap


def require_reader(principal: Principal) -> None:
    if principal.bound:
        raise AuthError(
            "forbidden",
            f"token {principal.name!r} is bound to an agent; dead letters are read with a workspace or admin token",
            field="dlq",
        )


def visible(principal: Principal, letter: Letter) -> bool:
    if principal.admin:
        return True
    return letter.workspace_id is not None and letter.workspace_id in principal.workspaces


@dataclass(slots=True)
class Listing:
    letters: list[Letter]
    total: int  # matching, before MAX_SHOWN
    reasons: list[str]


async def listing(services: Services, principal: Principal, selector: Selector) -> Listing:
    """The visible dead letters that match, newest first (at most MAX_SHOWN), and every reason seen."""
    require_reader(principal)
    found: list[Letter] = []
    reasons: set[str] = set()
    exact = not services.settings.broker_is_tansu
    options, isolation = kafka_options(services.settings), services.settings.isolation_level
    async for letter in letters(bootstrap(services), options=options, exact=exact, isolation_level=isolation):
        if not visible(principal, letter):
            continue
        if letter.record is not None:
            reasons.add(letter.record.reason)
        if selector.matches(letter):
            found.append(letter)
    found.sort(key=lambda x: (x.timestamp_ms or 0, x.partition, x.offset), reverse=True)
    return Listing(found[:MAX_SHOWN], len(found), sorted(reasons))


async def one(services: Services, principal: Principal, partition: int, offset: int) -> Letter | None:
    got = await listing(services, principal, Selector(ids=frozenset({(partition, offset)})))
    return got.letters[0] if got.letters else None


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


async def replay_ids(
    services: Services, principal: Principal, ids: frozenset[tuple[int, int]], *, force: bool
) -> ReplayReport:
    """Replay the named dead letters the caller may see (a non-admin's selection is narrowed to its
    workspaces: one replay per workspace)."""
    require_reader(principal)
    options = kafka_options(services.settings)
    partitions = services.settings.topic_partitions
    exact = not services.settings.broker_is_tansu
    isolation = services.settings.isolation_level
    if principal.admin:
        return await replay(
            bootstrap(services),
            Selector(ids=ids),
            force=force,
            partitions=partitions,
            options=options,
            exact=exact,
            isolation_level=isolation,
        )
    total = ReplayReport()
    for ws in sorted(principal.workspaces):
        got = await replay(
            bootstrap(services),
            Selector(ids=ids, workspace_id=ws),
            force=force,
            partitions=partitions,
            options=options,
            exact=exact,
            isolation_level=isolation,
        )
        total.replayed += got.replayed
        total.skipped.update(got.skipped)
        total.selected += got.selected
        total.read = max(total.read, got.read)
    return total
