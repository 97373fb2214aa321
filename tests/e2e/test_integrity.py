"""Integrity end to end (issue 25): the whole stack, the real broker, store and model, across a restart of
the broker with empty topics (what `episodic up` does to its embedded broker: offsets start from 0 again).

Phase 1 writes a mixed journal (two agents, 25 identical heartbeats, entries later given new versions),
forgets one agent, one heartbeat memory (by id) and one run, and keeps the `journal.embeddable` records
that a re-delivery would bring back. Phase 2, on a new broker and the same data directory: the forgotten
agent writes new entries (new memories: a rule anchored to the old broker's offsets kept them out),
the old records are delivered again (an older version, a heartbeat duplicate whose id the alias list had
pushed out, an entry of the forgotten run), and a sentinel behind them on the same partition says they
were read. Then `episodic check`'s invariants hold, and the store matches the journal: every accepted,
unforgotten entry present once with its newest version, nothing forgotten present.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from episodic.domain.identity import point_id
from episodic.lifecycle.check import check_store
from infra.broker import free_port
from stack.runtime import Stack
from tests.brokers import TestBroker
from tests.e2e.conftest import poll, produce_lines, read_topic, running_stack, stack_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WS = "w-integrity"


def entry(i: str, summary: str, *, agent: str = "planner", run: str = "run-1", ts: datetime | None = None) -> bytes:
    when = ts or datetime.now(UTC) - timedelta(seconds=1)
    return json.dumps(
        {
            "id": i,
            "workspace_id": WS,
            "agent_id": agent,
            "run_id": run,
            "ts": when.isoformat().replace("+00:00", "Z"),
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": summary,
            "payload": {"i": i},
        }
    ).encode()


def present(stack: Stack, *ids: str) -> dict[str, dict[str, Any]]:
    assert stack.store is not None
    got = stack.store.retrieve([point_id(WS, i) for i in ids])
    return {str(p["entry_id"]): p for p in got.values()}


async def forget(http: httpx.AsyncClient, **selector: Any) -> dict[str, Any]:
    r = await http.post("/v1/memory/forget", params={"wait": 60}, json={"workspace_id": WS, **selector})
    assert r.status_code == 200 and r.json()["status"] == "applied", r.text
    return dict(r.json())


async def test_nothing_forgotten_comes_back_and_nothing_new_is_dropped_across_a_broker_restart(
    tmp_path: Path,
) -> None:
    plans = [entry(f"p{i}", f"the planner's plan {i}: move the {i % 4} cache to region r{i}") for i in range(12)]
    coder = [entry(f"c{i}", f"the coder changed module m{i} to fix bug {i * 3}", agent="coder") for i in range(8)]
    beats = [entry(f"hb-{i}", "heartbeat: all services green", run="run-hb") for i in range(25)]
    doomed = [entry(f"r{i}", f"a scratch note {i} of the doomed run", run="run-doomed") for i in range(4)]
    port = free_port()
    broker = TestBroker(port=port)
    first = broker.bootstrap
    try:
        settings = stack_settings(first, tmp_path, visible_budget_ms=0)
        async with running_stack(settings) as stack:
            await produce_lines(first, plans + coder + beats + doomed)
            await poll(lambda: len(present(stack, "p11", "c7", "hb-0", "r3")) == 4, timeout=180, what="phase 1")
            newer = [entry(f"p{i}", f"the planner's plan {i}, revised: keep the cache where it is") for i in range(3)]
            await produce_lines(first, newer)
            await poll(
                lambda: all("revised" in p["summary"] for p in present(stack, "p0", "p1", "p2").values()),
                timeout=120,
                what="the new versions",
            )
            owner = present(stack, "hb-0")["hb-0"]
            assert owner["occurrences"] == 25 and "hb-1" not in owner["aliases"]  # pushed out of the newest 20
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=70) as http:
                await forget(http, agent_id="coder")
                await forget(http, entry_ids=["hb-0"])
                await forget(http, run_id="run-doomed")
            kept = await read_topic(first, "journal.embeddable", expect=len(plans + coder + beats + doomed) + 3 + 3)
    finally:
        broker.close()  # its log is deleted: topics and offsets gone, as a broker that lost its disk

    def embeddable(i: str, summary_has: str = "") -> bytes:
        for r in kept:
            doc = json.loads(r.value) if r.value and r.value.startswith(b"{") else {}
            if doc.get("id") == i and summary_has in doc.get("summary", ""):
                return bytes(r.value)
        raise AssertionError(f"no journal.embeddable record of {i}")

    redelivered = [embeddable("p0", "move the"), embeddable("hb-1"), embeddable("r2"), embeddable("c3")]
    broker = TestBroker(port=port)  # the same address, empty: offsets start from 0 again
    second = broker.bootstrap
    try:
        settings = stack_settings(second, tmp_path, visible_budget_ms=0)
        async with running_stack(settings) as stack:
            fresh = [entry(f"c-new-{i}", f"the coder's new work {i} after the forget", agent="coder") for i in range(3)]
            await produce_lines(second, fresh)
            await produce_lines(second, redelivered, topic="journal.embeddable")
            await produce_lines(second, [entry("sentinel", "the sentinel behind the re-deliveries")])
            await poll(lambda: len(present(stack, "sentinel", "c-new-0", "c-new-1", "c-new-2")) == 4, timeout=180,
                       what="phase 2: the new entries of the forgotten agent and the sentinel")  # fmt: skip
            assert stack.store is not None and stack.state is not None
            now = present(stack, *[f"p{i}" for i in range(12)], *[f"c{i}" for i in range(8)], "hb-0", "hb-1")
            now |= present(stack, *[f"r{i}" for i in range(4)])
            # every accepted, unforgotten entry once, with its newest version; nothing forgotten
            assert set(now) == {f"p{i}" for i in range(12)}, sorted(now)
            assert all("revised" in now[f"p{i}"]["summary"] for i in range(3))  # the older version did not win
            assert stack.store.count(WS) == 12 + 3 + 1
            report = check_store(stack.store, stack.state)
            assert report.ok, report.as_dict()
            print(f"write conflicts in phase 2: {dict(getattr(stack.store, 'write_conflicts', {}))}")
    finally:
        broker.close()
