"""The gate decides every input of the journal corpus exactly as it did before the schema moved to msgspec.

`tests/unit/data/journal_corpus.jsonl.gz` (built by `journal_corpus.py`) holds thousands of raw records and
what the gate did with each one before: forward (with the exact bytes written to journal.embeddable),
skip (with the policy's decision) or dead-letter (with the reason, and an error naming the field). The one
schema must reproduce every outcome: the same bytes, the same decision, the same reason, the same field.

Three documented exceptions, checked exactly rather than skipped:
- floats of 1e16 and more are written `1e16` where the old encoders (orjson, pydantic) wrote `1e+16`: the
  same number, one byte shorter (msgspec's float format);
- payloads and refs nested deeper than MAX_DEPTH: the old gate forwarded some of them and dead-lettered the
  others as `gate_error` (its serialisers gave up at 254 or 255 levels, depending on the path and on lists
  or objects); they are now refused as `invalid_field`, naming the field;
- NaN, Infinity and numbers beyond a double (1e400) in `payload` or `refs`: not JSON numbers (RFC 8259).
  The old gate forwarded them and wrote them as non-standard JSON (or, after msgspec, as `null`: not the
  entry that was sent); they are now refused as `invalid_field`, naming the path to the number.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from episodic.indexing.gating import DeadLetter, Forward, Skip, route
from schemas.journal import DLQ_REASONS, MAX_DEPTH, InvalidEntry, parse_entry
from tests.unit.journal_corpus import NOW, OFFSET, PARTITION, TOPIC, load, raw_of

CASES = load()
FIELD_REASONS = set(DLQ_REASONS) - {"not_utf8", "not_json", "not_object"}
_EXPONENT_PLUS = re.compile(rb"(?<=[0-9])e\+(?=[0-9])")

# Inputs whose outcome changed on purpose (see the module docstring), with the outcome they get now.
DEEPER_THAN_MAX = {
    **{
        f"payload nested {kind} {d}": "payload"
        for kind in ("lists", "objects")
        for d in (253, 254, 255, 256, 257, 300, 500)
    },
    "payload deep mixed 253": "payload",
    "refs nested extra 253": "refs",
    "refs nested extra 300": "refs",
    "test_gating fast path 10": "payload",
}


def _non_finite_at(case: dict[str, Any]) -> str | None:
    """The field (payload or refs) of an input the old gate forwarded that holds NaN or ±Infinity."""
    if case["outcome"] != "forward":
        return None
    obj = json.loads(raw_of(case))
    for field in ("payload", "refs"):
        stack = [obj.get(field)]
        while stack:
            v = stack.pop()
            if isinstance(v, float) and not math.isfinite(v):
                return field
            stack.extend(v.values() if isinstance(v, dict) else v if isinstance(v, list) else ())
    return None


NON_FINITE = {c["name"]: f for c in CASES if (f := _non_finite_at(c))}


def test_corpus_is_large_and_covers_every_outcome() -> None:
    assert len(CASES) > 5000
    seen = {c["outcome"] for c in CASES} | {c.get("reason") for c in CASES}
    assert {"forward", "skip", "dead_letter"} <= seen
    assert set(DLQ_REASONS) <= seen
    assert set(DEEPER_THAN_MAX) <= {c["name"] for c in CASES}
    assert {"payload NaN", "payload Infinity", "payload 1e400", "refs NaN extra"} <= set(NON_FINITE)


def _same_except_exponent_sign(old: bytes, new: bytes) -> bool:
    """True when `new` is `old` with `e+` written `e` in floats, and decodes to the very same values."""
    return _EXPONENT_PLUS.sub(b"e", old) == new and json.loads(old) == json.loads(new)


def _check(case: dict[str, Any]) -> None:
    raw = raw_of(case)
    got = route(raw, topic=TOPIC, partition=PARTITION, offset=OFFSET, now=NOW)
    name = case["name"]
    if name in DEEPER_THAN_MAX:
        assert isinstance(got, DeadLetter), (name, got)
        assert got.reason == "invalid_field", got
        assert got.error.startswith(f"{DEEPER_THAN_MAX[name]}: nests deeper than {MAX_DEPTH} levels"), got.error
        return
    if name in NON_FINITE:
        assert isinstance(got, DeadLetter), (name, got)
        assert got.reason == "invalid_field", got
        assert got.error.startswith(f"{NON_FINITE[name]}.") and "is not a JSON number" in got.error, got.error
        return
    if case["outcome"] == "forward":
        assert isinstance(got, Forward), (name, got)
        assert (got.key.decode(), got.decision, got.entry_id, got.entry_type) == (
            case["key"],
            case["decision"],
            case["entry_id"],
            case["entry_type"],
        ), name
        old = case["value"].encode()
        assert got.value == old or _same_except_exponent_sign(old, got.value), (name, old[:300], got.value[:300])
    elif case["outcome"] == "skip":
        assert isinstance(got, Skip), (name, got)
        assert (got.decision, got.entry_id, got.entry_type) == (case["decision"], case["entry_id"], case["entry_type"])
    else:
        assert isinstance(got, DeadLetter), (name, got)
        assert got.reason == case["reason"], (name, case["error"], got.error)
        if got.reason in FIELD_REASONS:  # the error names the same field (path) as before
            field = case["error"].split(":", 1)[0]
            assert got.error.split(":", 1)[0] == field, (name, case["error"], got.error)


@pytest.mark.parametrize("chunk", range(8))
def test_every_input_routes_as_before(chunk: int) -> None:
    failures = []
    for case in CASES[chunk::8]:
        try:
            _check(case)
        except AssertionError as e:
            failures.append(f"{case['name']}: {e}"[:500])
    assert not failures, f"{len(failures)} differ:\n" + "\n".join(failures[:30])


def test_exponent_sign_is_the_only_byte_difference() -> None:
    """The float format exception is narrow: count it, so that a wider change of bytes shows up here."""
    differ = 0
    for case in CASES:
        if case["outcome"] == "forward" and case["name"] not in DEEPER_THAN_MAX and case["name"] not in NON_FINITE:
            got = route(raw_of(case), topic=TOPIC, partition=PARTITION, offset=OFFSET, now=NOW)
            assert isinstance(got, Forward)
            differ += got.value != case["value"].encode()
    forwards = sum(c["outcome"] == "forward" for c in CASES)
    assert differ < forwards // 10, (differ, forwards)


def test_parse_entry_raises_nothing_but_invalid_entry() -> None:
    for case in CASES:
        try:
            parse_entry(raw_of(case))
        except InvalidEntry:
            pass
