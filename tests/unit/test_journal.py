"""The journal entry model and parser (SPEC §3): every rule, and the dead-letter reason it maps to."""

from __future__ import annotations

import json
from typing import Any

import pytest

from schemas.journal import DLQ_REASONS, MAX_PAYLOAD_BYTES, MAX_SUMMARY_CHARS, InvalidEntry, parse_entry


def entry(**over: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "id": "e-1",
        "workspace_id": "ws-1",
        "crew_id": "crew-1",
        "agent_id": "agent-1",
        "run_id": "run-1",
        "ts": "2026-03-01T12:00:00Z",
        "entry_type": "peer.escalation",
        "severity": "warn",
        "summary": "the deploy was escalated to a human",
        "payload": {"k": "v"},
    }
    e.update(over)
    return {k: v for k, v in e.items() if v is not _DROP}


_DROP = object()


def raw(**over: Any) -> bytes:
    return json.dumps(entry(**over)).encode()


VALID: list[tuple[str, bytes]] = [
    (
        "minimal",
        json.dumps(
            {k: entry()[k] for k in ("id", "workspace_id", "agent_id", "ts", "entry_type", "severity", "summary")}
        ).encode(),
    ),
    ("full", raw(refs={"episodic": True, "supports": ["a", "b"], "extra": 1}, priority="pin")),
    ("offset ts", raw(ts="2026-03-01T12:00:00.123456+05:30")),
    ("lower z", raw(ts="2026-03-01t12:00:00z")),
    ("space separator", raw(ts="2026-03-01 12:00:00Z")),
    ("null optionals", raw(crew_id=None, run_id=None, refs=None, priority=None)),
    ("null payload", raw(payload=None)),
    ("max summary", raw(summary="x" * MAX_SUMMARY_CHARS)),
    ("unicode summary", raw(summary="déploiement échoué ✓")),
    ("unknown fields ignored", raw(color="blue")),
    ("max id", raw(id="i" * 128)),
    ("every severity debug", raw(severity="debug")),
    ("every severity info", raw(severity="info")),
    ("every severity error", raw(severity="error")),
    ("every priority high", raw(priority="high")),
    ("every priority permanent", raw(priority="permanent")),
]


@pytest.mark.parametrize(("name", "value"), VALID, ids=[n for n, _ in VALID])
def test_valid_entries_parse(name: str, value: bytes) -> None:
    e = parse_entry(value)
    assert e.id.startswith("e-") or e.id == "i" * 128
    assert e.ts.tzinfo is not None


INVALID: list[tuple[str, bytes | None, str, str]] = [
    # (case, raw, reason, a word the error must name)
    ("tombstone", None, "not_json", "tombstone"),
    ("empty bytes", b"", "not_json", "JSON"),
    ("not utf-8", b"\xff\xfe{}", "not_utf8", "UTF-8"),
    ("latin-1", '{"summary": "caf\xe9"}'.encode("latin-1"), "not_utf8", "UTF-8"),
    ("not json", b"{oops", "not_json", "JSON"),
    ("trailing garbage", raw() + b"}", "not_json", "JSON"),
    ("array", b"[1, 2]", "not_object", "list"),
    ("null", b"null", "not_object", "null"),
    ("string", b'"hello"', "not_object", "str"),
    ("number", b"42", "not_object", "int"),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "not_json", "JSON"),
    ("missing id", raw(id=_DROP), "missing_field", "id"),
    ("missing workspace", raw(workspace_id=_DROP), "missing_field", "workspace_id"),
    ("missing agent", raw(agent_id=_DROP), "missing_field", "agent_id"),
    ("missing ts", raw(ts=_DROP), "missing_field", "ts"),
    ("missing type", raw(entry_type=_DROP), "missing_field", "entry_type"),
    ("missing severity", raw(severity=_DROP), "missing_field", "severity"),
    ("missing summary", raw(summary=_DROP), "missing_field", "summary"),
    ("empty id", raw(id=""), "empty_field", "id"),
    ("blank workspace", raw(workspace_id="   "), "empty_field", "workspace_id"),
    ("empty agent", raw(agent_id=""), "empty_field", "agent_id"),
    ("empty summary", raw(summary=""), "empty_field", "summary"),
    ("blank summary", raw(summary=" \n\t"), "empty_field", "summary"),
    ("empty type", raw(entry_type=""), "empty_field", "entry_type"),
    ("unknown severity", raw(severity="fatal"), "bad_severity", "severity"),
    ("severity case", raw(severity="WARN"), "bad_severity", "severity"),
    ("ts words", raw(ts="yesterday"), "bad_timestamp", "ts"),
    ("ts date only", raw(ts="2026-03-01"), "bad_timestamp", "ts"),
    ("ts no offset", raw(ts="2026-03-01T12:00:00"), "bad_timestamp", "ts"),
    ("ts bad month", raw(ts="2026-13-01T12:00:00Z"), "bad_timestamp", "ts"),
    ("ts epoch number", raw(ts=1700000000), "bad_timestamp", "ts"),
    ("oversize summary", raw(summary="x" * (MAX_SUMMARY_CHARS + 1)), "oversize_summary", "summary"),
    ("oversize payload", raw(payload={"blob": "y" * MAX_PAYLOAD_BYTES}), "oversize_payload", "payload"),
    ("payload list", raw(payload=[1, 2]), "payload_not_object", "payload"),
    ("payload string", raw(payload="text"), "payload_not_object", "payload"),
    ("id too long", raw(id="i" * 129), "invalid_field", "id"),
    ("id not string", raw(id=7), "invalid_field", "id"),
    ("bad priority", raw(priority="urgent"), "invalid_field", "priority"),
    ("refs not object", raw(refs=[1]), "invalid_field", "refs"),
    ("refs.episodic not bool", raw(refs={"episodic": "yes"}), "invalid_field", "refs"),
]


@pytest.mark.parametrize(("case", "value", "reason", "word"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_entries_raise_with_reason(case: str, value: bytes | None, reason: str, word: str) -> None:
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(value)
    assert ei.value.reason == reason, ei.value.error
    assert ei.value.reason in DLQ_REASONS
    assert word.lower() in ei.value.error.lower()


def test_payload_limit_is_on_encoded_bytes() -> None:
    # 3-byte characters: under the limit in characters, over it in UTF-8 bytes
    with pytest.raises(InvalidEntry) as ei:
        parse_entry(raw(payload={"t": "€" * (MAX_PAYLOAD_BYTES // 3 + 10)}))
    assert ei.value.reason == "oversize_payload"
    parse_entry(raw(payload={"t": "€" * (MAX_PAYLOAD_BYTES // 3 - 100)}))
