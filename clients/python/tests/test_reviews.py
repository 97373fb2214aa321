"""Reviews from use through the client against a live `episodic up` (issue 26): an agent reviews the memories
it was given (sync and async), sees their state on `get`, and bad reviews fail before a request or as typed
refusals."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from helpers import TOKENS, Live, poll
from pydantic import ValidationError

from episodic_client import AsyncMemoryClient, Identity, NotFound
from episodic_client.models import Review

WAIT_S = 60.0


def test_an_agent_reviews_what_it_was_given_and_sees_the_state(live: Live) -> None:
    key = f"zq{uuid.uuid4().hex[:10]}"
    with live.client("planner") as bare, bare.identify() as memory:
        helped = memory.remember(f"the billing deploy needs a canary first {key}")
        misled = memory.remember(f"billing deploys never need a canary {key}")
        poll(
            lambda: {helped, misled} <= {h.entry_id for h in memory.recall(key, mode="sparse", k=5).hits},
            timeout=WAIT_S,
            what="both recalled",
        )
        accepted = memory.review({helped: "good", misled: "again", "no-such-memory": "easy"}, run_id="run-1")
        assert accepted.accepted == 2 and accepted.entry_ids == [helped, misled]
        assert [(i.index, i.reason) for i in accepted.ignored] == [(2, "no_memory")]
        assert accepted.topic == "memory.reviewed"
        state = poll(lambda: memory.get(helped).review, timeout=WAIT_S, what="the review applied")
        assert state.count == 1 and state.last_rating == "good" and state.ratings["good"] == 1
        assert (
            state.stability is not None and state.stability > 0 and state.retrievability == pytest.approx(1, abs=0.01)
        )
        assert poll(lambda: memory.get(misled).review, timeout=WAIT_S, what="again").last_rating == "again"

        with pytest.raises(ValidationError, match="rating"):  # checked before anything is sent
            memory.review({helped: "great"})
        with pytest.raises(ValidationError, match="reviews"):
            memory.review({})
        with pytest.raises(NotFound, match=r"reviews\.0\.entry_id"):
            memory.review([("no-such-memory", "good")])


def test_the_async_client_reviews_too(live: Live) -> None:
    key = f"zq{uuid.uuid4().hex[:10]}"

    async def scenario() -> int:
        identity = Identity("ws-a", "async-reviewer")
        async with AsyncMemoryClient(live.url, token=TOKENS["a"][0], identity=identity, timeout=20) as memory:
            entry_id = await memory.remember(f"an async memory to review {key}")
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while entry_id not in {h.entry_id for h in (await memory.recall(key, mode="sparse")).hits}:
                assert asyncio.get_running_loop().time() < deadline, "not recalled in time"
                await asyncio.sleep(0.2)
            await memory.review([Review(entry_id=entry_id, rating="easy")])
            while (await memory.get(entry_id)).review is None:
                assert asyncio.get_running_loop().time() < deadline, "review not applied in time"
                await asyncio.sleep(0.2)
            got = (await memory.get(entry_id)).review
            assert got is not None
            return got.ratings["easy"]

    assert asyncio.run(scenario()) == 1
