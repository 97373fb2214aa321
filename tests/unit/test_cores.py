"""The core budget (episodic.embedding.cores) and how ONNX batches are cut into forward passes (pure logic)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from episodic.embedding.cores import BULK_TOKENS, GATE_BEHIND_S, HOLD_S, CoreBudget
from episodic.embedding.onnx_encoder import passes


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def sleeping_budget() -> tuple[CoreBudget, Callable[[float], None], list[float]]:
    """A budget on a clock that only a sleep moves, that sleep, and the sleeps it was asked for."""
    clock = Clock()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.t += s

    return CoreBudget(cores=2, clock=clock), sleep, slept


def test_every_core_while_nothing_claims_one() -> None:
    b = CoreBudget(cores=4)
    assert (b.threads(), b.token_budget()) == (4, BULK_TOKENS)


def test_a_recall_in_flight_takes_a_core_back_until_it_ends() -> None:
    b = CoreBudget(cores=2)
    with b.foreground():
        with b.foreground():
            assert b.threads() == 1 and b.token_budget() == BULK_TOKENS // 2
        assert b.threads() == 1  # one still in flight
    assert b.threads() == 2


def test_the_claim_ends_even_when_the_request_fails() -> None:
    b = CoreBudget(cores=2)
    try:
        with b.foreground():
            raise ValueError("boom")
    except ValueError:
        pass
    assert not b.claimed()


def test_a_late_gate_claims_a_core_for_a_while() -> None:
    clock = Clock()
    b = CoreBudget(cores=2, clock=clock)
    b.gate_behind(GATE_BEHIND_S / 2)  # on time: nothing claimed
    assert b.threads() == 2
    b.gate_behind(3.0)
    assert b.threads() == 1
    clock.t += HOLD_S / 2
    assert b.claimed()
    clock.t += HOLD_S
    assert b.threads() == 2


def test_one_core_is_never_given_away_and_a_fixed_count_stays() -> None:
    one = CoreBudget(cores=1)
    with one.foreground():
        assert one.threads() == 1
    fixed = CoreBudget(cores=8, fixed=3)
    assert fixed.threads() == 3
    with fixed.foreground():
        assert fixed.threads() == 3


def test_claims_from_many_threads_balance() -> None:
    b = CoreBudget(cores=2)

    def work() -> None:
        for _ in range(500):
            with b.foreground():
                pass

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not b.claimed()


def test_passes_group_texts_of_similar_length_within_the_budget() -> None:
    lengths = [10, 200, 12, 11, 190, 9, 50]
    got = passes(lengths, budget=400, max_batch=8)
    assert sorted(i for p in got for i in p) == list(range(len(lengths)))  # every text exactly once
    for p in got:
        assert len(p) * max(lengths[i] for i in p) <= 400 or len(p) == 1
    assert got[0] == [1, 4]  # 200 and 190 padded to 200: 400 word pieces, the budget exactly
    assert got[1] == [6, 2, 3, 0, 5]  # 50 wide: five texts fit, padded to the longest of them
    assert [lengths[i] for p in got for i in p] == sorted(lengths, reverse=True)


def test_a_text_longer_than_the_budget_goes_alone_and_max_batch_holds() -> None:
    assert passes([1000, 5, 5], budget=100, max_batch=8) == [[0], [1, 2]]
    assert [len(p) for p in passes([5] * 10, budget=10_000, max_batch=4)] == [4, 4, 2]
    assert passes([], budget=100, max_batch=4) == []


def test_a_recall_request_holds_the_claim_other_paths_do_not() -> None:
    import asyncio

    from recall.app import Foreground

    b = CoreBudget(cores=2)
    seen: list[tuple[str, bool]] = []

    async def app(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        seen.append((scope["path"], b.claimed()))
        if scope["path"] == "/v1/recall/fail":
            raise RuntimeError("handler failed")

    mw = Foreground(app, cores=b)  # type: ignore[arg-type]

    async def call(path: str) -> None:
        await mw({"type": "http", "path": path}, None, None)  # type: ignore[arg-type]

    asyncio.run(call("/v1/recall"))
    asyncio.run(call("/v1/journal"))
    try:
        asyncio.run(call("/v1/recall/fail"))
    except RuntimeError:
        pass
    assert seen == [("/v1/recall", True), ("/v1/journal", False), ("/v1/recall/fail", True)]
    assert not b.claimed()


def test_densify_rounds_are_big_only_while_no_core_is_claimed() -> None:
    import asyncio
    from typing import Any

    from consumers.densify import DENSIFY_BATCH, DENSIFY_BULK, Densifier

    async def publish(sends: Any) -> None:
        return None

    def densifier(cores: CoreBudget | None) -> Densifier:
        return Densifier(
            indexer=None,  # type: ignore[arg-type]
            metrics=None,  # type: ignore[arg-type]
            speed=None,  # type: ignore[arg-type]
            publish=publish,
            quarantine_after=3,
            stopping=asyncio.Event(),
            cores=cores,
        )

    b = CoreBudget(cores=2)
    assert densifier(None).round_size() == DENSIFY_BATCH
    d = densifier(b)
    assert d.round_size() == DENSIFY_BULK > DENSIFY_BATCH
    with b.foreground():
        assert d.round_size() == DENSIFY_BATCH


def test_free_cores_run_the_thread_count_measured_faster() -> None:
    from episodic.embedding.cores import EXPLORE_EVERY

    b = CoreBudget(cores=2)
    assert b.threads() == 2  # nothing measured: every core
    b.observe(2, 1000, 1.0)  # 1,000 word pieces/s on two threads (the other core busy elsewhere)
    picks = [b.threads() for _ in range(EXPLORE_EVERY * 2)]
    assert picks.count(1) == 2  # one count not measured yet: tried now and then
    b.observe(1, 1000, 0.5)  # one thread measured twice as fast
    picks = [b.threads() for _ in range(EXPLORE_EVERY * 2)]
    assert picks.count(1) == EXPLORE_EVERY * 2 - 2 and picks.count(2) == 2  # exploring two threads again
    for _ in range(10):
        b.observe(2, 3000, 1.0)  # the machine quietens: two threads win again
    assert [b.threads() for _ in range(EXPLORE_EVERY - 1)].count(2) >= EXPLORE_EVERY - 2
    assert b.rates()[2] > b.rates()[1]


def test_observations_without_time_or_tokens_are_ignored() -> None:
    b = CoreBudget(cores=2)
    b.observe(2, 0, 1.0)
    b.observe(2, 10, 0.0)
    assert b.rates() == {}


def test_full_passes_mean_bulk_embedding_and_background_work_waits_for_it_bounded() -> None:
    from episodic.embedding.cores import BULK_HOLD_S, BULK_PASS_TOKENS

    b, sleep, slept = sleeping_budget()
    b.observe(2, BULK_PASS_TOKENS - 1, 0.1)  # steady ingestion's small pass: no backlog
    assert not b.bulk_running() and b.wait_quiet(sleep=sleep) == 0 and not slept
    b.observe(2, BULK_PASS_TOKENS, 0.1)  # a full pass: a backlog is being embedded
    assert b.bulk_running()
    waited = b.wait_quiet(sleep=sleep)
    assert BULK_HOLD_S <= waited < BULK_HOLD_S + 0.1 and not b.bulk_running()
    b.observe(2, BULK_TOKENS, 0.1)
    assert b.wait_quiet(0.2, sleep=sleep) < 0.3  # bounded: edges may lag, not stall


def test_a_reported_backlog_counts_as_bulk_embedding_until_it_is_gone() -> None:
    clock = Clock()
    b = CoreBudget(cores=2, clock=clock)
    from episodic.embedding.cores import BACKLOG_HOLD_S

    b.backlog(True)  # the densify loop's round was full: more wait, even between its passes
    clock.t += BACKLOG_HOLD_S / 2
    assert b.bulk_running()
    b.backlog(False)
    assert not b.bulk_running()
    b.backlog(True)
    clock.t += BACKLOG_HOLD_S + 1  # a loop that stopped reporting holds nothing back
    assert not b.bulk_running()


def test_a_full_densify_round_reports_a_backlog_and_a_short_one_clears_it() -> None:
    import asyncio
    from datetime import UTC, datetime
    from types import SimpleNamespace
    from typing import Any

    from consumers.densify import DENSIFY_BULK, Densifier
    from episodic.indexing.indexer import BatchResult, DensifyRound
    from episodic.kernel.metrics import Metrics
    from schemas.events import IndexedEvent

    def ev(i: int) -> IndexedEvent:
        return IndexedEvent(
            entry_id=f"e{i}", workspace_id="w", point_id=f"p{i}", indexed_at=datetime.now(UTC), mode="vector"
        )

    class Indexer:
        def __init__(self) -> None:
            self.sizes = [DENSIFY_BULK, 3]

        def densify_pick(self, limit: int, *, quarantine_after: int | None = None, skip: Any = ()) -> DensifyRound:
            todo = [(f"p{i}", {"summary": "s"}) for i in range(min(limit, self.sizes.pop(0)))]
            return DensifyRound(None, "dense", todo)  # type: ignore[arg-type]

        def densify_embed(self, work: DensifyRound) -> None:
            work.vectors = [None] * len(work.todo)

        def densify_write(self, work: DensifyRound, *, quarantine_after: int | None = None) -> BatchResult:
            return BatchResult(events=[ev(i) for i in range(len(work.todo))])

    async def publish(sends: Any) -> None:
        return None

    b = CoreBudget(cores=2)
    d = Densifier(
        indexer=Indexer(),  # type: ignore[arg-type]
        metrics=Metrics(),
        speed=SimpleNamespace(observe=lambda chars, seconds: None),  # type: ignore[arg-type]
        publish=publish,
        quarantine_after=3,
        stopping=asyncio.Event(),
        cores=b,
    )
    asyncio.run(d.once())
    assert b.bulk_running()  # a full round: more wait for their vectors
    asyncio.run(d.once())
    assert not b.bulk_running()


def test_background_work_waits_while_a_recall_is_in_flight_and_goes_on_after_it() -> None:
    b, sleep, slept = sleeping_budget()
    assert not b.busy() and b.wait_quiet(sleep=sleep) == 0 and not slept
    with b.foreground():
        assert b.busy()
        waited = b.wait_quiet(1.0, sleep=sleep)
        assert 1.0 <= waited < 1.1  # bounded: under a recall load that never pauses the linker still moves
    assert not b.busy() and b.wait_quiet(sleep=sleep) == 0


def test_the_wait_ends_when_the_last_recall_in_flight_is_answered() -> None:
    b = CoreBudget(cores=2)
    claim = b.foreground()
    claim.__enter__()
    threading.Timer(0.2, claim.__exit__, (None, None, None)).start()
    waited = b.wait_quiet(10.0)
    assert 0.15 <= waited < 5.0 and not b.busy()
