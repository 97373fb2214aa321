"""Which words of a query most of a workspace's memories hold, for the hybrid's dense query
(`episodic.domain.common_terms`; `EPISODIC_DENSE_QUERY_COMMON`).

The shares come from a sample, the workspace's `SAMPLE` newest memories (the asking agent's alone, when the
request names one, else its crew's: what other agents wrote must not shape an agent's recall, not even as a
word count; their summaries through the BM25 encoder: the sparse leg's own terms), read once and reused: a
word held by half the memories is told from a sample of 500 to about ±2 points (one standard error), and a
workspace's common words change slowly. Only the first hybrid recall of a workspace in a process waits for the
sample (one store page of 500 payloads and their BM25 terms: about 150 ms on 12.7k memories, measured on this
machine under load); once its shares are older than `TTL_S`, a recall uses them as they are and a background
thread reads them again, so no later recall waits. A store that fails to give the sample leaves the query
whole: never an error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from episodic.domain.common_terms import TermShares, informative
from episodic.kernel.ports import MemoryStore, Selection
from episodic.store.sparse import Bm25Encoder

log = logging.getLogger(__name__)

SAMPLE = 500  # newest memories a workspace's shares are read from
TTL_S = 300.0  # how old a workspace's shares may be before a background thread reads them again
MAX_WORKSPACES = 256  # shares remembered at most (all forgotten at once beyond it)
# (workspace, the agent whose memories are sampled, else the crew; neither: all of the workspace's)
Key = tuple[str, str | None, str | None]


def _in_thread(job: Callable[[], None]) -> None:
    threading.Thread(target=job, name="common-terms", daemon=True).start()


class CommonTerms:
    def __init__(
        self,
        store: MemoryStore,
        bm25: Bm25Encoder,
        *,
        sample: int = SAMPLE,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
        background: Callable[[Callable[[], None]], None] = _in_thread,
    ) -> None:
        self.store = store
        self.bm25 = bm25
        self.sample = sample
        self.ttl_s = ttl_s
        self.clock = clock
        self.background = background  # runs a stale workspace's new sample (a daemon thread; tests: inline)
        self._shares: dict[Key, tuple[float, TermShares]] = {}
        self._refreshing: set[Key] = set()
        self._lock = threading.Lock()

    def _read(self, key: Key) -> TermShares:
        rows, _ = self.store.page(Selection(key[0], agent_id=key[1], crew_id=key[2]), None, self.sample)
        got = TermShares.of(self.bm25.document(str(p.get("summary") or "")).indices for _, p in rows)
        if len(self._shares) >= MAX_WORKSPACES and key not in self._shares:
            self._shares.clear()
        self._shares[key] = (self.clock(), got)
        return got

    def _refresh(self, key: Key) -> None:
        try:
            self._read(key)
        except Exception:  # the stale shares stay; the next recall after TTL_S tries again
            log.warning("common words of %r: sample failed; the older one stays", key, exc_info=True)
        finally:
            with self._lock:
                self._refreshing.discard(key)

    def shares(self, workspace_id: str, agent_id: str | None = None, crew_id: str | None = None) -> TermShares:
        """The term shares of the workspace's memories (its agent's, given one): sampled now the first time
        (concurrent first recalls wait for one sample), then as they are, a stale one read again in the
        background."""
        key = (workspace_id, agent_id, None if agent_id is not None else crew_id)
        seen = self._shares.get(key)
        if seen is None:
            with self._lock:
                seen = self._shares.get(key)
                if seen is None:
                    return self._read(key)
        if self.clock() - seen[0] >= self.ttl_s:
            with self._lock:
                start = key not in self._refreshing
                self._refreshing.add(key)
            if start:
                self.background(lambda: self._refresh(key))
        return seen[1]

    def dense_query(
        self, query: str, workspace_id: str, above: float, agent_id: str | None = None, crew_id: str | None = None
    ) -> str:
        """`query` without the words more than `above` of the workspace's memories (`agent_id`'s alone, given
        one, else `crew_id`'s) hold; the query as it is when `above` <= 0 or the sample cannot be read."""
        if above <= 0:
            return query
        try:
            shares = self.shares(workspace_id, agent_id, crew_id)
        except Exception:  # the dense query is a refinement: a failing store leaves it whole
            log.warning("common words of %r: sample failed; the dense query is left whole", workspace_id, exc_info=True)
            return query
        return informative(query, lambda w: self.bm25.query(w).indices, shares, above)
