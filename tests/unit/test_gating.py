"""The gate's pure routing: raw bytes -> Forward | Skip | DeadLetter (SPEC §3, §4, §10 topic records)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from episodic.indexing.gating import (
    MAX_DLQ_RECORD_BYTES,
    METRIC_TYPE_LABELS,
    DeadLetter,
    Forward,
    Skip,
    route,
    type_label,
)
from schemas.events import DlqRecord, EmbeddableRecord
from schemas.journal import MAX_DEPTH, InvalidEntry, parse_entry
from tests.unit.journal_strategies import base_entry

NOW = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)


def entry(**over: Any) -> dict[str, Any]:
    """The shared base entry without crew and run ids."""
    return base_entry(**{"crew_id": ..., "run_id": ..., **over})


def go(value: bytes | None) -> Any:
    return route(value, topic="journal.entries", partition=3, offset=42, now=NOW)


def test_forward_carries_entry_importance_and_acceptance() -> None:
    r = go(json.dumps(entry(priority="permanent", refs={"supports": ["a"], "x": 1})).encode())
    assert isinstance(r, Forward)
    assert r.key == b"ws-1"
    assert r.decision == "embed"
    rec = EmbeddableRecord.from_json(r.value)
    assert rec.id == "e-1" and rec.workspace_id == "ws-1"
    assert rec.base_importance == pytest.approx(0.95)
    assert rec.accepted_at == NOW
    assert rec.payload == {"n": 1}
    assert rec.supports == ["a"]
    assert json.loads(r.value)["refs"]["x"] == 1  # extra refs keys survive


def test_forced_entry_is_forwarded_with_forced_label() -> None:
    r = go(json.dumps(entry(entry_type="peer.conversation", severity="warn", refs={"episodic": True})).encode())
    assert isinstance(r, Forward) and r.decision == "forced"
    assert EmbeddableRecord.from_json(r.value).base_importance == pytest.approx(0.60)


@pytest.mark.parametrize(
    ("entry_type", "severity", "label"),
    [
        ("peer.conversation", "error", "skip_type"),
        ("network.http", "error", "skip_type"),
        ("keeper.decision", "info", "skip_severity"),
        ("mission.status_change", "debug", "skip_severity"),
    ],
)
def test_skips(entry_type: str, severity: str, label: str) -> None:
    r = go(json.dumps(entry(entry_type=entry_type, severity=severity)).encode())
    assert isinstance(r, Skip)
    assert r.decision == label and r.entry_id == "e-1"


GARBAGE: list[tuple[bytes | None, str]] = [
    (None, "not_json"),
    (b"\xc3\x28", "not_utf8"),
    (b"nope", "not_json"),
    (b"[]", "not_object"),
    (b"null", "not_object"),
    (b"{" * 50_000, "not_json"),
    (b'{"a":' * 5000 + b"1" + b"}" * 5000, "not_json"),
    (json.dumps(entry(id="")).encode(), "empty_field"),
    (json.dumps({k: v for k, v in entry().items() if k != "summary"}).encode(), "missing_field"),
    (json.dumps(entry(severity="critical")).encode(), "bad_severity"),
    (json.dumps(entry(ts="01/03/2026")).encode(), "bad_timestamp"),
    (json.dumps(entry(summary="s" * 20_000)).encode(), "oversize_summary"),
    (json.dumps(entry(payload={"b": "x" * 70_000})).encode(), "oversize_payload"),
    (json.dumps(entry(payload=[1])).encode(), "payload_not_object"),
    (b'{"id": 1e999999}', "invalid_field"),
]


@pytest.mark.parametrize(("value", "reason"), GARBAGE)
def test_garbage_is_dead_lettered_with_original_bytes(value: bytes | None, reason: str) -> None:
    r = go(value)
    assert isinstance(r, DeadLetter)
    assert r.reason == reason, r.error
    rec = DlqRecord.from_json(r.value)
    assert rec.reason == reason and rec.error
    assert (rec.source.topic, rec.source.partition, rec.source.offset) == ("journal.entries", 3, 42)
    assert rec.raw_bytes() == (value or b"")
    if value is not None and reason != "not_utf8":
        assert rec.raw_text == value.decode()
    if reason == "not_utf8":
        assert rec.raw_text is None


def test_huge_record_dead_letter_fits_one_message() -> None:
    value = b"x" * 3_000_000
    r = go(value)
    assert isinstance(r, DeadLetter)
    assert len(r.value) <= MAX_DLQ_RECORD_BYTES
    rec = DlqRecord.from_json(r.value)
    assert rec.raw_text is None
    assert value.startswith(rec.raw_bytes()) and "truncated" in rec.error


def test_large_record_keeps_all_bytes_when_it_fits() -> None:
    value = b"\x00\xff" * 200_000  # 400 kB, not UTF-8
    rec = DlqRecord.from_json(go(value).value)
    assert base64.b64decode(rec.raw_b64) == value


def test_route_never_raises_on_odd_inputs() -> None:
    for value in (b"", bytearray(b"{}"), memoryview(b"[]"), b"\x00" * 10, "é".encode("utf-16")):
        assert isinstance(go(value), DeadLetter)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("entry_type", "label"),
    [
        ("peer.escalation", "peer.escalation"),
        ("keeper.decision", "keeper.decision"),
        ("exec.output_chunk", "exec.output_chunk"),
        ("network.dns", "network.*"),
        ("network.http.request", "network.*"),
        ("my.custom.type", "other"),
        ("x" * 128, "other"),
    ],
)
def test_type_label_is_bounded(entry_type: str, label: str) -> None:
    assert type_label(entry_type) == label
    assert label in METRIC_TYPE_LABELS


FAST_PATH_CASES: list[bytes] = [
    json.dumps(entry()).encode(),
    json.dumps(entry(entry_type="peer.escalation", payload={"a": [1, 2.5, "é", None]})).encode(),
    json.dumps(entry(entry_type="peer.escalation", payload=None)).encode(),
    json.dumps({k: v for k, v in entry(entry_type="peer.escalation").items() if k != "payload"}).encode(),
    json.dumps(entry(payload=["not", "an", "object"])).encode(),
    json.dumps(entry(payload="text")).encode(),
    json.dumps(entry(entry_type="peer.escalation", payload={"blob": "p" * 70_000})).encode(),  # oversize
    json.dumps(entry(entry_type="peer.escalation", payload={"blob": "p" * 65_000})).encode(),  # just under
    # numbers grow when re-encoded (1e15 -> 1000000000000000.0): just over the old fast path's raw size bound
    json.dumps(entry(entry_type="peer.escalation")).encode()[:-1]
    + b', "payload": {"n": ['
    + b",".join([b"1e15"] * 2_500)
    + b"]}}",
    # and big enough to exceed the payload limit once re-encoded, though small as raw bytes
    json.dumps(entry(entry_type="peer.escalation")).encode()[:-1]
    + b', "payload": {"n": ['
    + b",".join([b"1e15"] * 4_000)
    + b"]}}",
    # deep nesting inside the payload
    json.dumps(entry(entry_type="peer.escalation")).encode()[:-1]
    + b', "payload": {"d": '
    + b"[" * 900
    + b"]" * 900
    + b"}}",
    json.dumps(entry(entry_type="peer.escalation", summary="")).encode(),
    json.dumps(entry(entry_type="peer.escalation", summary="", payload=[1])).encode(),
]


@pytest.mark.parametrize("raw", FAST_PATH_CASES, ids=range(len(FAST_PATH_CASES)))
def test_forwarded_bytes_are_the_records_own_encoding(raw: bytes) -> None:
    """The gate writes exactly what the EmbeddableRecord Struct writes (it skips only the second validation),
    and the consumer's decoder reads it back to the same record."""
    r = route(raw, topic="t", partition=0, offset=1, now=NOW)
    try:
        entry = parse_entry(raw)
    except InvalidEntry as e:
        assert isinstance(r, DeadLetter) and r.reason == e.reason
        return
    assert isinstance(r, Forward)
    record = EmbeddableRecord.from_entry(entry, base_importance=0.9, accepted_at=NOW)
    assert r.value == record.to_json()
    assert EmbeddableRecord.from_json(r.value) == record


def test_payload_nested_too_deep_is_an_invalid_field_not_a_gate_error() -> None:
    ok = json.dumps(entry(payload={"d": _nest(MAX_DEPTH - 2)})).encode()  # entry, payload, then the arrays
    deep = json.dumps(entry(payload={"d": _nest(MAX_DEPTH - 1)})).encode()
    assert isinstance(go(ok), Forward)
    r = go(deep)
    assert isinstance(r, DeadLetter) and r.reason == "invalid_field" and r.error.startswith("payload: nests deeper")
    refs = json.dumps(entry(refs={"x": _nest(MAX_DEPTH - 1)})).encode()
    r = go(refs)
    assert isinstance(r, DeadLetter) and r.reason == "invalid_field" and r.error.startswith("refs: nests deeper")


def _nest(levels: int) -> list[Any]:
    """`levels` arrays, one inside the other."""
    v: list[Any] = []
    for _ in range(levels - 1):
        v = [v]
    return v
