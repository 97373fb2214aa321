"""`episodic mcp`: the memory as MCP tools for agents, over stdio (default) or streamable HTTP.

    EPISODIC_URL=http://127.0.0.1:8080 EPISODIC_WORKSPACE_ID=acme EPISODIC_AGENT_ID=planner episodic mcp
    episodic mcp --transport http --port 8765          # MCP endpoint: http://127.0.0.1:8765/mcp

The client distribution's `episodic-mcp` (`episodic_client.mcp.cli`: identity, transports, the loopback
rule) plus what needs the engine: `--writes kafka` (straight to EPISODIC_KAFKA_BOOTSTRAP, after the gate's
parser; `stack.mcp_writers.KafkaWriter`) and `remember`'s base importance from the embedding policy.
Exit status: 0 stopped, 2 bad configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from episodic.domain.policy import decide
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from episodic_client import AsyncMemoryClient
from episodic_client.mcp import cli
from episodic_client.mcp.tools import HttpWriter, MemoryTools, Writer
from stack.mcp_writers import KafkaWriter
from stack.runtime import setup_logging

DEFAULT_PORT = cli.DEFAULT_PORT


def _parser() -> argparse.ArgumentParser:
    ap = cli.parser(prog="episodic mcp")
    ap.add_argument(
        "--writes",
        choices=("http", "kafka"),
        default="http",
        help="remember via POST /v1/journal (default) or straight to EPISODIC_KAFKA_BOOTSTRAP",
    )
    return ap


def preflight(args: argparse.Namespace, settings: Settings) -> str | None:
    if args.writes == "kafka" and not settings.kafka_bootstrap:
        return "--writes kafka needs EPISODIC_KAFKA_BOOTSTRAP"
    return cli.preflight(args, settings)


def importance(entry_type: str, severity: str) -> float:
    """An explicit `remember` is always embedded (refs.episodic): its base importance as the gate gives it."""
    return float(decide(entry_type, severity, forced=True).base_importance or 0.0)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    settings = Settings()
    problem = preflight(args, settings)
    if problem:
        print(f"episodic mcp: {problem}", file=sys.stderr)
        return 2
    client = AsyncMemoryClient.from_settings(settings, **({"url": args.url} if args.url else {}))
    kafka = KafkaWriter(str(settings.kafka_bootstrap), kafka_options(settings)) if args.writes == "kafka" else None
    writer: Writer = kafka or HttpWriter()
    tools = MemoryTools(
        client, writer, caller_tokens=args.transport == "http", importance=importance, require_token=cli.exposed(args)
    )
    cli.describe(tools)
    cli.warn_insecure(args)
    try:
        return asyncio.run(cli.serve(args, tools, on_close=kafka.close if kafka is not None else None))
    except KeyboardInterrupt:
        return 0
