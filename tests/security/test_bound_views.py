"""A bound token reads nothing of another agent's memories through its own (issue 45, parts 1 and 2; the
property over random writes is tests/security/test_bound_views_property.py). Real store, state store, model,
indexer, linker and forgetter; read through the API and the explorer (tests/security/two_agents.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.security.two_agents import WS_TOKEN, Trust, leaks, memories_of, token, trust_env

pytestmark = pytest.mark.integration

PAGER = ["the on-call pager code is 4471", "rotate the on-call pager code every week", "pager duty moves to Sam"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Trust]:
    with trust_env(tmp_path_factory.mktemp("bound-views"), embedder) as e:
        yield e


def test_an_entry_under_another_agents_run_id_reads_none_of_that_run(env: Trust) -> None:
    """Part 1, the issue's case: mallory writes one entry under alice's run id, stamped just after alice's
    last one. Her memory, her recall hits and the explorer's pages carry none of alice's summaries or ids,
    and alice's memory gains no `next` edge to mallory's."""
    ws = "ws-0"
    env.write([env.rec(ws, f"a{i}", s, agent="alice", run="r-alice", minutes=i) for i, s in enumerate(PAGER)])
    env.write([env.rec(ws, "m1", "what was the pager code again?", agent="mallory", run="r-alice", minutes=3)])
    mine = env.client(token("mallory")).get("/v1/memory/m1", params={"workspace_id": ws}).json()
    assert mine["context"] == [] and mine["relations"] == []
    hers = env.client(token("alice")).get("/v1/memory/a2", params={"workspace_id": ws}).json()
    assert {(r["relation"], r["dst"]) for r in hers["relations"] if r["src"] == "a2"} == {("previous", "a1")}
    ids, texts = memories_of(env, ws, "alice")
    reads = env.reads("mallory", ws, ["m1", *sorted(ids)], ["r-alice"], ["pager code", "4471"])
    assert not leaks(reads, ids, {t for t in texts} | {"4471"})


def test_relations_name_no_other_agents_memory(env: Trust) -> None:
    """Part 2: the linker relates similar memories across agents, a consolidated rule of one agent supports
    another's entry, and a newer fact of one supersedes another's. A bound token's memory detail, recall hits,
    render and explorer pages keep only the edges whose both ends it may see (another agent's id and a missing
    one read alike); a workspace token still sees every edge."""
    ws = "ws-1"
    env.write([env.rec(ws, "m-oom", "checkout was OOM killed in the Black Friday load test at 10:00",
                       agent="mallory", minutes=0)])  # fmt: skip
    env.write([
        env.rec(ws, "a-oom", "checkout was OOM killed in the Black Friday load test at 11:00", agent="alice",
                minutes=5),
        env.rec(ws, "a-rule", "checkout needs 4 GiB in load tests", agent="alice", minutes=6,
                entry_type="memory.consolidated", supports=["a-oom", "m-oom"]),
    ])  # fmt: skip
    env.write([env.rec(ws, "m-rule", "load tests need more heap", agent="mallory", minutes=7,
                       entry_type="memory.consolidated", supports=["m-oom", "a-oom", "no-such-id"])])  # fmt: skip
    whole = env.client(WS_TOKEN).get("/v1/memory/m-oom", params={"workspace_id": ws}).json()
    others = {r["src"] for r in whole["relations"]} | {r["dst"] for r in whole["relations"]}
    assert {"a-oom", "a-rule"} <= others  # the edges across agents exist: the orchestrator sees them
    ids, texts = memories_of(env, ws, "alice")
    reads = env.reads("mallory", ws, ["m-oom", "m-rule"], [], ["checkout OOM load test", "heap"])
    assert not leaks(reads, ids, texts)
    seen = env.client(token("mallory")).get("/v1/memory/m-rule", params={"workspace_id": ws}).json()
    assert {(r["src"], r["dst"]) for r in seen["relations"]} == {("m-rule", "m-oom")}  # "no-such-id" as a-oom
    m_ids, m_texts = memories_of(env, ws, "mallory")
    assert not leaks(env.reads("alice", ws, ["a-oom", "a-rule"], [], ["checkout OOM load test"]), m_ids, m_texts)
