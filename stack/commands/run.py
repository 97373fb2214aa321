"""`episodic run ROLE`: one role of the role table (`stack.roles.ROLES`) in this process (distributed mode).

Every role runs against a shared Kafka (EPISODIC_KAFKA_BOOTSTRAP; the embedded broker is `episodic up`'s
alone) and, for the roles that use the store, a Qdrant server (EPISODIC_QDRANT_URL): Qdrant Edge is one
process per store directory, so without a server each such process needs its own EPISODIC_DATA_DIR.
Each process answers `/metrics` and `/healthz` on EPISODIC_HTTP_HOST:EPISODIC_HTTP_PORT (the recall
service on its own routes, every other role through `stack.ops_http`); port 0 picks a free one (logged).
Processes of one role with the same EPISODIC_CONSUMER_GROUP_PREFIX join one consumer group and share the
partitions; when one dies the group rebalances and the others take its partitions over from the last
committed offsets (at-least-once).

`episodic embedder`, `episodic linker`, `episodic importance` and `episodic serve` are the older names of
`episodic run embedder|linker|importance|http`; `episodic gate` keeps its topic options for tests and
benchmarks. Exit status: 0 after a clean stop, 2 when it cannot start, 3 when Kafka stays unreachable,
4 when the gate crashes, 1 when another role fails.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from episodic.kernel.settings import Settings
from stack import heap
from stack.roles import ROLES, HttpRole
from stack.runtime import run_stack, setup_logging

log = logging.getLogger("episodic")

ALIASES: dict[str, str] = {"recall": HttpRole.name, "serve": HttpRole.name}  # the recall service's other names


def role_names() -> list[str]:
    """Every role the table has (the table grows: the verb takes whatever it lists), then the aliases."""
    return [*ROLES, *(a for a in ALIASES if a not in ROLES)]


def resolve_role(name: str) -> str:
    """The table's name for `name` (an alias is mapped); raises ValueError naming the known roles."""
    role = ALIASES.get(name, name)
    if role not in ROLES:
        raise ValueError(f"unknown role {name!r}: the roles are {', '.join(role_names())}")
    return role


def parser(prog: str = "episodic run", *, with_role: bool = True) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0] if __doc__ else None)
    if with_role:
        ap.add_argument("role", metavar="ROLE", help=f"one of: {', '.join(role_names())}")
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--data-dir", type=Path, help="overrides EPISODIC_DATA_DIR")
    ap.add_argument("--host", dest="http_host", help="/metrics, /healthz (and the recall API) bind address")
    ap.add_argument("--port", "--http-port", dest="http_port", type=int, help="overrides EPISODIC_HTTP_PORT")
    ap.add_argument("--tokens-file", type=Path, help="bearer tokens file (the recall service)")
    ap.add_argument(
        "--insecure", action="store_true", help="allow the recall service beyond loopback without a tokens file"
    )
    return ap


def settings_from(args: argparse.Namespace, base: Settings | None = None) -> Settings:
    over: dict[str, Any] = {}
    for field in ("data_dir", "http_host", "http_port", "tokens_file"):
        value = getattr(args, field, None)
        if value is not None:
            over[field] = value
    return base.model_copy(update=over) if base is not None else Settings(**over)


def preflight(role: str, settings: Settings, *, insecure: bool, prog: str = "") -> str | None:
    """Refusals before any IO but the tokens file: an error message, or None."""
    prog = prog or f"episodic run {role}"
    if role == HttpRole.name:
        from episodic.kernel.auth import AuthConfigError, load_tokens
        from recall.app import InsecureBind, check_bind  # lazily: the other roles never import FastAPI

        try:
            tokens = load_tokens(settings.tokens_file)
            check_bind(settings.http_host, tokens_configured=tokens is not None, insecure=insecure)
        except (AuthConfigError, InsecureBind) as e:
            return str(e)
    if settings.embedded_broker:
        return f"`{prog}` runs one role against a shared Kafka: set EPISODIC_KAFKA_BOOTSTRAP"
    return None


def run_role(role: str, args: argparse.Namespace, prog: str = "") -> int:
    """One role alone against the shared Kafka; returns the exit status."""
    prog = prog or f"episodic run {role}"
    setup_logging(args.log_level)
    settings = settings_from(args)
    problem = preflight(role, settings, insecure=args.insecure, prog=prog)
    if problem:
        log.error("%s", problem)
        print(f"{prog}: {problem}", file=sys.stderr)
        return 2
    if role == HttpRole.name and args.insecure:
        log.warning("--insecure: serving on %s without requiring tokens", settings.http_host)
    if ROLES[role].needs_store and settings.qdrant_url is None:
        log.warning(
            "no EPISODIC_QDRANT_URL: the %s uses the embedded Qdrant Edge store under %s, which no other "
            "process may open at the same time",
            role,
            settings.data_dir,
        )
    heap.freeze_when_started()  # this process is the stack's own (stack.heap)
    return asyncio.run(run_stack(settings, (role,), insecure=args.insecure))


def main(argv: list[str]) -> int:
    """`episodic run ROLE`."""
    args = parser().parse_args(argv)
    try:
        role = resolve_role(args.role)
    except ValueError as e:
        print(f"episodic run: {e}", file=sys.stderr)
        return 2
    return run_role(role, args)


def alias(command: str, role: str) -> Callable[[list[str]], int]:
    """`episodic <command>`: an older name, the same as `episodic run <role>`."""

    def main_(argv: list[str]) -> int:
        prog = f"episodic {command}"
        return run_role(role, parser(prog, with_role=False).parse_args(argv), prog)

    main_.__doc__ = f"`episodic {command}`: `episodic run {role}`."
    return main_


embedder_main = alias("embedder", "embedder")
linker_main = alias("linker", "linker")
importance_main = alias("importance", "importance")
serve_main = alias("serve", HttpRole.name)
health_main = alias("health-agent", "health")
nudge_main = alias("nudge-agent", "nudge")
