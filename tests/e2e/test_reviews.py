"""Reviews from use end to end (issue 26): the whole embedded stack (real broker, store on disk, real model),
a memory recalled over HTTP, reviewed over HTTP, its FSRS state on GET /v1/memory/{id}, and, with
EPISODIC_REVIEW_RANKING=fsrs, its ranking changed: at once (the agent rescores the reviewed memories) and as
its retrievability falls (the nightly job, run through the admin endpoint with a controllable clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from episodic.domain.identity import point_id
from episodic.domain.review import ReviewState, retrievability, review
from tests.e2e.conftest import poll, produce_lines, running_stack, stack_settings
from tests.e2e.test_maintenance import line, metric
from tests.integration.maint_helpers import Clock

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "The billing deploy needs a canary first: roll out to one pod, watch the error rate, then the rest."


async def test_a_review_over_http_changes_the_memorys_state_and_ranking(fresh_broker: str, tmp_path: Path) -> None:
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=40)
    clock = Clock(t0)
    settings = stack_settings(
        fresh_broker, tmp_path, visible_budget_ms=0, decay_schedule="0 0 29 2 *", review_ranking="fsrs"
    )
    async with running_stack(settings, clock=clock) as stack:
        store = stack.store
        assert store is not None
        # the same text, so the same relevance: recall ranks the two by importance alone (dense mode)
        await produce_lines(
            fresh_broker,
            [
                line("loud", TEXT, entry_type="peer.escalation", severity="warn"),  # base 0.9
                line("useful", TEXT),  # summary.generated: base 0.7
            ],
        )
        pids = [point_id("ws-a", "loud"), point_id("ws-a", "useful")]
        await poll(lambda: len(store.retrieve(pids)) == 2, what="both indexed")
        query = {"workspace_id": "ws-a", "agent_id": "a1", "query": "how do we deploy billing", "k": 2, "mode": "dense"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=30) as http:
            clock.advance(days=1)
            before = (await http.post("/v1/recall", json=query)).json()["hits"]
            assert [h["entry_id"] for h in before] == ["loud", "useful"]
            assert before[0]["score"] / before[1]["score"] == pytest.approx(0.9 / 0.7, rel=0.01)

            # the loud one did not help this run, the other one did
            reviews = {"workspace_id": "ws-a", "agent_id": "a1", "run_id": "r9", "reviews": [
                {"entry_id": "loud", "rating": "again"}, {"entry_id": "useful", "rating": "easy"},
                {"entry_id": "no-such-memory", "rating": "good"}]}  # fmt: skip
            r = await http.post("/v1/memory/review", json=reviews)
            assert r.status_code == 202, r.text
            assert r.json()["entry_ids"] == ["loud", "useful"] and r.json()["ignored"][0]["index"] == 2

            async def reviewed() -> bool:
                got = (await http.get("/v1/memory/useful", params={"workspace_id": "ws-a"})).json()
                return bool(got.get("review"))

            await poll(reviewed, what="the review applied")
            loud = (await http.get("/v1/memory/loud", params={"workspace_id": "ws-a"})).json()
            useful = (await http.get("/v1/memory/useful", params={"workspace_id": "ws-a"})).json()
            expect = review(ReviewState(), "again", clock())
            assert loud["review"] == {
                "count": 1, "ratings": {"again": 1, "hard": 0, "good": 0, "easy": 0}, "last_rating": "again",
                "last_reviewed_at": clock().isoformat().replace("+00:00", "Z"),
                "stability": pytest.approx(expect.stability, abs=1e-5),
                "difficulty": pytest.approx(expect.difficulty, abs=1e-5), "retrievability": 1.0,
            }  # fmt: skip
            assert useful["review"]["last_rating"] == "easy" and useful["review"]["count"] == 1
            # rescored at once: reviews, not the retrievals, reinforce a reviewed memory
            recency = 1 - 1 / 180

            # (the review state is written before the rescore: wait for both memories' rescores, then read)
            def rescored() -> bool:
                got = store.retrieve(pids)
                return got[pids[0]]["importance_score"] < 0.9 and got[pids[1]]["importance_score"] > 0.7

            await poll(rescored, what="rescored")
            loud = (await http.get("/v1/memory/loud", params={"workspace_id": "ws-a"})).json()
            assert loud["importance_score"] == pytest.approx(0.9 * recency, abs=1e-4)
            got = store.retrieve(pids)
            assert got[pids[1]]["importance_score"] == pytest.approx(0.7 * recency * 1.125, abs=1e-4)
            now = (await http.post("/v1/recall", json=query)).json()["hits"]
            assert now[0]["score"] / now[1]["score"] == pytest.approx(0.9 / (0.7 * 1.125), rel=0.01)
            assert metric(stack, "episodic_reviews_total", rating="again") == 1
            assert metric(stack, "episodic_reviews_total", rating="easy") == 1
            assert metric(stack, "episodic_reviews_refused_total", reason="unknown_memory") == 1

            # a month later the memory of no use has faded: the nightly job ranks by retrievability
            clock.advance(days=30)
            assert (await http.post("/v1/admin/run/decay")).status_code == 200
            after = (await http.post("/v1/recall", json=query)).json()["hits"]
            assert [h["entry_id"] for h in after] == ["useful", "loud"]
            r_loud = retrievability(expect, clock())
            assert r_loud is not None and r_loud < 0.6
            loud_now = store.retrieve([pids[0]])[pids[0]]["importance_score"]
            assert loud_now == pytest.approx(0.9 * (1 - 31 / 180) * r_loud, abs=1e-4)
