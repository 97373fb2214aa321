"""`episodic up`: the whole embedded stack in one process.

`episodic up` runs every role in the foreground (`episodic run ROLE`, in `stack.commands.run`, runs one
against a shared Kafka). Both run a `stack.runtime.Stack`; Ctrl-C (SIGINT) or SIGTERM drains it. Exit
status: 0 after a clean stop, 2 when it cannot start, 3 when the broker dies, 4 when the gate crashes, 1
when a role fails.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import Any

from episodic.kernel.settings import Settings
from stack import heap
from stack.roles import ALL_ROLES, LinkerRole
from stack.runtime import run_stack, setup_logging

log = logging.getLogger("episodic")


def parse(prog: str, argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--data-dir", type=Path, help="overrides EPISODIC_DATA_DIR")
    ap.add_argument("--http-port", type=int, help="overrides EPISODIC_HTTP_PORT")
    ap.add_argument(
        "--insecure", action="store_true", help="allow the recall service beyond loopback without a tokens file"
    )
    return ap.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    over: dict[str, Any] = {}
    if args.data_dir is not None:
        over["data_dir"] = args.data_dir
    if args.http_port is not None:
        over["http_port"] = args.http_port
    return Settings(**over)


def up_roles(settings: Settings) -> tuple[str, ...]:
    """Every role, but the linker when EPISODIC_LINKER_ENABLED is false."""
    return tuple(r for r in ALL_ROLES if settings.linker_enabled or r != LinkerRole.name)


def main(argv: list[str]) -> int:
    """`episodic up`."""
    args = parse("episodic up", argv)
    setup_logging(args.log_level)
    settings = settings_from(args)
    heap.freeze_when_started()  # this process is the stack's own (stack.heap)
    return asyncio.run(run_stack(settings, up_roles(settings), insecure=args.insecure))
