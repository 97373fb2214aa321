"""The dead letters the explorer shows, kept in memory and read as they come (issue 45, part 6).

`episodic dlq ls` reads `journal.dlq` and its replay ledger from offset 0, once, and that is right for a
command. A page cannot do that on every view: each view (and each "inspect" click) read the whole topic on
the event loop that also runs the gate and the consumer, so a token that looped on `/ui/dlq/0:0` stalled
ingestion and HTTP. `DlqIndex` keeps its place on both topics instead:

- **Incremental.** A refresh reads only what was written since the last one (`read_to` from the offsets it
  reached), at most once every `min_interval_s` (2 s): views in between, however many, read the index.
  A partition whose end falls below the place kept (the topic re-created, the embedded broker's topics
  empty after a restart) is read again from 0.
- **Bounded.** It keeps the newest `capacity` letters read (50,000 by default), each without its bytes
  (`light`: the listing shows the reason, the error and where it came from); `total_read` and the reasons
  count every letter ever read. A letter's page and a replay read the letters they name, one record each
  (`fetch`), and the newest `FULL_CACHE` of those are kept whole.
- **Off the loop.** Every call is blocking (its Kafka reads run on a loop of their own, in the caller's
  thread): the explorer calls it from a small executor of its own, never from the service's event loop nor
  from its shared thread pool (recall/ui/dead_letters.py).

Ledger marks are applied to the letters they mark; a mark whose letter is not read yet waits for it (as
many as `capacity`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from episodic.bus.offsets import read_to, topic_ends
from episodic.lifecycle import dlq
from episodic.lifecycle.dlq import DlqTopics, Letter
from schemas.events import InvalidRecord, ReplayMark

__all__ = ["DEFAULT_CAPACITY", "DlqIndex", "light"]

DEFAULT_CAPACITY = 50_000
FULL_CACHE = 32  # whole letters (with their bytes) kept, the newest fetched
Key = tuple[int, int]  # (partition, offset)


def light(letter: Letter) -> Letter:
    """The letter without its bytes (what a listing shows; `why_not_replayable` answers as for the whole one:
    a letter with bytes keeps a one-character stand-in)."""
    rec = letter.record
    if rec is None:
        return letter
    stand_in = msgspec.structs.replace(rec, raw_b64="-" if rec.raw_b64 else "", raw_text=None)
    return dataclasses.replace(letter, record=stand_in)


class DlqIndex:
    """The explorer's view of `journal.dlq` (see the module doc). Thread-safe; every method blocks."""

    def __init__(
        self,
        bootstrap: Callable[[], str],
        *,
        options: Mapping[str, Any] | None = None,
        exact: bool = True,
        topics: DlqTopics = DlqTopics(),
        capacity: int = DEFAULT_CAPACITY,
        min_interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap = bootstrap
        self.options = options
        self.exact = exact
        self.topics = topics
        self.capacity = capacity
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._kept: OrderedDict[Key, Letter] = OrderedDict()  # light letters, in the order read
        self._waiting: OrderedDict[Key, ReplayMark] = OrderedDict()  # marks of letters not read yet
        self._next: dict[str, dict[int, int]] = {topics.dlq: {}, topics.replays: {}}
        self._full: OrderedDict[Key, Letter] = OrderedDict()
        self._at: float | None = None  # when the last refresh ended
        self.reasons: Counter[str] = Counter()
        self.total_read = 0
        self.refreshes = 0

    # -- reading -------------------------------------------------------------------------------------------
    def refresh(self, *, force: bool = False) -> None:
        """Read what is new on both topics, unless a refresh ended less than `min_interval_s` ago (`force`:
        even then). A caller that finds one running waits for it and reads its result."""
        with self._lock:
            if not force and self._at is not None and self.clock() - self._at < self.min_interval_s:
                return
            asyncio.run(self._read_new())
            self._at = self.clock()
            self.refreshes += 1

    def invalidate(self) -> None:
        """The next view refreshes (after a replay: its marks are new)."""
        with self._lock:
            self._at = None

    async def _places(self, topic: str) -> dict[int, int]:
        """The topic's ends now; a partition that ends below the place kept is read again from 0."""
        ends = await topic_ends(self.bootstrap(), topic, options=self.options, exact=self.exact)
        places = self._next[topic]
        for p, end in ends.items():
            if end < places.get(p, 0):
                places[p] = 0
                if topic == self.topics.dlq:
                    for key in [k for k in self._kept if k[0] == p]:
                        del self._kept[key]
                    self._full = OrderedDict((k, v) for k, v in self._full.items() if k[0] != p)
        return ends

    async def _read_new(self) -> None:
        bootstrap, topics = self.bootstrap(), self.topics
        ends = await self._places(topics.dlq)
        places = self._next[topics.dlq]
        async for rec in read_to(bootstrap, topics.dlq, ends, options=self.options, starts=dict(places)):
            letter = dlq.letter_of(rec.partition, rec.offset, rec.timestamp, rec.key, rec.value)
            key = (rec.partition, rec.offset)
            mark = self._waiting.pop(key, None)
            self._kept[key] = light(letter if mark is None else dataclasses.replace(letter, mark=mark))
            places[rec.partition] = rec.offset + 1
            self.total_read += 1
            self.reasons[letter.record.reason if letter.record is not None else "not a dead letter"] += 1
            while len(self._kept) > self.capacity:
                self._kept.popitem(last=False)
        for p, end in ends.items():
            places[p] = max(places.get(p, 0), end)
        ledger = await self._places(topics.replays)
        marked = self._next[topics.replays]
        async for rec in read_to(bootstrap, topics.replays, ledger, options=self.options, starts=dict(marked)):
            marked[rec.partition] = rec.offset + 1
            try:
                mark = ReplayMark.from_json(rec.value or b"")
            except InvalidRecord:
                continue  # not ours: the ledger is advisory
            self._mark((mark.dead_letter.partition, mark.dead_letter.offset), mark)
        for p, end in ledger.items():
            marked[p] = max(marked.get(p, 0), end)

    def _mark(self, key: Key, mark: ReplayMark) -> None:
        if key in self._kept:
            self._kept[key] = dataclasses.replace(self._kept[key], mark=mark)
        else:
            self._waiting[key] = mark
            while len(self._waiting) > self.capacity:
                self._waiting.popitem(last=False)
        if key in self._full:
            self._full[key] = dataclasses.replace(self._full[key], mark=mark)

    # -- what the pages read -------------------------------------------------------------------------------
    def letters(self) -> list[Letter]:
        """The letters kept (light), refreshed first."""
        self.refresh()
        with self._lock:
            return list(self._kept.values())

    def fetch(self, ids: Iterable[Key]) -> dict[Key, Letter]:
        """The named letters whole (their bytes read again, one record each) with their ledger marks; ids of
        no letter are left out."""
        self.refresh()
        want = sorted(set(ids))
        with self._lock:
            have = {k: self._full[k] for k in want if k in self._full}
        todo = [k for k in want if k not in have]
        if todo:
            got = asyncio.run(self._read_each(todo))
            with self._lock:
                for key, letter in got.items():
                    mark = (self._kept.get(key) or letter).mark or self._waiting.get(key)
                    letter = letter if mark is None else dataclasses.replace(letter, mark=mark)
                    have[key] = self._full[key] = letter
                    while len(self._full) > FULL_CACHE:
                        self._full.popitem(last=False)
        return have

    async def _read_each(self, keys: list[Key]) -> dict[Key, Letter]:
        bootstrap, topic = self.bootstrap(), self.topics.dlq
        ends = await topic_ends(bootstrap, topic, options=self.options, exact=self.exact)
        out: dict[Key, Letter] = {}
        for p, o in keys:
            if o >= ends.get(p, 0):
                continue
            async for rec in read_to(bootstrap, topic, {p: o + 1}, options=self.options, starts={p: o}):
                out[(p, o)] = dlq.letter_of(rec.partition, rec.offset, rec.timestamp, rec.key, rec.value)
        return out
