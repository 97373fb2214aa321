"""A deterministic mixed journal with garbage in it, and the exact outcome it must produce."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from episodic.domain.policy import decide

EMBED_TYPES = [
    "peer.escalation",
    "summary.generated",
    "memory.consolidated",
    "approval.denied",
    "eval.regression_detected",
]
SEV_TYPES = ["keeper.decision", "mission.status_change"]
NEVER = ["peer.conversation", "exec.output_chunk", "container.metrics", "network.dns", "network.http", "tool.call"]
SEVERITIES = ["debug", "info", "warn", "error"]
TOPICS = ["checkout", "billing", "search", "ledger", "auth", "inventory", "payments", "tls", "dns", "cache"]
VERBS = ["failed", "recovered", "was rolled back", "timed out", "leaked memory", "was escalated", "passed review"]


@dataclass
class Expected:
    lines: list[bytes] = field(default_factory=list)
    memories: set[tuple[str, str]] = field(default_factory=set)  # (workspace, entry id) that own a point
    duplicates: dict[tuple[str, str], str] = field(default_factory=dict)  # (ws, id) -> id of the owner
    skipped: set[tuple[str, str]] = field(default_factory=set)
    dlq: list[tuple[str, bytes]] = field(default_factory=list)  # (reason, raw bytes)


def build(n_valid: int = 300, seed: int = 11, workspaces: tuple[str, ...] = ("w-a", "w-b", "w-c")) -> Expected:
    rnd = random.Random(seed)
    exp = Expected()
    seen_text: dict[tuple[str, str, str, str], str] = {}
    owners: list[tuple[str, str, str, str, bool, str]] = []
    for i in range(n_valid):
        ws = rnd.choice(workspaces)
        agent = rnd.choice(["planner", "coder"])
        kind = rnd.random()
        if kind < 0.45:
            et = rnd.choice(EMBED_TYPES)
        elif kind < 0.7:
            et = rnd.choice(SEV_TYPES)
        else:
            et = rnd.choice(NEVER)
        sev = rnd.choice(SEVERITIES)
        forced = rnd.random() < 0.08
        summary = f"{rnd.choice(TOPICS)} {rnd.choice(VERBS)} in run {i % 17} (case {i})"
        if i % 20 == 0 and owners:  # an exact duplicate (modulo case and spacing) of an earlier memory
            ws, agent, et, sev, forced, text = rnd.choice(owners)
            summary = "  " + text.upper().replace(" ", "   ") + " "
        entry = {
            "id": f"e{i:05d}",
            "workspace_id": ws,
            "crew_id": "crew-1",
            "agent_id": agent,
            "run_id": f"r{i % 9}",
            "ts": f"2026-11-{1 + i % 20:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
            "entry_type": et,
            "severity": sev,
            "summary": summary,
            "payload": {"i": i},
        }
        if forced:
            entry["refs"] = {"episodic": True}
        exp.lines.append(json.dumps(entry).encode())
        d = decide(et, sev, forced=forced)
        key = (ws, agent, et, " ".join(summary.casefold().split()))
        if not d.embed:
            exp.skipped.add((ws, entry["id"]))
        elif key in seen_text:
            exp.duplicates[(ws, entry["id"])] = seen_text[key]
        else:
            seen_text[key] = entry["id"]
            exp.memories.add((ws, entry["id"]))
            owners.append((ws, agent, et, sev, forced, summary))
    base = {
        "id": "g",
        "workspace_id": "w-a",
        "agent_id": "planner",
        "ts": "2026-11-21T10:00:00Z",
        "entry_type": "peer.escalation",
        "severity": "warn",
        "summary": "garbage probe",
        "payload": {},
    }

    def variant(**kw: object) -> bytes:
        d = dict(base)
        for k, v in kw.items():
            if v is ...:
                d.pop(k, None)
            else:
                d[k] = v
        return json.dumps(d).encode()

    garbage: list[tuple[str, bytes]] = [
        ("not_json", b"{not json"),
        ("not_json", b""),
        ("not_utf8", b"\xff\xfe\x00garbage"),
        ("not_object", b"[1, 2, 3]"),
        ("not_object", b"null"),
        ("not_object", b'"a string"'),
        ("missing_field", variant(id="g1", agent_id=...)),
        ("missing_field", variant(id="g2", summary=...)),
        ("empty_field", variant(id="g3", summary="")),
        ("empty_field", variant(id="", summary="x")),
        ("bad_severity", variant(id="g4", severity="fatal")),
        ("bad_timestamp", variant(id="g5", ts="yesterday")),
        ("bad_timestamp", variant(id="g6", ts="2026-11-21 10:00")),
        ("oversize_summary", variant(id="g7", summary="x" * 16_385)),
        ("oversize_payload", variant(id="g8", payload={"blob": "y" * 70_000})),
        ("payload_not_object", variant(id="g9", payload=[1, 2])),
        ("invalid_field", variant(id=12345)),
    ]
    # interleave garbage through the journal
    step = max(1, len(exp.lines) // (len(garbage) + 1))
    for j, (reason, raw) in enumerate(garbage):
        exp.lines.insert((j + 1) * step + j, raw)
        exp.dlq.append((reason, raw))
    return exp
