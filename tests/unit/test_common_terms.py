"""The hybrid's dense query leaves out the words most of the workspace's memories hold (issue 46):
`episodic.domain.common_terms` over the real BM25 encoder, and the engine's per-workspace sample
(`episodic.retrieval.common`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodic.domain.common_terms import TermShares, informative
from episodic.retrieval.common import CommonTerms
from episodic.store.sparse import Bm25Encoder

ENC = Bm25Encoder()
CHAT = [
    "Melanie: I signed up for a pottery class yesterday.",
    "Caroline: That's great, Melanie! Pottery is so calming.",
    "Melanie: I've been running farther to de-stress.",
    "Caroline: I went to a support group last week.",
    "Melanie: Thanks, Caroline! These are my running shoes.",
]


def shares(texts: list[str]) -> TermShares:
    return TermShares.of(ENC.document(t).indices for t in texts)


def strip(query: str, texts: list[str], above: float = 0.5) -> str:
    return informative(query, lambda w: ENC.query(w).indices, shares(texts), above)


def test_a_name_most_memories_hold_leaves_the_dense_query_and_the_rest_stays() -> None:
    # "Melanie" is in 4 of 5 memories; "running" in 2, the stop words in no BM25 term: both stay, in order
    assert strip("What does Melanie do to de-stress, running?", CHAT) == "What does do to de-stress, running?"
    assert strip("Melanie's pottery class?", CHAT) == "pottery class?"  # the possessive is the same term
    # a name held by fewer than half ("Caroline": 3 of 5 is more; at 0.7 it stays)
    assert strip("When did Caroline go?", CHAT, above=0.7) == "When did Caroline go?"
    assert strip("When did Caroline go?", CHAT) == "When did go?"


def test_the_same_word_stays_where_it_is_rare() -> None:
    """Per workspace: a word is common only among the memories it is counted over."""
    elsewhere = ["Ann: Melanie called about the lease.", "Bo: the boiler broke.", "Ann: rent is due.", "Bo: ok."]
    assert strip("What did Melanie say?", elsewhere) == "What did Melanie say?"


def test_a_query_of_common_words_only_or_no_sample_is_kept_whole() -> None:
    assert strip("Melanie?", CHAT) == "Melanie?"
    assert strip("What about Melanie and Caroline?", CHAT) == "What about Melanie and Caroline?"
    assert informative("Melanie running", lambda w: ENC.query(w).indices, TermShares.of([]), 0.5) == "Melanie running"
    assert strip("Melanie running", CHAT, above=0.0) == "Melanie running"


WORDS = st.sampled_from(["melanie", "caroline", "pottery", "running", "the", "what", "class", "week", "x1", "did"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(WORDS, min_size=1, max_size=8).map(" ".join), min_size=1, max_size=12),
    st.lists(WORDS, min_size=1, max_size=8).map(" ".join),
    st.floats(0.0, 0.99),
)
def test_what_is_left_is_the_query_s_own_words_in_order_and_never_only_stop_words(
    docs: list[str], query: str, above: float
) -> None:
    got = strip(query, docs, above)
    words, kept = query.split(), got.split()
    it = iter(words)
    assert all(w in it for w in kept)  # a subsequence of the query
    if got != query:  # something was left out: only common words, and a content word is left
        s = shares(docs)
        left_out = [w for w in words if w not in kept]
        assert all(ENC.query(w).indices and all(s.share(t) > above for t in ENC.query(w).indices) for w in left_out)
        assert any(ENC.query(w).indices for w in kept)
    assert strip(got, docs, above) == got  # once is enough: what is kept is not common


class PagedStore:
    """The one store call the sample makes (`MemoryStore.page`), counted; `fail`: it raises."""

    def __init__(self, summaries: list[str], fail: bool = False) -> None:
        self.summaries = summaries
        self.fail = fail
        self.pages: list[tuple[str, int]] = []
        self.agents: dict[str, str] = {}  # summary -> its agent (default "a")
        self.crews: dict[str, str] = {}  # summary -> its crew (default "c1")

    def page(self, selection: Any, after: Any, limit: int) -> tuple[list[tuple[str, dict[str, Any]]], None]:
        self.pages.append((selection.workspace_id, limit))
        if self.fail:
            raise RuntimeError("store down")
        mine = [s for s in self.summaries if selection.agent_id in (None, self.agents.get(s, "a"))]
        mine = [s for s in mine if selection.crew_id in (None, self.crews.get(s, "c1"))]
        return [(f"p{i}", {"summary": s}) for i, s in enumerate(mine[:limit])], None


def test_the_engine_samples_a_workspace_once_and_a_stale_sample_again_in_the_background() -> None:
    now = [0.0]
    store = PagedStore(CHAT)
    jobs: list[Any] = []
    common = CommonTerms(store, ENC, sample=3, ttl_s=300.0, clock=lambda: now[0], background=jobs.append)  # type: ignore[arg-type]
    assert common.dense_query("Did Melanie run?", "ws", 0.5) == "Did run?"  # the 3 newest all name her
    assert common.dense_query("Melanie's shoes?", "ws", 0.5) == "shoes?"
    assert common.dense_query("Melanie's pottery?", "ws", 0.5) == "Melanie's pottery?"  # in 2 of 3 too: all common
    assert store.pages == [("ws", 3)] and jobs == []  # the first recall waited for the sample; the others reuse it
    now[0] = 301.0
    store.summaries = ["Bo: pottery again.", "Ann: hi.", "Bo: the lease."]  # the workspace moved on
    assert common.dense_query("Did Melanie run?", "ws", 0.5) == "Did run?"  # the stale shares, not waited for
    common.dense_query("Did Melanie run?", "ws", 0.5)
    assert len(jobs) == 1 and store.pages == [("ws", 3)]  # one refresh started, none read in the recall
    jobs.pop()()
    assert store.pages == [("ws", 3), ("ws", 3)]
    assert common.dense_query("Did Melanie run?", "ws", 0.5) == "Did Melanie run?"  # rare now: kept
    common.dense_query("Did Melanie run?", "other", 0.5)
    assert store.pages[-1] == ("other", 3)
    assert common.dense_query("Did Melanie run?", "ws", 0.0) == "Did Melanie run?"  # off: no sample read
    assert len(store.pages) == 3


def test_a_failing_sample_leaves_the_query_whole_or_the_older_sample(caplog: pytest.LogCaptureFixture) -> None:
    store = PagedStore(CHAT, fail=True)
    now = [0.0]
    common = CommonTerms(store, ENC, clock=lambda: now[0], background=lambda job: job())  # type: ignore[arg-type]
    assert common.dense_query("Did Melanie run?", "ws", 0.5) == "Did Melanie run?"
    assert "sample failed" in caplog.text
    store.fail = False
    assert common.dense_query("Did Melanie run?", "ws", 0.5) == "Did run?"
    store.fail, now[0] = True, 1000.0
    assert common.dense_query("Did Melanie run?", "ws", 0.5) == "Did run?"  # the refresh failed: the older stays
    assert common.dense_query("Did Melanie run?", "ws", 0.5) == "Did run?"


def test_an_agent_s_query_is_shaped_by_its_own_memories_only() -> None:
    """What other agents of the workspace wrote must not change an agent's dense query (not even as a count):
    Melanie is in every memory of agent a, in none of agent b's."""
    store = PagedStore([*CHAT, "b: the deploy ran at noon", "b: the canary passed", "b: the rollback ran"])
    store.agents = {s: "b" for s in store.summaries if s.startswith("b:")}
    common = CommonTerms(store, ENC, background=lambda job: job())  # type: ignore[arg-type]
    assert common.dense_query("Did Melanie run?", "ws", 0.5, agent_id="a") == "Did run?"
    assert common.dense_query("Did Melanie run?", "ws", 0.5, agent_id="b") == "Did Melanie run?"
    store.crews = store.agents.fromkeys(store.agents, "c2")  # b's memories are crew c2's; a crew request, no agent
    assert common.dense_query("Did Melanie run?", "ws", 0.5, crew_id="c2") == "Did Melanie run?"
    assert common.dense_query("Did Melanie run?", "ws", 0.5, crew_id="c1") == "Did run?"
