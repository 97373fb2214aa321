"""Which words of a query most of a workspace's memories hold, for the hybrid's dense query
(`episodic.domain.common_terms`; `EPISODIC_DENSE_QUERY_COMMON`).

The shares come from a sample, the workspace's `SAMPLE` newest memories (their summaries through the BM25
encoder: the sparse leg's own terms), read once and reused for `TTL_S`: a word held by more than a fifth of
the memories is told from a sample of 2,000 to about ±2 points, and a workspace's common words change slowly.
The first hybrid recall of a workspace, and one every `TTL_S` after, pays for the sample (one store page of
2,000 payloads and their BM25 terms). A store that fails to give it leaves the query whole: never an error.
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

SAMPLE = 2000  # newest memories a workspace's shares are read from
TTL_S = 300.0  # how long a workspace's shares are reused
MAX_WORKSPACES = 256  # shares remembered at most (all forgotten at once beyond it)


class CommonTerms:
    def __init__(
        self,
        store: MemoryStore,
        bm25: Bm25Encoder,
        *,
        sample: int = SAMPLE,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.bm25 = bm25
        self.sample = sample
        self.ttl_s = ttl_s
        self.clock = clock
        self._shares: dict[str, tuple[float, TermShares]] = {}
        self._lock = threading.Lock()

    def shares(self, workspace_id: str) -> TermShares:
        """The workspace's term shares, from the cache while fresh, else sampled again."""
        now = self.clock()
        seen = self._shares.get(workspace_id)
        if seen is not None and now - seen[0] < self.ttl_s:
            return seen[1]
        with self._lock:  # one sample at a time: concurrent recalls of a cold workspace wait for the first
            seen = self._shares.get(workspace_id)
            if seen is not None and now - seen[0] < self.ttl_s:
                return seen[1]
            rows, _ = self.store.page(Selection(workspace_id), None, self.sample)
            got = TermShares.of(self.bm25.document(str(p.get("summary") or "")).indices for _, p in rows)
            if len(self._shares) >= MAX_WORKSPACES:
                self._shares.clear()
            self._shares[workspace_id] = (self.clock(), got)
            return got

    def dense_query(self, query: str, workspace_id: str, above: float) -> str:
        """`query` without the words more than `above` of the workspace's memories hold; the query as it is
        when `above` <= 0 or the sample cannot be read."""
        if above <= 0:
            return query
        try:
            shares = self.shares(workspace_id)
        except Exception:  # the dense query is a refinement: a failing store leaves it whole
            log.warning("common words of %r: sample failed; the dense query is left whole", workspace_id, exc_info=True)
            return query
        return informative(query, lambda w: self.bm25.query(w).indices, shares, above)
