"""A bound token's view, checked as a property (issue 45): two bound agents of one crew write random entries in
one workspace (shared run ids and entry ids, similar and near-identical texts that link, fold and supersede,
consolidated rules that support any id), forget some of their memories (and try the other's), and then
everything either reads through the API and the explorer (memory detail, relations, context, recall and
render hits with walks and adjacency, listings, run pages, search, forget previews) holds no text and no id
of the other agent's memories, nor its name. Real store, state store, model, indexer, linker and forgetter
(tests/security/two_agents.py); a fresh workspace per example."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.two_agents import AGENTS, WORKSPACES, Trust, leaks, memories_of, trust_env

pytestmark = pytest.mark.integration

MARK = {"alice": "zebra", "mallory": "quokka"}  # a word only that agent's texts hold
TEXTS = [
    "{m}: the checkout service ran out of memory during the load test",
    "{m}: checkout ran out of memory during the load test",
    "{m}: the checkout service ran out of memory during the load test at 10:00",
    "{m}: the checkout service ran out of memory during the load test at 11:00",
    "{m}: the on-call pager code is 4471",
    "{m}: rotate the on-call pager code every week",
]
IDS = [f"id{n:02d}x" for n in range(8)]
RUNS = ["run-0", "run-1"]
QUERIES = ["checkout ran out of memory in the load test", "on-call pager code"]

entry = st.fixed_dictionaries(
    {
        "agent": st.sampled_from(AGENTS),
        "id": st.sampled_from(IDS),
        "text": st.sampled_from(range(len(TEXTS))),
        "run": st.sampled_from([*RUNS, None]),
        "supports": st.one_of(st.none(), st.lists(st.sampled_from(IDS), min_size=1, max_size=3)),
    }
)
step = st.one_of(
    st.tuples(st.just("write"), st.lists(entry, min_size=1, max_size=4)),
    st.tuples(st.just("forget"), st.fixed_dictionaries({"agent": st.sampled_from(AGENTS), "id": st.sampled_from(IDS)})),
)
_workspaces = itertools.count(WORKSPACES // 2)  # the other half of the tokens' workspaces: the examples'


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Trust]:
    with trust_env(tmp_path_factory.mktemp("bound-property"), embedder) as e:
        yield e


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=st.lists(step, min_size=1, max_size=6))
def test_no_bound_token_reads_anything_of_the_other_agents_memories(env: Trust, steps: list[Any]) -> None:
    ws = f"ws-{next(_workspaces)}"
    assert int(ws.split("-")[1]) < WORKSPACES, "more examples than the tokens file has workspaces"
    minute = 0
    for kind, what in steps:
        if kind == "forget":
            env.forget(what["agent"], ws, what["id"])
            continue
        batch = []
        for e in what:
            minute += 1
            kind = "memory.consolidated" if e["supports"] is not None else "summary.generated"
            text = TEXTS[e["text"]].format(m=MARK[e["agent"]])
            batch.append(env.rec(ws, e["id"], text, agent=e["agent"], run=e["run"], minutes=minute,
                                 supports=e["supports"], entry_type=kind))  # fmt: skip
        env.write(batch)
    for reader, other in (AGENTS, AGENTS[::-1]):
        ids, texts = memories_of(env, ws, other)
        reads = env.reads(reader, ws, IDS, RUNS, QUERIES)
        wrote = {i for kind, what in steps if kind == "write" for e in what if e["agent"] == reader
                 for i in e["supports"] or []}  # fmt: skip
        found = leaks(reads, ids, {*texts, MARK[other], other}, wrote)
        assert not found, (reader, found[:5], steps)
