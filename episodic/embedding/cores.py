"""Who needs the CPU now: bulk embedding takes every idle core and gives one back to the gate and recall.

The model's batch work (a backlog of ingestion batches, a densify pass) runs in sub-batches of a bounded
number of word pieces. Before each sub-batch the embedder asks `threads()`:

- every core (`bulk`) while nothing else in the process wants one;
- one fewer (`shared`, at least one) while a recall request is in flight (`foreground()`, held by the
  recall service around each request) or the gate is behind (`gate_behind(age)`: the gate's batch was
  older than `GATE_BEHIND_S` when it was routed; the claim lasts `HOLD_S` after the last such batch).

Sub-batches are also halved while the cores are claimed (`token_budget`), so a recall waits at most for a
short forward pass before the embedder's threads shrink.

Background work yields the other way: while bulk embedding runs (a pass of at least `BULK_PASS_TOKENS` word
pieces within the last `BULK_HOLD_S`: a backlog, not the trickle of steady ingestion; or the densify loop
said its last round was full, `backlog(True)`, which also covers the gaps between its rounds) or a recall is in
flight (`foreground()`), the linker waits (`wait_quiet`, at most `YIELD_MAX_S` a chunk of its batch) before
its neighbour queries, so a burst's vectors come first, its edges a little later, and a recall never shares
the process with the linker's catch-up. Measured with `bench.bench_burst` and `bench.bench_recall_tail`
(docs/benchmarks.md): right after a backfill the linker links the whole backlog at once (it waited for the
vectors), and recalls asked meanwhile had a p99 2-3 times that of the same recalls once it was done.

"Idle" is judged inside this process only; on a machine whose cores are busy with other work, every
core's threads wait on preempted peers and run slower than one. So the budget also measures: each pass
reports its word pieces per second (`observe`), and while the cores are free it runs `bulk` only while
that has been measured at least as fast as `shared` (moving averages; every `EXPLORE_EVERY`th pass tries
the other count, so a change of load is noticed). Exported: `episodic_embed_threads` (threads of the last
pass) and `episodic_embed_yielded_total` (passes run on fewer threads than `bulk`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

GATE_BEHIND_S = 0.25  # the gate is behind when a batch it routes was produced longer ago than this
HOLD_S = 0.5  # a claim from the gate lasts this long after its last late batch
BULK_TOKENS = 8192  # word pieces per forward pass when the cores are free (padding included)
EXPLORE_EVERY = 16  # while the cores are free, every 16th pass runs on the count not measured faster
ALPHA = 0.3  # weight of a new pass in the moving averages of word pieces per second
BULK_PASS_TOKENS = BULK_TOKENS // 4  # a pass this full means a backlog (steady ingestion's passes are smaller)
BULK_HOLD_S = 0.5  # bulk embedding counts as running this long after its last such pass
BACKLOG_HOLD_S = 10.0  # a densify backlog report lasts this long unless renewed (a round takes seconds)
YIELD_MAX_S = 30.0  # background work (the linker) waits for bulk embedding at most this long per batch
YIELD_POLL_S = 0.05


def available_cores() -> int:
    """The cores this process may run on (its affinity mask; os.cpu_count() where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class CoreBudget:
    """Thread-safe: the recall service and the gate claim cores from the event loop, the embedder reads
    the budget from its worker thread."""

    def __init__(
        self,
        cores: int | None = None,
        *,
        fixed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cores = cores or available_cores()
        self.fixed = fixed  # EPISODIC_EMBED_THREADS: the same count whatever else runs
        self.clock = clock
        self._lock = threading.Lock()
        self._foreground = 0
        self._gate_until = 0.0
        self._rate: dict[int, float] = {}  # threads -> word pieces per second (moving average)
        self._free_passes = 0
        self._bulk_until = 0.0
        self._backlog_until = 0.0

    @property
    def bulk(self) -> int:
        return self.fixed or self.cores

    @property
    def shared(self) -> int:
        return self.fixed or max(1, self.cores - 1)

    @contextlib.contextmanager
    def foreground(self) -> Iterator[None]:
        """Held while a latency-bound request (a recall) runs in this process."""
        with self._lock:
            self._foreground += 1
        try:
            yield
        finally:
            with self._lock:
                self._foreground -= 1

    def gate_behind(self, age_s: float) -> None:
        """The gate routed a batch whose oldest record was produced `age_s` ago."""
        if age_s > GATE_BEHIND_S:
            until = self.clock() + HOLD_S
            with self._lock:
                self._gate_until = max(self._gate_until, until)

    def claimed(self) -> bool:
        """Whether a recall or the gate needs a core now."""
        with self._lock:
            return self._foreground > 0 or self.clock() < self._gate_until

    def threads(self) -> int:
        """Threads for the next forward pass (see the module doc)."""
        bulk, shared = self.bulk, self.shared
        if self.claimed() or bulk == shared:
            return shared
        with self._lock:
            self._free_passes += 1
            explore = self._free_passes % EXPLORE_EVERY == 0
            rb, rs = self._rate.get(bulk), self._rate.get(shared)
        if rb is None:
            return bulk
        if rs is None:
            return shared if explore else bulk
        best, other = (bulk, shared) if rb >= rs else (shared, bulk)
        return other if explore else best

    def observe(self, threads: int, tokens: int, seconds: float) -> None:
        """A forward pass of `tokens` word pieces (padding included) took `seconds` on `threads`."""
        if tokens <= 0 or seconds <= 0:
            return
        rate = tokens / seconds
        with self._lock:
            if tokens >= BULK_PASS_TOKENS:
                self._bulk_until = max(self._bulk_until, self.clock() + BULK_HOLD_S)
            old = self._rate.get(threads)
            self._rate[threads] = rate if old is None else old + ALPHA * (rate - old)

    def backlog(self, waiting: bool) -> None:
        """The densify loop's last round was full (`waiting`: more memories wait for their vectors) or not.
        A report lasts `BACKLOG_HOLD_S` unless renewed (a loop that stopped reporting holds nothing back)."""
        with self._lock:
            self._backlog_until = self.clock() + BACKLOG_HOLD_S if waiting else 0.0

    def bulk_running(self) -> bool:
        """Whether bulk embedding runs: a backlog's full pass within the last `BULK_HOLD_S`, or a backlog
        that the densify loop reported."""
        with self._lock:
            now = self.clock()
            return now < self._backlog_until or now < self._bulk_until

    def busy(self) -> bool:
        """Whether background work should wait: bulk embedding runs or a recall is in flight."""
        with self._lock:
            if self._foreground > 0:
                return True
        return self.bulk_running()

    def wait_quiet(self, max_s: float = YIELD_MAX_S, *, sleep: Callable[[float], None] = time.sleep) -> float:
        """Block (a worker thread, never the event loop) while bulk embedding runs or a recall is in flight,
        at most `max_s`; the seconds waited by `clock`. For background work that may lag (similar edges) but
        must not slow a burst's vectors or a recall down; bounded, so that under a recall load that never
        pauses it still moves, a chunk per `max_s`."""
        start = self.clock()
        while self.busy() and self.clock() - start < max_s:
            sleep(YIELD_POLL_S)
        return self.clock() - start

    def rates(self) -> dict[int, float]:
        with self._lock:
            return dict(self._rate)

    def token_budget(self) -> int:
        """Word pieces (padding included) per forward pass: half while the cores are claimed."""
        return BULK_TOKENS // 2 if self.claimed() else BULK_TOKENS
