"""`episodic recall "query" --workspace W --agent A [...]`: query a running recall service.

The recall filters (SPEC §11) are flags: --since / --until (RFC 3339), --type (repeatable),
--min-severity, --run, --exclude-run; --as-of (RFC 3339) is when the question is asked, the instant its relative
times ("two weeks ago") are read from.

Prints a readable table by default, the raw JSON response with --json, the rendered block with --render.
URL: --url, else EPISODIC_URL (or EPISODIC_RECALL_URL), else http://<EPISODIC_HTTP_HOST>:<EPISODIC_HTTP_PORT>.
Token: --token, else EPISODIC_TOKEN. Exit codes: 0 ok, 1 the service refused (4xx/5xx, its `error`
printed), 2 usage (a bad argument names the field), 3 the service cannot be reached. The HTTP calls are
`episodic_client.MemoryClient`'s (typed, with retries on 503 and connection errors).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import ValidationError

from episodic.kernel.settings import Settings
from episodic.retrieval.render import relative_age
from episodic_client import ClientConfigError, MemoryClient, RequestRefused, ServiceUnreachable
from episodic_client.models import RecallRequest, RenderRequest


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="episodic recall", description="Query a running recall service")
    ap.add_argument("query")
    ap.add_argument("--workspace", "-w", required=True)
    ap.add_argument("--agent", "-a")
    ap.add_argument("--crew", "-c")
    ap.add_argument("--scope", choices=("own", "crew_shared"), default="own")
    ap.add_argument("--k", "-k", type=int, default=5)
    ap.add_argument("--mode", choices=("hybrid", "dense", "sparse"), default="hybrid")
    ap.add_argument("--walk", type=int, choices=(0, 1), default=0, help="walk_depth")
    ap.add_argument("--since", help="only memories with ts >= this (RFC 3339)")
    ap.add_argument("--until", help="only memories with ts < this (RFC 3339)")
    ap.add_argument("--type", action="append", dest="types", metavar="ENTRY_TYPE", help="only this type (repeatable)")
    ap.add_argument("--min-severity", choices=("debug", "info", "warn", "error"))
    ap.add_argument("--run", help="only this run (recall; with --render: the run of a pending nudge)")
    ap.add_argument("--exclude-run", help="leave this run out")
    ap.add_argument("--as-of", help="read the query's relative times from this instant (RFC 3339), not now")
    ap.add_argument("--json", action="store_true", help="print the JSON response")
    ap.add_argument("--render", action="store_true", help="print the <recalled-memory> block instead")
    ap.add_argument("--max-chars", type=int, help="render budget in characters")
    ap.add_argument("--url", default=None, help="service URL (default: EPISODIC_URL or local)")
    ap.add_argument("--token", default=None, help="bearer token (default: EPISODIC_TOKEN)")
    ap.add_argument("--timeout", type=float, default=10.0)
    return ap


def clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


Column = tuple[str, int, str]  # title, width, alignment ("<" or ">")


def text_table(columns: list[Column], rows: list[list[str]], *, width: int, last: str = "summary") -> str:
    """Fixed-width columns, then `last`, which takes the room the terminal has left (at least 20)."""
    head = " ".join(f"{title:{align}{w}}" for title, w, align in columns) + f" {last}"
    fixed = len(head) - len(last)
    room = max(20, width - fixed)
    lines = [head, "-" * min(width, fixed + room)]
    for *cells, tail in rows:
        lines.append(
            " ".join(f"{clip(c, w):{align}{w}}" for c, (_, w, align) in zip(cells, columns, strict=True))
            + f" {clip(tail, room)}"
        )
    return "\n".join(lines)


HIT_COLUMNS: list[Column] = [("#", 2, ">"), ("score", 8, ">"), ("age", 16, "<"), ("type", 24, "<"), ("sev", 5, "<"),
                             ("agent", 14, "<")]  # fmt: skip


def format_table(hits: list[dict[str, Any]], *, width: int = 120) -> str:
    """A fixed-width table of hits: rank, score, age, type/severity, agent, summary."""
    if not hits:
        return "(no hits)"
    rows = [
        [
            str(n),
            f"{h.get('score', 0.0):.4f}",
            relative_age(h.get("age_seconds", 0.0)),
            str(h.get("entry_type", "")),
            str(h.get("severity", "")),
            str(h.get("agent_id") or "-"),
            str(h.get("summary", "")),
        ]
        for n, h in enumerate(hits, 1)
    ]
    return text_table(HIT_COLUMNS, rows, width=width)


def build_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workspace_id": args.workspace,
        "scope": args.scope,
        "query": args.query,
        "k": args.k,
        "mode": args.mode,
        "walk_depth": args.walk,
    }
    if args.agent:
        body["agent_id"] = args.agent
    if args.crew:
        body["crew_id"] = args.crew
    if args.render and args.max_chars:
        body["max_chars"] = args.max_chars
    filters = {"since": args.since, "until": args.until, "entry_types": args.types, "min_severity": args.min_severity,
               "run_id": args.run, "exclude_run_id": args.exclude_run, "as_of": args.as_of}  # fmt: skip
    body.update({k: v for k, v in filters.items() if v})
    return body


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc']) or 'request'}: {str(err['msg']).removeprefix('Value error, ')}"


def call_service(
    name: str, args: argparse.Namespace, transport: httpx.BaseTransport | None, work: Callable[[MemoryClient], int]
) -> int:
    """`work(client)` against the service named by --url / --token (or the settings: EPISODIC_URL,
    EPISODIC_TOKEN, ...), with the exit statuses of the module doc for a refusal (1) and an unreachable
    service (3)."""
    kw = MemoryClient.settings_kwargs(Settings())
    kw.update(timeout=args.timeout, transport=transport)
    if args.url:
        kw["url"] = args.url
    if args.token:
        kw["token"] = args.token
    try:
        with MemoryClient(**kw) as client:
            return work(client)
    except ServiceUnreachable as e:
        print(f"episodic {name}: {e}. Is `episodic up` running?", file=sys.stderr)
        return 3
    except RequestRefused as e:
        print(f"episodic {name}: {e}", file=sys.stderr)
        return 1
    except ClientConfigError as e:  # an argument the client refuses before sending (it names the field)
        print(f"episodic {name}: {e}", file=sys.stderr)
        return 2


def main(argv: list[str], *, transport: httpx.BaseTransport | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        request = (RenderRequest if args.render else RecallRequest).model_validate(build_body(args))
    except ValidationError as e:
        print(f"episodic recall: {_first_error(e)}", file=sys.stderr)
        return 2
    return call_service("recall", args, transport, lambda client: _answer(args, request, client))


def _answer(args: argparse.Namespace, request: RecallRequest, client: MemoryClient) -> int:
    answer = client.render(request) if isinstance(request, RenderRequest) else client.recall(request)
    data = answer.model_dump(mode="json")
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif args.render:
        print(data.get("text", ""))
    else:
        if data.get("degraded"):
            print(
                "note: degraded (answered without the dense leg, or some memories still wait for theirs)",
                file=sys.stderr,
            )
        width = shutil.get_terminal_size((120, 24)).columns
        print(format_table(data.get("hits", []), width=width))
    return 0
