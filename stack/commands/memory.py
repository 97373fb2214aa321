"""`episodic forget`, `episodic show`, `episodic ls`: the memory lifecycle against a running recall service.

    episodic forget --workspace W --id E [--id E2 ...]     # those memories (an alias id: its whole memory)
    episodic forget --workspace W --agent A | --run R       # every memory of an agent / a run
    episodic forget --workspace W --all --yes               # the whole workspace
    episodic forget --workspace W --status FORGET_ID        # where an earlier forget stands
    episodic show ENTRY_ID --workspace W [--json]
    episodic ls --workspace W [--agent A] [--run R] [--crew C] [--type T ...] [--limit N]
                [--cursor C | --every] [--json]

`forget` waits up to --wait seconds (default 10) for the forget to be applied. Exit statuses: 0 done, 1 the
service refused (its `error` printed), 2 usage, 3 the service cannot be reached, 4 queued but not applied
within --wait (poll it with --status). URL: --url, else EPISODIC_URL (or EPISODIC_RECALL_URL), else
http://<EPISODIC_HTTP_HOST>:<EPISODIC_HTTP_PORT>. Token: --token, else EPISODIC_TOKEN. The HTTP calls are
`episodic_client.MemoryClient`'s (`forget`, `delete`, `forget_status`, `get`, `list_page`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

import httpx

from episodic_client import MemoryClient
from episodic_client.models import MAX_FORGET_WAIT_S
from stack.commands.recall import Column, call_service, text_table

QUEUED = 4


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--workspace", "-w", required=True)
    ap.add_argument("--json", action="store_true", help="print the JSON response")
    ap.add_argument("--url", default=None, help="service URL (default: EPISODIC_URL or local)")
    ap.add_argument("--token", default=None, help="bearer token (default: EPISODIC_TOKEN)")
    ap.add_argument("--timeout", type=float, default=10.0)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


# -- forget -------------------------------------------------------------------------------------------------


def describe_forget(data: dict[str, Any]) -> str:
    fid, ws = data.get("forget_id"), data.get("workspace_id")
    if data.get("status") == "applied":
        r = data.get("removed") or {}
        return (
            f"forgot {r.get('memories', 0)} memories in {ws} ({r.get('entry_ids', 0)} ids with their aliases, "
            f"{r.get('edges', 0)} relations) [forget {fid}]"
        )
    if data.get("status") == "failed":
        return f"forget {fid} failed: {data.get('failure')}"
    return f"forget {fid} queued, not applied yet: episodic forget --workspace {ws} --status {fid}"


def forget_main(argv: list[str], *, transport: httpx.BaseTransport | None = None) -> int:
    ap = argparse.ArgumentParser(prog="episodic forget", description="Forget memories (an event, SPEC §11)")
    _common(ap)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--id", action="append", dest="ids", metavar="ENTRY_ID", help="an entry id (repeatable)")
    what.add_argument("--agent", help="every memory of this agent")
    what.add_argument("--run", help="every memory of this run")
    what.add_argument("--all", action="store_true", help="every memory of the workspace (needs --yes)")
    what.add_argument("--status", metavar="FORGET_ID", help="show where an earlier forget stands")
    ap.add_argument("--yes", action="store_true", help="confirm --all")
    ap.add_argument("--wait", type=float, default=10.0, help="seconds to wait for it to be applied (0..60)")
    args = ap.parse_args(argv)
    if args.all and not args.yes:
        ap.error("--all forgets the whole workspace: add --yes to confirm")
    if not 0 <= args.wait <= MAX_FORGET_WAIT_S:
        ap.error(f"--wait must be between 0 and {MAX_FORGET_WAIT_S:g} seconds")

    def work(client: MemoryClient) -> int:
        ws, wait = args.workspace, args.wait
        if args.status:
            answer = client.forget_status(args.status, workspace_id=ws)
        elif args.ids and len(args.ids) == 1:
            answer = client.delete(args.ids[0], workspace_id=ws, wait=wait)
        else:
            answer = client.forget(args.ids, agent_id=args.agent, run_id=args.run, all=args.all, workspace_id=ws,
                                   wait=wait)  # fmt: skip
        data = answer.model_dump(mode="json")
        print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else describe_forget(data))
        return {"applied": 0, "failed": 1}.get(answer.status, QUEUED)

    return call_service("forget", args, transport, work)


# -- show ---------------------------------------------------------------------------------------------------


def format_memory(m: dict[str, Any]) -> str:
    lines = [
        f"{m.get('entry_id')}"
        + (f"  (asked for alias {m['requested_id']})" if m.get("requested_id") != m.get("entry_id") else "")
    ]
    for key in ("workspace_id", "crew_id", "agent_id", "run_id", "ts", "entry_type", "severity", "priority"):
        lines.append(f"  {key:<19} {m.get(key) if m.get(key) is not None else '-'}")
    lines.append(
        f"  {'importance':<19} {m.get('importance_score')} (base {m.get('base_importance')}), "
        f"referenced {m.get('reference_count')}x, last {m.get('last_referenced_at') or 'never'}"
    )
    rv = m.get("review")
    if isinstance(rv, dict):  # how agents said it served (POST /v1/memory/review, issue 26)
        ratings = ", ".join(f"{k} {n}" for k, n in (rv.get("ratings") or {}).items())
        lines.append(
            f"  {'reviews':<19} {rv.get('count')} ({ratings}), last {rv.get('last_rating')} at "
            f"{rv.get('last_reviewed_at')}; stability {rv.get('stability')} days, difficulty {rv.get('difficulty')}, "
            f"retrievability {rv.get('retrievability')}"
        )
    else:
        lines.append(f"  {'reviews':<19} none")
    lines.append(f"  {'occurrences':<19} {m.get('occurrences')}; aliases: {', '.join(m.get('aliases') or []) or '-'}")
    vector = f"dense by {m.get('model')}" if m.get("has_dense") else "BM25 only (no dense vector yet)"
    lines.append(f"  {'vectors':<19} {vector}; indexed {m.get('indexed_at')}")
    for r in m.get("relations") or []:
        lines.append(f"  {'relation':<19} {r['src']} -{r['relation']} ({r['weight']:.2f})-> {r['dst']}")
    lines.append("  summary:")
    lines += [f"    {line}" for line in str(m.get("summary", "")).splitlines() or [""]]
    if m.get("payload"):
        lines.append(f"  payload: {json.dumps(m['payload'], ensure_ascii=False)[:2000]}")
    return "\n".join(lines)


def show_main(argv: list[str], *, transport: httpx.BaseTransport | None = None) -> int:
    ap = argparse.ArgumentParser(prog="episodic show", description="One memory, with its counters and relations")
    ap.add_argument("entry_id")
    _common(ap)
    args = ap.parse_args(argv)

    def work(client: MemoryClient) -> int:
        data = client.get(args.entry_id, workspace_id=args.workspace).model_dump(mode="json")
        print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else format_memory(data))
        return 0

    return call_service("show", args, transport, work)


# -- ls -----------------------------------------------------------------------------------------------------


LIST_COLUMNS: list[Column] = [("ts", 20, "<"), ("entry_id", 18, "<"), ("type", 22, "<"), ("sev", 5, "<"),
                              ("agent", 12, "<"), ("run", 10, "<")]  # fmt: skip
LISTED = ("ts", "entry_id", "entry_type", "severity", "agent_id", "run_id", "summary")


def format_listing(items: list[dict[str, Any]], *, width: int = 120) -> str:
    if not items:
        return "(no memories)"
    rows = [[str(m.get(k) if m.get(k) is not None else "-") for k in LISTED] for m in items]
    return text_table(LIST_COLUMNS, rows, width=width)


def ls_main(argv: list[str], *, transport: httpx.BaseTransport | None = None) -> int:
    ap = argparse.ArgumentParser(prog="episodic ls", description="A workspace's memories, newest first")
    _common(ap)
    ap.add_argument("--agent")
    ap.add_argument("--run")
    ap.add_argument("--crew")
    ap.add_argument("--type", action="append", dest="types", metavar="ENTRY_TYPE", help="repeatable")
    ap.add_argument("--limit", type=int, default=20, help="memories per page (1..100)")
    pages = ap.add_mutually_exclusive_group()
    pages.add_argument("--cursor", help="the next_cursor a previous page printed")
    pages.add_argument("--every", action="store_true", help="follow the cursor through every page")
    args = ap.parse_args(argv)

    def work(client: MemoryClient) -> int:
        selection = {"workspace_id": args.workspace, "agent_id": args.agent, "run_id": args.run,
                     "crew_id": args.crew, "entry_types": args.types}  # fmt: skip
        cursor, items = args.cursor, list[dict[str, Any]]()
        while True:
            page = client.list_page(cursor=cursor, limit=args.limit, **selection)
            items += [m.model_dump(mode="json") for m in page.memories]
            cursor = page.next_cursor
            if not (args.every and cursor):
                break
        if args.json:
            _print_json({"memories": items, "next_cursor": cursor})
        else:
            print(format_listing(items, width=shutil.get_terminal_size((120, 24)).columns))
            if cursor:
                print(f"more: episodic ls --workspace {args.workspace} ... --cursor {cursor}", file=sys.stderr)
        return 0

    return call_service("ls", args, transport, work)
