"""`episodic health --workspace W [--crew C]`: the latest memory-health snapshot of a running service, with
its band, the five metrics, a sparkline of the score over the last days and a table of them.

`--now` asks the service to compute a snapshot first (`POST /v1/admin/run/health`: an admin token when auth
is on). `--json` prints the service's answer. URL and token as `episodic recall` (--url, else EPISODIC_URL;
--token, else EPISODIC_TOKEN); the calls are `episodic_client.MemoryClient`'s. Exit codes: 0 ok, 1 the service
refused (no snapshot yet: 404, its message printed), 2 usage, 3 the service cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date, timedelta
from typing import Any

import httpx

from episodic_client import MemoryClient
from episodic_client.models import MAX_HEALTH_DAYS
from stack.commands.recall import call_service

METRICS = ("freshness", "coverage", "coherence", "efficiency", "reachability")
SPARKS = "▁▂▃▄▅▆▇█"
COLORS = {"red": "\033[31m", "yellow": "\033[33m", "green": "\033[32m"}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="episodic health", description="Print the memory-health snapshot")
    ap.add_argument("--workspace", "-w", required=True)
    ap.add_argument("--crew", "-c", help="a crew of the workspace (default: the whole workspace)")
    ap.add_argument("--days", type=int, default=14, help="history shown (default 14)")
    ap.add_argument("--now", action="store_true", help="compute a snapshot first (admin)")
    ap.add_argument("--json", action="store_true", help="print the JSON answer")
    ap.add_argument("--no-color", action="store_true", help="no colour for the band (default: colour on a terminal)")
    ap.add_argument("--url", default=None, help="service URL (default: EPISODIC_URL or local)")
    ap.add_argument("--token", default=None, help="bearer token (default: EPISODIC_TOKEN)")
    ap.add_argument("--timeout", type=float, default=60.0)
    return ap


def _num(v: Any, width: int = 6) -> str:
    return f"{v:>{width}.1f}" if isinstance(v, (int, float)) else f"{'n/a':>{width}}"


def sparkline(history: list[dict[str, Any]], days: int, today: date) -> str:
    """One character per day, oldest first: the score on a 0–100 scale, `·` for a day without a snapshot."""
    by_day = {str(h.get("date")): float(h.get("score", 0.0)) for h in history}
    out = []
    for i in range(days - 1, -1, -1):
        score = by_day.get((today - timedelta(days=i)).isoformat())
        out.append("·" if score is None else SPARKS[min(len(SPARKS) - 1, int(score / 100 * len(SPARKS)))])
    return "".join(out)


def format_snapshot(snap: dict[str, Any], *, color: bool = False, days: int = 14) -> str:
    band = str(snap.get("band", "?"))
    shown = f"{COLORS[band]}{band.upper()}\033[0m" if color and band in COLORS else band.upper()
    scope = f"workspace {snap.get('workspace_id')}" + (f" · crew {snap['crew_id']}" if snap.get("crew_id") else "")
    inputs = snap.get("inputs") or {}
    metrics = snap.get("metrics") or {}
    why = {
        "freshness": "no memories",
        "coverage": "no accepted entries",
        "coherence": "fewer than 2 memories with a dense vector",
        "efficiency": f"no recall hits in the last {inputs.get('efficiency_window_days', '?')} days",
        "reachability": "no memories",
    }
    lines = [
        f"memory health · {scope} · {snap.get('date')} ({snap.get('trigger')}, computed {snap.get('computed_at')})",
        f"score {_num(snap.get('score'), 5).strip()}  {shown}   (red < 50, yellow 50–75, green ≥ 75)",
    ]
    for m in METRICS:
        v = metrics.get(m)
        bar = "█" * round(v / 5) if isinstance(v, (int, float)) else f"  ({why[m]})"
        lines.append(f"  {m:<13}{_num(v)}  {bar}")
    lines.append(
        f"  memories {inputs.get('memories')}, dense {inputs.get('dense')}, accepted entries "
        f"{inputs.get('accepted')} (covered {inputs.get('covered')}), median age {inputs.get('median_age_days')} days"
    )
    history = snap.get("history") or []
    if history:
        today = date.fromisoformat(str(snap.get("date")))
        lines.append(f"last {days} days  {sparkline(history, days, today)}  (score, oldest first)")
        lines.append(f"  {'date':<10}  {'score':>6}  {'band':<6}" + "".join(f"  {m[:5]:>6}" for m in METRICS))
        for h in history:
            hm = h.get("metrics") or {}
            lines.append(
                f"  {h.get('date')!s:<10}  {_num(h.get('score'))}  {h.get('band')!s:<6}"
                + "".join(f"  {_num(hm.get(m))}" for m in METRICS)
            )
    return "\n".join(lines)


def main(argv: list[str], *, transport: httpx.BaseTransport | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= args.days <= MAX_HEALTH_DAYS:
        print(f"episodic health: --days must be 1..{MAX_HEALTH_DAYS}", file=sys.stderr)
        return 2

    def work(client: MemoryClient) -> int:
        if args.now:
            client.run_health(args.workspace)
        data = client.health(args.workspace, args.crew, days=args.days)
        if args.json:
            print(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            color = sys.stdout.isatty() and not args.no_color
            print(format_snapshot(data, color=color, days=args.days))
        return 0

    return call_service("health", args, transport, work)
