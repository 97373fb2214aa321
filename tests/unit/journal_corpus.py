"""The journal-entry corpus: thousands of raw `journal.entries` values and the gate's outcome for each.

(Over 400 lines: most of it is the list of hand-written cases, which reads best in one place.)

`tests/unit/data/journal_corpus.jsonl.gz` holds one JSON line per input: its bytes and what `route()` made
of it. The outcomes were recorded from the gate as it was before the entry schema moved to msgspec (the
pydantic model plus the hand-written fast path), so `test_journal_corpus.py` proves that the one schema
takes exactly the same decisions: accept or reject, the same dead-letter reason, the same forwarded bytes.

    python -m tests.unit.journal_corpus    # rebuild the inputs and record the current gate's outcomes

The committed file was recorded from the gate at commit a254ad5 (pydantic model + episodic/fastpath.py).
Rebuild only for an intended change of behaviour, and say in the commit which outcomes changed and why
(`test_journal_corpus.py` lists the changes made since that recording).

The inputs: the unit tests' own cases, hand-written edge cases (blank and whitespace-only strings, ids of
128/129 characters, summaries of 16384/16385 characters single- and multi-byte, payloads exactly at and one
byte over 64 KiB as the schema measures them, nesting up to and past the recursion limit, NaN, Infinity,
huge numbers, lone surrogates, duplicate keys, timestamp forms, refs shapes, priorities, extra fields, nulls,
bytes that are not UTF-8, tombstones) and generated ones (hypothesis, derandomized: mostly-valid entries
with fields replaced or left out, the same with bytes mutated, and arbitrary bytes).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.unit.journal_strategies import base_entry as base

CORPUS_PATH = Path(__file__).with_name("data") / "journal_corpus.jsonl.gz"
NOW = datetime(2026, 3, 1, 12, 0, 5, 123000, tzinfo=UTC)
TOPIC, PARTITION, OFFSET = "journal.entries", 1, 7

Case = tuple[str, bytes | None]


def enc(obj: Any, ascii_only: bool = False) -> bytes:
    text = json.dumps(obj, ensure_ascii=ascii_only, allow_nan=True)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: written escaped
        return json.dumps(obj, ensure_ascii=True, allow_nan=True).encode()


def splice(field: str, literal: bytes, **over: Any) -> bytes:
    """`base()` with `field` set to a raw JSON literal (NaN, 1e400, a lone surrogate escape, ...)."""
    head = enc(base(**{field: ...}, **over))
    return head[:-1] + b', "' + field.encode() + b'": ' + literal + b"}"


def payload_of_size(size: int, filler: str = "x", key: str = "b") -> dict[str, Any]:
    """A payload whose compact JSON (ensure_ascii=False) is exactly `size` UTF-8 bytes (filler of 1 char)."""
    unit = len(json.dumps(filler, ensure_ascii=False)[1:-1].encode())
    overhead = len(json.dumps({key: ""}, separators=(",", ":"), ensure_ascii=False).encode())
    n, rest = divmod(size - overhead, unit)
    value = filler * n + "a" * rest
    p = {key: value}
    assert len(json.dumps(p, separators=(",", ":"), ensure_ascii=False).encode()) == size
    return p


LIMIT = 64 * 1024


def hand_written() -> Iterator[Case]:
    yield "valid", enc(base())
    yield "valid minimal", enc(base(crew_id=..., run_id=..., payload=...))
    # -- strings: blank, whitespace, lengths ------------------------------------------------------------
    whitespace = [
        " ",
        "\t",
        "\n",
        "\r\n",
        "\u00a0",
        "\u3000",
        "\u2003",
        "\u2028",
        "\x1c\x1d\x1e\x1f",
        "\x0b\x0c",
        "\x85",
    ]
    not_whitespace = ["\u200b", "\ufeff", "\x00", "\x7f", "\u180e"]
    for f in ("id", "workspace_id", "agent_id", "entry_type", "summary", "crew_id", "run_id"):
        yield f"{f} empty", enc(base(**{f: ""}))
        for w in whitespace:
            yield f"{f} whitespace {w!r}", enc(base(**{f: w}))
            yield f"{f} whitespace-padded {w!r}", enc(base(**{f: w + "x" + w}))
        for w in not_whitespace:
            yield f"{f} invisible {w!r}", enc(base(**{f: w}))
        yield f"{f} null", enc(base(**{f: None}))
        yield f"{f} missing", enc(base(**{f: ...}))
        bad: Any
        for bad in (1, 1.5, True, [], {}, ["a"], 10**40):
            yield f"{f} type {bad!r}", enc(base(**{f: bad}))
        yield f"{f} NaN", splice(f, b"NaN")
        yield f"{f} lone surrogate", splice(f, b'"a\\ud800b"')
        yield f"{f} surrogate pair", splice(f, b'"\\ud83d\\ude80"')
    for f in ("id", "workspace_id", "agent_id", "entry_type", "crew_id", "run_id"):
        for n in (127, 128, 129, 1000):
            for ch in ("i", "é", "🚀", "\u3000"):
                yield f"{f} {n}x{ch!r}", enc(base(**{f: ch * n}))
        yield f"{f} 128 combining", enc(base(**{f: "e\u0301" * 64}))
        yield f"{f} 129 combining", enc(base(**{f: "e\u0301" * 64 + "x"}))
        yield f"{f} 128 ascii-escaped", enc(base(**{f: "é" * 128}), ascii_only=True)
        yield f"{f} 129 spaces", enc(base(**{f: " " * 129}))
    for n in (16_383, 16_384, 16_385, 20_000):
        for ch in ("s", "é", "€", "🚀", " ", "\u3000"):
            yield f"summary {n}x{ch!r}", enc(base(summary=ch * n))
    yield "summary 16384 emoji escaped", enc(base(summary="🚀" * 16_384), ascii_only=True)
    yield "summary 16385 emoji escaped", enc(base(summary="🚀" * 16_385), ascii_only=True)
    yield "summary 16384 spaces then x", enc(base(summary=" " * 16_383 + "x"))
    yield "summary 16385 spaces then x", enc(base(summary=" " * 16_384 + "x"))
    # -- severity, priority, entry types ----------------------------------------------------------------
    sev: Any
    pr: Any
    for sev in ("debug", "info", "warn", "error", "fatal", "INFO", "Warn", "", " warn", None, 1, True):
        yield f"severity {sev!r}", enc(base(severity=sev))
    for pr in ("pin", "high", "permanent", None, "PIN", "", "low", " pin", 1, True, [], {}):
        yield f"priority {pr!r}", enc(base(priority=pr))
        yield f"priority {pr!r} skip type", enc(base(priority=pr, entry_type="peer.conversation"))
    yield "priority missing", enc(base(priority=...))
    types = [
        "peer.escalation",
        "summary.generated",
        "memory.consolidated",
        "approval.denied",
        "eval.regression_detected",
        "keeper.decision",
        "mission.status_change",
        "peer.conversation",
        "exec.output_chunk",
        "container.metrics",
        "network.dns",
        "network.",
        "tool.call",
        "x" * 128,
    ]
    for et in types:
        for sev in ("debug", "info", "warn", "error"):
            yield f"policy {et[:30]} {sev}", enc(base(entry_type=et, severity=sev))
            yield f"policy {et[:30]} {sev} forced", enc(base(entry_type=et, severity=sev, refs={"episodic": True}))
            yield f"policy {et[:30]} {sev} pinned", enc(base(entry_type=et, severity=sev, priority="pin"))
    # -- ts -------------------------------------------------------------------------------------------------
    stamps = [
        "2026-03-01T12:00:00Z",
        "2026-03-01t12:00:00z",
        "2026-03-01 12:00:00Z",
        "2026-03-01T12:00:00z",
        "2026-03-01t12:00:00Z",
        "2026-03-01T12:00:00+00:00",
        "2026-03-01T12:00:00-00:00",
        "2026-03-01T12:00:00+05:30",
        "2026-03-01T12:00:00-08:00",
        "2026-03-01T12:00:00+23:59",
        "2026-03-01T12:00:00-23:59",
        "2026-03-01T12:00:00+24:00",
        "2026-03-01T12:00:00+0530",
        "2026-03-01T12:00:00+05",
        "2026-03-01T12:00:00+02:00:30",
        "2026-03-01T12:00:00+02:00:30.5",
        "2026-03-01T12:00:00",
        "2026-03-01T12:00:00.5",
        "2026-03-01T12:00",
        "2026-03-01T12:00Z",
        "2026-03-01T12:00+02:00",
        "2026-03-01T12Z",
        "2026-03-01",
        "2026-03-01Z",
        "20260301T120000Z",
        "2026-03-01T120000Z",
        "2026-03-01T12:00:00,5Z",
        "2026-03-01T12:00:00.Z",
        "2026-03-01T12:00:00.+00:00",
        *(f"2026-03-01T12:00:00.{'1234567890'[:n]}Z" for n in range(1, 11)),
        *(f"2026-03-01T12:00:00.{'9' * n}+05:30" for n in (1, 3, 6, 7, 9)),
        "2026-03-01T12:00:00.000000Z",
        "2026-03-01T12:00:00.100000Z",
        " 2026-03-01T12:00:00Z",
        "2026-03-01T12:00:00Z ",
        "\t2026-03-01T12:00:00Z\n",
        "\u30002026-03-01T12:00:00Z",
        "2026-03-01T12:00:00ZZ",
        "2026-03-01T12:00:00 Z",
        "2026-03-01T12:00:00zz",
        "2026-02-29T12:00:00Z",
        "2028-02-29T12:00:00Z",
        "2026-02-30T12:00:00Z",
        "2026-13-01T12:00:00Z",
        "2026-00-01T12:00:00Z",
        "2026-03-00T12:00:00Z",
        "2026-03-01T24:00:00Z",
        "2026-03-01T23:59:60Z",
        "2026-03-01T12:60:00Z",
        "0000-03-01T12:00:00Z",
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:00:00+01:00",
        "0001-01-01T00:00:00-05:00",
        "9999-12-31T23:59:59.999999Z",
        "9999-12-31T23:59:59.999999-05:00",
        "10000-01-01T00:00:00Z",
        "-2026-03-01T12:00:00Z",
        "+2026-03-01T12:00:00Z",
        "2026-W09-7T12:00:00Z",
        "2026-W097T12:00:00Z",
        "2026-060T12:00:00Z",
        "2026-03-01X12:00:00Z",
        "2026-03-01_12:00:00Z",
        "2026/03/01T12:00:00Z",
        "01/03/2026 12:00:00Z",
        "２０２６-03-01T12:00:00Z",
        "2026-03-01T１２:00:00Z",
        "2026-03-01T12:00:00\u00a0Z",
        "2026-03-01T12:00:00GMT",
        "2026-03-01T12:00:00UTC",
        "2026-03-01T12:00:00+00:00Z",
        "Sun, 01 Mar 2026 12:00:00 GMT",
        "yesterday",
        "",
        " ",
        "x" * 20,
        "2026-03-01T12:00:00.123456789012345678901234567890Z",
    ]
    for ts in stamps:
        yield f"ts {ts!r}", enc(base(ts=ts))
    for bad in (None, 1_700_000_000, 1.7e9, True, [], {}, ["2026-03-01T12:00:00Z"]):
        yield f"ts type {bad!r}", enc(base(ts=bad))
    yield "ts missing", enc(base(ts=...))
    yield "ts escaped", enc(base(ts="2026-03-01T12:00:00Z"), ascii_only=True)
    yield "ts unicode-escaped", splice("ts", b'"2026-03-01T12:00:00\\u005a"')
    # -- payload --------------------------------------------------------------------------------------------
    for size in (LIMIT - 1, LIMIT, LIMIT + 1):
        for filler in ("p", "é", "€", "🚀", "\x01", '"', "\\", "\n", "\u2028"):
            p = payload_of_size(size, filler)
            yield f"payload {size} of {filler!r}", enc(base(payload=p))
            if filler != "p":
                yield f"payload {size} of {filler!r} ascii-escaped", enc(base(payload=p), ascii_only=True)
    # numbers that grow or shrink when re-encoded, at the limit: '1e16' is written '1e+16' by the measure
    for n_floats, extra in ((13_107, 0), (13_107, 1), (13_106, 5), (13_106, 6)):
        body = b",".join([b"1e16"] * n_floats)
        pad = b'"' + b"a" * extra + b'"'
        yield f"payload floats {n_floats}+{extra}", splice("payload", b'{"n":[' + body + b"," + pad + b"]}")
    for lit in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e-400", b"1E400"):
        yield f"payload {lit.decode()}", splice("payload", b'{"v": ' + lit + b"}")
        # at the limit: NaN is written 'NaN' by the measure and 'null' by an encoder
        filler_len = LIMIT - len(b'{"v":,"b":""}') - len(lit)
        yield (
            f"payload {lit.decode()} at limit",
            splice("payload", b'{"v":' + lit + b',"b":"' + b"a" * filler_len + b'"}'),
        )
        yield (
            f"payload {lit.decode()} over limit",
            splice("payload", b'{"v":' + lit + b',"b":"' + b"a" * (filler_len + 1) + b'"}'),
        )
    for num in (2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, -(2**63), -(2**63) - 1, 10**40, -(10**40), 10**4000):
        yield f"payload int {str(num)[:12]}", splice("payload", b'{"v": ' + str(num).encode() + b"}")
    for lit in (b"1e308", b"1.7976931348623157e308", b"5e-324", b"1e-320", b"-0.0", b"0.1", b"1e16", b"1E16"):
        yield f"payload float {lit.decode()}", splice("payload", b'{"v": ' + lit + b"}")
    yield "payload float forms", splice("payload", b'{"a":1.0,"b":1e0,"c":100e-2,"d":0.000001,"e":1e-7,"f":123e20}')
    big_int_payload = b'{"v":' + str(10**30).encode() + b',"b":"' + b"a" * (LIMIT - 45) + b'"}'
    yield "payload big int near limit", splice("payload", big_int_payload)
    for lit in (b'"\\ud800"', b'"\\udfff"', b'"\\ud83d"', b'"x\\udc00y"', b'"\\ud83d\\ude80"', b'"\\u0000"'):
        yield f"payload string {lit.decode()}", splice("payload", b'{"v": ' + lit + b"}")
        yield f"payload key {lit.decode()}", splice("payload", b"{" + lit + b": 1}")
    yield "payload dup keys", splice("payload", b'{"a": 1, "a": 2, "b": [1, {"c": 1, "c": "x"}]}')
    for depth in (
        1,
        10,
        50,
        100,
        127,
        128,
        129,
        199,
        200,
        251,
        252,
        253,
        254,
        255,
        256,
        257,
        300,
        500,
        2_000,
        5_000,
        100_000,
    ):
        yield f"payload nested lists {depth}", splice("payload", b'{"d":' + b"[" * depth + b"]" * depth + b"}")
        objs = b'{"d":' * depth + b"1" + b"}" * depth
        yield f"payload nested objects {depth}", splice("payload", b'{"d":' + objs + b"}")
    yield "payload many small objects", enc(base(payload={"rows": [{"i": i} for i in range(400)]}))
    yield "payload many brackets in strings", enc(base(payload={"s": "[{" * 300}))
    for bad in ([], [1], "x", "", 1, 1.5, True, False):
        yield f"payload type {bad!r}", enc(base(payload=bad))
    yield "payload null", enc(base(payload=None))
    yield "payload missing", enc(base(payload=...))
    yield "payload empty", enc(base(payload={}))
    yield "payload unicode", enc(base(payload={"é": "🚀", "k\u2028": ["\x00", "\x1f", "\x7f"]}))
    # -- refs -----------------------------------------------------------------------------------------------
    refs_shapes: list[Any] = [
        None,
        {},
        [],
        [1],
        "x",
        1,
        True,
        {"episodic": True},
        {"episodic": False},
        {"episodic": None},
        {"episodic": 1},
        {"episodic": 0},
        {"episodic": "true"},
        {"episodic": []},
        {"supports": None},
        {"supports": []},
        {"supports": ["a", "b"]},
        {"supports": [""]},
        {"supports": [" "]},
        {"supports": ["a", ""]},
        {"supports": ["x" * 128]},
        {"supports": ["x" * 129]},
        {"supports": ["🚀" * 129]},
        {"supports": [1]},
        {"supports": [None]},
        {"supports": "a"},
        {"supports": {}},
        {"supports": ["a"], "episodic": True},
        {"episodic": "no", "supports": [1]},
        {"supports": [1], "episodic": "no"},
        {"x": 1},
        {"x": {"y": [1, 2, {"z": None}]}, "episodic": True},
        {"_private": 1, "model_config": 2, "__class__": 3, "__pydantic_extra__": 4, "__dict__": 5},
        {"model_fields": 1, "model_dump": 2, "forced": 3},
        {"": 1, " ": 2},
    ]
    for refs in refs_shapes:
        yield f"refs {json.dumps(refs)[:60]}", enc(base(refs=refs, entry_type="tool.call"))
    yield "refs missing", enc(base(refs=...))
    yield "refs NaN extra", splice("refs", b'{"episodic": true, "v": NaN}')
    yield "refs lone surrogate extra", splice("refs", b'{"episodic": true, "v": "\\ud800"}')
    yield "refs lone surrogate support", splice("refs", b'{"supports": ["\\ud800"]}')
    yield "refs huge int extra", splice("refs", b'{"v": 100000000000000000000000000000}')
    yield "refs 1e400 extra", splice("refs", b'{"v": 1e400}')
    yield "refs dup keys", splice("refs", b'{"episodic": false, "episodic": true}')
    yield "refs dup keys bad first", splice("refs", b'{"episodic": "x", "episodic": true}')
    for depth in (251, 252, 253, 300):
        yield f"refs nested extra {depth}", splice("refs", b'{"d":' + b"[" * depth + b"]" * depth + b"}")
    yield "payload deep list of objects", splice("payload", b'{"d":' + b'[{"a":' * 126 + b"1" + b"}]" * 126 + b"}")
    yield "payload deep mixed 253", splice("payload", b'{"d":' + b'[{"a":' * 126 + b"[]" + b"}]" * 126 + b"}")
    # -- extra fields, nulls, duplicate keys -------------------------------------------------------------
    yield "extra fields", enc(base(extra=1, another={"x": [1, 2]}, id_=5, ID="x", Id=None))
    yield "extra field NaN", splice("extra", b"NaN")
    yield "extra field 1e400", splice("extra", b"1e400")
    yield "extra field lone surrogate", splice("extra", b'"\\ud800"')
    yield "extra field huge int", splice("extra", str(10**50).encode())
    yield "extra field not utf-8", splice("extra", b'"\xff"')
    yield "extra field surrogate utf-8", splice("extra", b'"\xed\xa0\x80"')
    yield "extra field bad escape", splice("extra", b'"\\x"')
    yield "extra field control char", splice("extra", b'"a\x01b"')
    for depth in (100, 300, 2_000, 100_000):
        yield f"extra field nested {depth}", splice("extra", b"[" * depth + b"]" * depth)
    yield "all optionals null", enc(base(crew_id=None, run_id=None, refs=None, priority=None, payload=None))
    yield "all optionals missing", enc(base(crew_id=..., run_id=..., refs=..., priority=..., payload=...))
    yield "only required", enc({k: base()[k] for k in ("id", "workspace_id", "agent_id", "ts", "entry_type")})
    yield "empty object", b"{}"
    yield "everything wrong", enc({k: 1 for k in base()})
    yield "everything null", enc({k: None for k in base()})
    yield "missing and invalid", enc(base(id=..., severity="fatal"))
    yield "invalid then missing", enc(base(workspace_id=1, summary=...))
    yield "blank id bad severity", enc(base(id=" ", severity="fatal"))
    yield "bad ts bad payload", enc(base(ts="x", payload=[1]))
    yield "bad payload bad refs", enc(base(payload="x", refs=[]))
    yield "oversize summary blank id", enc(base(summary="s" * 16_385, id=""))
    yield "bad priority bad refs", enc(base(priority="x", refs={"episodic": 1}))
    yield "fields reversed", enc(dict(reversed(list(base(priority="pin", refs={"episodic": True}).items()))))
    dup = b'"workspace_id":"w","agent_id":"a","ts":"2026-03-01T12:00:00Z","entry_type":"peer.escalation",'
    dup += b'"severity":"info","summary":"s"'
    yield "dup id both valid", b'{"id":"a","id":"b",' + dup + b"}"
    yield "dup id bad then good", b'{"id":1,"id":"b",' + dup + b"}"
    yield "dup id good then bad", b'{"id":"a","id":1,' + dup + b"}"
    yield "dup id good then empty", b'{"id":"a","id":"",' + dup + b"}"
    yield "dup severity", b'{"id":"a",' + dup + b',"severity":"fatal"}'
    yield "dup payload", b'{"id":"a",' + dup + b',"payload":[1],"payload":{"a":1}}'
    yield "dup ts", b'{"id":"a",' + dup + b',"ts":"nope"}'
    # -- bytes and framing ----------------------------------------------------------------------------------
    good = enc(base())
    yield "tombstone", None
    yield "empty", b""
    yield "whitespace only", b" \n\t"
    yield "BOM", b"\xef\xbb\xbf" + good
    yield "leading and trailing whitespace", b" \r\n\t" + good + b"\n \t"
    yield "trailing garbage", good + b"x"
    yield "two objects", good + good
    yield "truncated", good[:-1]
    yield "not utf-8 in summary", enc(base(summary="caf\xe9")).replace("\xe9".encode(), b"\xe9")
    yield "latin-1", json.dumps(base(summary="café"), ensure_ascii=False).encode("latin-1")
    yield "utf-16", json.dumps(base()).encode("utf-16")
    yield "utf-8 surrogate bytes in summary", enc(base(summary="a")).replace(b'"a"', b'"\xed\xa0\x80"')
    yield "overlong utf-8 in summary", enc(base(summary="a")).replace(b'"a"', b'"\xc0\xaf"')
    yield "truncated multibyte in summary", enc(base(summary="a")).replace(b'"a"', b'"\xe2\x82"')
    yield "above U+10FFFF", enc(base(summary="a")).replace(b'"a"', b'"\xf4\x90\x80\x80"')
    yield "utf-8 in payload key", enc(base(payload={"a": 1})).replace(b'"a"', b'"\xff"')
    yield "raw control char in summary", enc(base(summary="a")).replace(b'"a"', b'"a\x01b"')
    yield "raw tab in summary", enc(base(summary="a")).replace(b'"a"', b'"a\tb"')
    yield "bad escape in summary", enc(base(summary="a")).replace(b'"a"', b'"a\\qb"')
    yield "single quotes", good.replace(b'"', b"'")
    yield "trailing comma", good[:-1] + b",}"
    yield "comment", b"// hi\n" + good
    for raw in (b"null", b"true", b"1", b"1.5", b'"s"', b"[]", b"[{}]", b"\x00", b"\xff", b"{", b"}", b"{}}", b"{,}"):
        yield f"bytes {raw!r}", raw
    yield "deep array", b"[" * 100_000 + b"]" * 100_000
    yield "deep object", b'{"a":' * 5_000 + b"1" + b"}" * 5_000
    yield "unclosed objects", b"{" * 50_000
    yield "huge number id", b'{"id": 1e999999}'
    yield "huge garbage", b"x" * 3_000_000


def existing_tests() -> Iterator[Case]:
    """The inputs of the unit tests that exercise the parser and the gate."""
    from tests.unit import test_gating, test_journal

    for name, valid in test_journal.VALID:
        yield f"test_journal valid {name}", valid
    for name, invalid, _reason, _word in test_journal.INVALID:
        yield f"test_journal invalid {name}", invalid
    for i, (garbage, _reason) in enumerate(test_gating.GARBAGE):
        yield f"test_gating garbage {i}", garbage
    for i, value in enumerate(test_gating.FAST_PATH_CASES):
        yield f"test_gating fast path {i}", value
    from tests.e2e import journal as e2e_journal

    exp = e2e_journal.build()
    for i, value in enumerate(exp.lines):
        yield f"e2e journal {i}", value
    from bench.bench_gate import make_records

    for i, (_key, value) in enumerate(make_records(600)):
        yield f"bench record {i}", value


def _drive(strategy: Any, n: int) -> list[Any]:
    """`n` derandomized examples of a hypothesis strategy."""
    from hypothesis import HealthCheck, given, settings

    out: list[Any] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    collect()
    return out


def generated() -> Iterator[Case]:
    from hypothesis import strategies as st

    from tests.unit.journal_strategies import entries, mutated

    for i, raw in enumerate(_drive(entries(), 3000)):
        yield f"hypothesis entry {i}", raw
    for i, raw in enumerate(_drive(mutated(), 1500)):
        yield f"hypothesis mutated {i}", raw
    for i, raw in enumerate(_drive(st.binary(max_size=64) | st.text(max_size=64).map(str.encode), 300)):
        yield f"hypothesis bytes {i}", raw


def inputs() -> list[Case]:
    seen: set[bytes | None] = set()
    out: list[Case] = []
    for name, raw in (*hand_written(), *existing_tests(), *generated()):
        if raw in seen:
            continue
        seen.add(raw)
        out.append((name, raw))
    return out


def outcome(raw: bytes | None) -> dict[str, Any]:
    """What the gate does with `raw`, in the fixture's terms."""
    from episodic.indexing.gating import DeadLetter, Forward, Skip, route

    r = route(raw, topic=TOPIC, partition=PARTITION, offset=OFFSET, now=NOW)
    if isinstance(r, Forward):
        return {
            "outcome": "forward",
            "key": r.key.decode(),
            "decision": r.decision,
            "entry_id": r.entry_id,
            "entry_type": r.entry_type,
            "value": r.value.decode(),
        }
    if isinstance(r, Skip):
        return {"outcome": "skip", "decision": r.decision, "entry_id": r.entry_id, "entry_type": r.entry_type}
    assert isinstance(r, DeadLetter)
    return {"outcome": "dead_letter", "reason": r.reason, "error": r.error}


def record(name: str, raw: bytes | None) -> dict[str, Any]:
    b64 = None if raw is None else base64.b64encode(raw).decode()
    return {"name": name, "raw_b64": b64, **outcome(raw)}


def raw_of(line: dict[str, Any]) -> bytes | None:
    b64 = line["raw_b64"]
    return None if b64 is None else base64.b64decode(b64)


def load() -> list[dict[str, Any]]:
    with gzip.open(CORPUS_PATH, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write(lines: list[dict[str, Any]]) -> None:
    CORPUS_PATH.parent.mkdir(exist_ok=True)
    text = "".join(json.dumps(line, ensure_ascii=True, sort_keys=False) + "\n" for line in lines)
    with open(CORPUS_PATH, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
        gz.write(text.encode())


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None).parse_args(argv)
    lines = [record(name, raw) for name, raw in inputs()]
    write(lines)
    counts: dict[str, int] = {}
    for line in lines:
        key = line["outcome"] if line["outcome"] != "dead_letter" else f"dead_letter {line['reason']}"
        counts[key] = counts.get(key, 0) + 1
    print(f"wrote {len(lines)} cases to {CORPUS_PATH}")
    for k, v in sorted(counts.items()):
        print(f"  {v:6d}  {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
