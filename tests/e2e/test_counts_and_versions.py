"""Duplicates, versions and forgets of absorbed ids end to end (issue 45, parts 3 to 5): the whole stack on a
real broker, the real store and the real model, written through `POST /v1/journal` as an agent would.

- 300 identical heartbeats sent at once are one memory with `occurrences` 300, not 20 per batch.
- An id sent at 10:00 ("Tuesday"), at 10:05 ("Thursday"), then at 10:00 again (a producer retry): the store
  keeps Thursday and `episodic_stale_versions_total` counts the retry.
- That heartbeat memory forgotten by its first id, then all 300 sent again: none comes back, not even the
  ids its alias list had pushed out long ago.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import poll, running_stack, stack_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WS = "w-counts"


def entry(i: str, summary: str, *, ts: str = "2026-11-20T10:00:00Z") -> dict[str, Any]:
    return {"id": i, "workspace_id": WS, "agent_id": "pinger", "ts": ts, "entry_type": "summary.generated",
            "severity": "info", "summary": summary}  # fmt: skip


async def memory(http: httpx.AsyncClient, eid: str) -> dict[str, Any] | None:
    r = await http.get("/v1/memory", params={"workspace_id": WS, "entry_id": eid})
    return r.json() if r.status_code == 200 else None


async def write(http: httpx.AsyncClient, entries: list[dict[str, Any]]) -> None:
    r = await http.post("/v1/journal", json={"entries": entries})
    assert r.status_code == 202, r.text


async def test_every_duplicate_counts_the_newest_version_stays_and_no_absorbed_id_comes_back(
    fresh_broker: str, tmp_path: Path
) -> None:
    beats = [entry(f"hb-{i}", "heartbeat: all workers alive") for i in range(300)]
    settings = stack_settings(fresh_broker, tmp_path, visible_budget_ms=0, batch_size=512, batch_max_wait_ms=300)
    async with (
        running_stack(settings) as stack,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=40) as http,
    ):
        await write(http, beats)

        async def counted() -> Any:
            m = await memory(http, "hb-0")
            return m if m is not None and m["occurrences"] == 300 else None

        m = await poll(counted, what="the heartbeat memory counting all 300")
        assert len(m["aliases"]) == 20 and m["aliases"][-1] == "hb-299"
        assert stack.store is not None and stack.store.count(WS) == 1

        # versions: the retry of the 10:00 version, accepted last, is older than 10:05's
        stale = "episodic_stale_versions_total"
        await write(http, [entry("x", "the release train leaves on Tuesday")])
        await poll(lambda: memory(http, "x"), what="version 1")
        await write(http, [entry("x", "the release train leaves on Thursday", ts="2026-11-20T10:05:00Z")])

        async def thursday() -> bool:
            m = await memory(http, "x")
            return m is not None and m["summary"].endswith("Thursday")

        await poll(thursday, what="version 2")
        before = stack.metrics.registry.get_sample_value(stale) or 0.0
        await write(http, [entry("x", "the release train leaves on Tuesday"), entry("s1", "sentinel one")])
        await poll(lambda: memory(http, "s1"), what="the sentinel behind the retry")
        assert await thursday()
        assert (stack.metrics.registry.get_sample_value(stale) or 0.0) == before + 1

        # forget the heartbeats by the first id; every one of the 300 ids stays out when sent again
        r = await http.delete("/v1/memory/hb-0", params={"workspace_id": WS, "wait": 30})
        assert r.status_code == 200 and r.json()["removed"] == {"memories": 1, "entry_ids": 300, "edges": 0}
        await write(http, [*beats, entry("s2", "sentinel two")])
        await poll(lambda: memory(http, "s2"), what="the sentinel behind the heartbeats")
        for eid in ("hb-0", "hb-5", "hb-279", "hb-299"):
            assert await memory(http, eid) is None, eid
        assert stack.store.count(WS) == 3  # x, s1, s2
