"""`episodic mcp`: the memory as MCP tools for agents, over stdio (default) or streamable HTTP.

    EPISODIC_URL=http://127.0.0.1:8080 EPISODIC_WORKSPACE_ID=acme EPISODIC_AGENT_ID=planner episodic mcp
    episodic mcp --transport http --port 8765          # MCP endpoint: http://127.0.0.1:8765/mcp

Identity: EPISODIC_WORKSPACE_ID, EPISODIC_AGENT_ID, EPISODIC_CREW_ID, EPISODIC_ROLE (agent | lead), else
what EPISODIC_TOKEN (or, over HTTP, the caller's own bearer token) is bound to. Writes: `POST /v1/journal`
of the recall service (default), or `--writes kafka` to EPISODIC_KAFKA_BOOTSTRAP. Over HTTP the server
binds to loopback; beyond it, it refuses to lend its own EPISODIC_TOKEN to whoever connects (callers bring
their own tokens) unless --insecure. Logs go to stderr (stdout is the protocol on stdio).
Exit status: 0 stopped, 2 bad configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from episodic.client import AsyncMemoryClient
from episodic.kernel.auth import is_loopback
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from stack.mcp_server import MemoryTools, build_server
from stack.mcp_writers import HttpWriter, KafkaWriter, Writer
from stack.runtime import setup_logging

log = logging.getLogger("episodic.mcp")

DEFAULT_PORT = 8765


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="episodic mcp", description="serve the memory as MCP tools")
    ap.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    ap.add_argument("--host", default="127.0.0.1", help="HTTP transport bind address (default %(default)s)")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP transport port (default %(default)s)")
    ap.add_argument("--path", default="/mcp", help="HTTP transport endpoint path (default %(default)s)")
    ap.add_argument("--url", default=None, help="recall service URL (default: EPISODIC_URL or local)")
    ap.add_argument(
        "--writes",
        choices=("http", "kafka"),
        default="http",
        help="remember via POST /v1/journal (default) or straight to EPISODIC_KAFKA_BOOTSTRAP",
    )
    ap.add_argument("--insecure", action="store_true", help="serve HTTP beyond loopback with the server's token")
    ap.add_argument("--log-level", default="WARNING")
    return ap


def preflight(args: argparse.Namespace, settings: Settings) -> str | None:
    if args.writes == "kafka" and not settings.kafka_bootstrap:
        return "--writes kafka needs EPISODIC_KAFKA_BOOTSTRAP"
    if args.transport == "http" and not is_loopback(args.host) and settings.token is not None and not args.insecure:
        return (
            f"refusing to serve MCP on {args.host!r} with this server's EPISODIC_TOKEN: anyone who can connect "
            "would act with it. Unset EPISODIC_TOKEN (callers send their own bearer tokens), bind to 127.0.0.1, "
            "or pass --insecure on a trusted network."
        )
    return None


async def serve(args: argparse.Namespace, tools: MemoryTools, writer: Writer) -> None:
    server = build_server(tools)
    try:
        if args.transport == "stdio":
            await server.run_stdio_async()
            return
        import uvicorn

        app = server.streamable_http_app(streamable_http_path=args.path, host=args.host)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False)
        log.warning("MCP over streamable HTTP at http://%s:%d%s", args.host, args.port, args.path)
        await uvicorn.Server(config).serve()
    finally:
        await tools.client.aclose()
        if isinstance(writer, KafkaWriter):
            await writer.close()


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    settings = Settings()
    problem = preflight(args, settings)
    if problem:
        print(f"episodic mcp: {problem}", file=sys.stderr)
        return 2
    client = AsyncMemoryClient.from_settings(settings, **({"url": args.url} if args.url else {}))
    writer: Writer = (
        KafkaWriter(str(settings.kafka_bootstrap), kafka_options(settings)) if args.writes == "kafka" else HttpWriter()
    )
    tools = MemoryTools(client, writer, caller_tokens=args.transport == "http")
    ident = client.identity
    log.info(
        "memory at %s as workspace=%s agent=%s crew=%s (scope %s); writes via %s",
        client.url, ident.workspace_id or "<from token>", ident.agent_id or "<from token>", ident.crew_id,
        ident.scope, writer.via,
    )  # fmt: skip
    try:
        asyncio.run(serve(args, tools, writer))
    except KeyboardInterrupt:
        pass
    return 0
