"""The long mixed-load integrity test (issue 25, deliverable 6): minutes of mixed load on the real broker,
store and model, then `episodic check` and a comparison of the store with a journal model.

The gate runs as its own process (`episodic run gate`) so it can be killed with -9 and restarted; the other
roles run in the test process (one Stack) and are restarted once as a whole, on the same data directory.
What happens, in order: a mixed journal (three agents, two workspaces, several runs, exact duplicates,
entries the policy never embeds, garbage for the dead-letter topic), recalls while it is indexed, new
versions of some entries, the gate killed -9 while a batch is in flight and restarted, forgets by id, by
agent and by run, a decay run, a dead-letter replay (the garbage comes back to the DLQ, nothing reaches the
store), then the whole stack stopped: an export of one workspace imported again (an import into a store that
holds the same memories changes nothing) and a re-embed (`episodic reindex`, the same model cut into
windows), the stack started again with that configuration, and new entries (some by the forgotten agent:
new memories, not forgotten ones) behind a sentinel. `Journal` knows what the store must hold at the end:
every accepted, unforgotten entry once, with its newest version; nothing forgotten.

What it found on the way (fixed, each with a test of its own): a new version with a later `ts` left a cycle
of run edges behind it, and a forget's relink walked that cycle for ever inside the embedder's worker
thread, so a forget by run stayed pending and the whole embedding consumer stalled
(tests/contract/test_context_contract.py); and a replayed dead letter was stamped again at the gate
(tests/unit/test_dlq.py). About a minute and a half on this machine (2 cores at load 6 to 9).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from episodic.domain.identity import point_id
from episodic.lifecycle.check import check_store
from episodic.lifecycle.dlq import letters
from stack.commands.dlq import replay_main
from stack.runtime import Stack
from tests.e2e.conftest import poll, produce_lines, running_stack, stack_settings
from tests.e2e.test_role_failover import RoleProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKSPACES = ("long-a", "long-b")
AGENTS = ("planner", "coder", "scribe")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
NOT_GATE = ("embedder", "http", "linker", "importance", "health", "nudge")


@dataclass
class Journal:
    """What was written and forgotten, and so what the store must hold: ws -> entry id -> newest summary."""

    expected: dict[str, dict[str, str]] = field(default_factory=lambda: {ws: {} for ws in WORKSPACES})
    meta: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # (ws, id) -> (agent, run)
    forgotten: set[tuple[str, str]] = field(default_factory=set)
    never: set[tuple[str, str]] = field(default_factory=set)  # duplicates and entries the policy skips
    owners: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (ws, agent, text) -> owner id
    tick: int = 0

    def line(
        self, ws: str, i: str, summary: str, *, agent: str, run: str, entry_type: str = "summary.generated"
    ) -> bytes:
        self.tick += 1
        return json.dumps(
            {
                "id": i,
                "workspace_id": ws,
                "agent_id": agent,
                "run_id": run,
                "ts": (T0 + timedelta(seconds=self.tick)).isoformat().replace("+00:00", "Z"),
                "entry_type": entry_type,
                "severity": "info",
                "summary": summary,
                "payload": {"tick": self.tick},
            }
        ).encode()

    def write(self, ws: str, i: str, summary: str, *, agent: str, run: str) -> bytes:
        """An entry the policy embeds: a new memory, a new version of one, or a duplicate of its owner."""
        key = (ws, agent, " ".join(summary.casefold().split()))
        owner = self.owners.get(key)
        if owner is not None and owner != i:
            self.never.add((ws, i))
        else:
            self.owners[key] = i
            self.expected[ws][i] = summary
            self.meta[(ws, i)] = (agent, run)
        return self.line(ws, i, summary, agent=agent, run=run)

    def skipped(self, ws: str, i: str, *, agent: str, run: str) -> bytes:
        self.never.add((ws, i))
        return self.line(ws, i, f"tool call {i} returned 200", agent=agent, run=run, entry_type="tool.call")

    def forget(self, ws: str, pick: Any) -> list[str]:
        gone = [i for i in self.expected[ws] if pick(i, *self.meta[(ws, i)])]
        for i in gone:
            del self.expected[ws][i]
            self.forgotten.add((ws, i))
        self.owners = {k: v for k, v in self.owners.items() if (k[0], v) not in self.forgotten}
        return gone


def batch(j: Journal, rnd: random.Random, tag: str, n: int, *, agents: tuple[str, ...] = AGENTS) -> list[bytes]:
    """`n` mixed lines: mostly new memories, every 9th an exact duplicate (case and spacing changed) of an
    earlier memory of the batch, every 11th a tool call the policy never embeds."""
    out: list[bytes] = []
    mine: list[tuple[str, str, str, str]] = []
    for k in range(n):
        ws, agent, run = rnd.choice(WORKSPACES), rnd.choice(agents), f"run-{rnd.randrange(4)}"
        i = f"{tag}{k:04d}"
        if k % 9 == 8 and mine:
            ws, agent, run, text = rnd.choice(mine)
            out.append(j.write(ws, i, "  " + text.upper().replace(" ", "  "), agent=agent, run=run))
        elif k % 11 == 10:
            out.append(j.skipped(ws, i, agent=agent, run=run))
        else:
            text = f"{agent} {tag} note {k}: service s{k % 13} {rnd.choice(['failed', 'recovered', 'was rolled back'])}"
            mine.append((ws, agent, run, text))
            out.append(j.write(ws, i, text, agent=agent, run=run))
    return out


GARBAGE = [b"{not json", b"[1, 2]", json.dumps({"id": "bad-1", "workspace_id": "long-a", "summary": "x"}).encode()]


def stored(stack: Stack, ws: str, ids: list[str]) -> dict[str, str]:
    assert stack.store is not None
    got = stack.store.retrieve([point_id(ws, i) for i in ids]) if ids else {}
    return {str(p["entry_id"]): str(p["summary"]) for p in got.values()}


def caught_up(stack: Stack, j: Journal) -> bool:
    return all(stored(stack, ws, list(j.expected[ws])) == j.expected[ws] for ws in WORKSPACES)


def compare(stack: Stack, j: Journal) -> None:
    """The store holds exactly the journal model: every expected entry once with its newest version, nothing
    forgotten, no duplicate or skipped entry as a point of its own, and no point besides."""
    assert stack.store is not None and stack.state is not None
    for ws in WORKSPACES:
        assert stored(stack, ws, list(j.expected[ws])) == j.expected[ws], ws
        gone = [i for w, i in j.forgotten | j.never if w == ws]
        assert stored(stack, ws, gone) == {}, (ws, sorted(stored(stack, ws, gone)))
        assert stack.store.count(ws) == len(j.expected[ws]), (ws, stack.store.count(ws), len(j.expected[ws]))
    report = check_store(stack.store, stack.state)
    assert report.ok, report.as_dict()


async def recall_load(port: int, stop: asyncio.Event) -> int:
    """Recalls in a loop until `stop`; every answer must be a 200."""
    n = 0
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        while not stop.is_set():
            ws = WORKSPACES[n % 2]
            r = await http.post(
                "/v1/recall", json={"workspace_id": ws, "agent_id": "planner", "query": "service failed"}
            )
            assert r.status_code == 200, r.text
            n += 1
            await asyncio.sleep(0.3)
    return n


async def forget(http: httpx.AsyncClient, ws: str, **selector: Any) -> None:
    r = await http.post("/v1/memory/forget", params={"wait": 60}, json={"workspace_id": ws, **selector})
    assert r.status_code in (200, 202), r.text
    url = r.json()["status_url"]

    async def applied() -> bool:
        got = (await http.get(url)).json()
        assert got["status"] in ("pending", "applied"), got
        return bool(got["status"] == "applied")

    await poll(applied, timeout=180, what=f"the forget {selector} applied")


async def test_minutes_of_mixed_load_leave_the_store_equal_to_the_journal(
    fresh_broker: str, tmp_path: Path, procs: list[RoleProcess], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rnd = random.Random(25)
    j = Journal()
    data = tmp_path / "data"
    log = tmp_path / "gate.log"

    def gate() -> RoleProcess:
        p = RoleProcess("gate", fresh_broker, tmp_path / "gate", log)
        procs.append(p)
        return p

    g = gate()
    await poll(lambda: g.healthz(), timeout=120, what="the gate process healthy")
    settings = stack_settings(fresh_broker, data, visible_budget_ms=0, topic_partitions=4, decay_schedule="0 0 29 2 *")
    async with running_stack(settings, roles=NOT_GATE) as stack:
        stop = asyncio.Event()
        recalls = asyncio.create_task(recall_load(stack.http_port, stop))
        try:
            # 1. a mixed journal with garbage in it
            first = batch(j, rnd, "a", 160)
            await produce_lines(fresh_broker, first[:80] + GARBAGE + first[80:])
            await poll(lambda: caught_up(stack, j), timeout=240, what="the first batch indexed")
            # 2. new versions of some memories
            for ws in WORKSPACES:
                for i in sorted(j.expected[ws])[:6]:
                    agent, run = j.meta[(ws, i)]
                    await produce_lines(
                        fresh_broker, [j.write(ws, i, f"{j.expected[ws][i]}, revised later", agent=agent, run=run)]
                    )
            await poll(lambda: caught_up(stack, j), timeout=120, what="the new versions")
            # 3. the gate killed -9 with a batch in flight, then started again
            await produce_lines(fresh_broker, batch(j, rnd, "b", 120))
            g.kill9()
            await produce_lines(fresh_broker, batch(j, rnd, "c", 40))
            g = gate()
            await poll(lambda: caught_up(stack, j), timeout=240, what="the batches around the gate's kill -9")
            # 4. forgets by id, by agent, by run; a decay run; a dead-letter replay
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=70) as http:
                by_id = sorted(j.expected["long-a"])[10:13]
                j.forget("long-a", lambda i, agent, run: i in by_id)
                await forget(http, "long-a", entry_ids=by_id)
                j.forget("long-b", lambda i, agent, run: agent == "scribe")
                await forget(http, "long-b", agent_id="scribe")
                j.forget("long-a", lambda i, agent, run: run == "run-2")
                await forget(http, "long-a", run_id="run-2")
                r = await http.post("/v1/admin/run/decay")
                assert r.status_code == 200, r.text
        finally:
            stop.set()
        assert await recalls > 0
        capsys.readouterr()
        code = await asyncio.to_thread(replay_main, ["--all", "--max-replays", "1", "--bootstrap", fresh_broker])
        assert code in (0, 5), capsys.readouterr().out
        await poll(lambda: _replayed_back(fresh_broker), timeout=60, what="the replayed garbage dead-lettered again")
        compare(stack, j)
    # 5. the whole stack stopped: an export imported again, a re-embed into windows; then started again
    from stack.cli import main

    monkeypatch.setenv("EPISODIC_DATA_DIR", str(data))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("EPISODIC_QDRANT_URL", raising=False)
    export = tmp_path / "long-b.jsonl"
    assert await asyncio.to_thread(main, ["export", "--workspace", "long-b", "--out", str(export)]) == 0
    assert await asyncio.to_thread(main, ["import", str(export)]) == 0
    monkeypatch.setenv("EPISODIC_CHUNK_MODE", "window")
    # in this thread: the pass sets its own SIGINT handler (the stack is stopped, nothing else runs on the loop)
    assert main(["reindex", "--model", settings.embed_model, "--page-size", "32"]) == 0
    assert "pieces window:" in capsys.readouterr().out
    settings = stack_settings(
        fresh_broker, data, visible_budget_ms=0, topic_partitions=4, decay_schedule="0 0 29 2 *", chunk_mode="window"
    )
    async with running_stack(settings, roles=NOT_GATE) as stack:
        compare(stack, j)  # nothing changed across the restart, the import and the re-embed
        # 6. new entries, some by the forgotten agent (new memories), and a sentinel behind them
        late = batch(j, rnd, "d", 60, agents=("scribe", "planner"))
        await produce_lines(
            fresh_broker, [*late, j.write("long-b", "sentinel", "the sentinel", agent="planner", run="run-9")]
        )
        await poll(lambda: caught_up(stack, j), timeout=240, what="the entries after the restart")
        assert any(j.meta[("long-b", i)][0] == "scribe" for i in j.expected["long-b"] if i.startswith("d"))
        compare(stack, j)
    assert g.stop() == 0, log.read_text()[-3000:]
    print({ws: len(j.expected[ws]) for ws in WORKSPACES}, "forgotten", len(j.forgotten), "never", len(j.never))


async def _replayed_back(bootstrap: str) -> bool:
    found = [letter async for letter in letters(bootstrap)]
    return any(d.record is not None and d.record.replays >= 1 for d in found)
