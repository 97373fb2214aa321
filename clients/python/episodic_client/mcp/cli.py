"""`episodic-mcp`: the memory as MCP tools for agents, over stdio (default) or streamable HTTP.

    EPISODIC_URL=http://127.0.0.1:8080 EPISODIC_WORKSPACE_ID=acme EPISODIC_AGENT_ID=planner episodic-mcp
    episodic-mcp --transport http --port 8765          # MCP endpoint: http://127.0.0.1:8765/mcp

Identity: EPISODIC_WORKSPACE_ID, EPISODIC_AGENT_ID, EPISODIC_CREW_ID, EPISODIC_ROLE (agent | lead), else
what EPISODIC_TOKEN (or, over HTTP, the caller's own bearer token) is bound to. Writes: `POST /v1/journal`
of the recall service. Over HTTP the server binds to loopback. Beyond it (issue 29), unless --insecure, it
serves only authenticated callers end to end: it refuses to start with its own EPISODIC_TOKEN (anyone who
connects would act with it) or in front of a recall service that does not authenticate (no tokens file:
every caller is admin) or that it cannot reach to check, and every call must carry the caller's own bearer
token. Logs go to stderr (stdout is the protocol on stdio). Exit status: 0 stopped, 2 bad configuration.

The engine's `episodic mcp` (`stack/commands/mcp.py`) extends this parser, preflight and serve.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from episodic_client.client import AsyncMemoryClient
from episodic_client.errors import RequestRefused, ServiceUnreachable
from episodic_client.mcp.tools import HttpWriter, MemoryTools, build_server
from episodic_client.settings import ClientSettings, is_loopback

log = logging.getLogger("episodic.mcp")

DEFAULT_PORT = 8765


def parser(prog: str = "episodic-mcp") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="serve the memory as MCP tools")
    ap.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    ap.add_argument("--host", default="127.0.0.1", help="HTTP transport bind address (default %(default)s)")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP transport port (default %(default)s)")
    ap.add_argument("--path", default="/mcp", help="HTTP transport endpoint path (default %(default)s)")
    ap.add_argument("--url", default=None, help="recall service URL (default: EPISODIC_URL or local)")
    ap.add_argument(
        "--insecure",
        action="store_true",
        help="serve HTTP beyond loopback without authenticated callers end to end (a trusted network only)",
    )
    ap.add_argument("--log-level", default="WARNING")
    return ap


def preflight(args: argparse.Namespace, settings: ClientSettings) -> str | None:
    """Why the server must not start with these arguments and settings, or None."""
    if args.transport == "http" and not is_loopback(args.host) and settings.token is not None and not args.insecure:
        return (
            f"refusing to serve MCP on {args.host!r} with this server's EPISODIC_TOKEN: anyone who can connect "
            "would act with it. Unset EPISODIC_TOKEN (callers send their own bearer tokens), bind to 127.0.0.1, "
            "or pass --insecure on a trusted network."
        )
    return None


def exposed(args: argparse.Namespace) -> bool:
    """Served beyond loopback without --insecure: callers must be authenticated end to end."""
    return args.transport == "http" and not is_loopback(args.host) and not args.insecure


async def service_authenticates(client: AsyncMemoryClient) -> str | None:
    """Why the recall service behind `client` (asked without a token) cannot protect a server beyond
    loopback, or None when it authenticates its callers (401 without a token)."""
    try:
        who = await client.acting_as(token="").whoami()
    except RequestRefused as e:
        if e.status_code == 401:
            return None
        return f"the recall service answered HTTP {e.status_code} to GET /v1/whoami"
    except ServiceUnreachable:
        return "cannot reach the recall service to check that it authenticates its callers"
    if not who.auth:
        return "the recall service has no tokens file: every caller would be admin"
    return None


async def serve(
    args: argparse.Namespace, tools: MemoryTools, *, on_close: Callable[[], Awaitable[None]] | None = None
) -> int:
    """Run the MCP server on the transport `args` name until it stops; then close the client (and `on_close`).
    Beyond loopback it first checks that the recall service authenticates its callers (2 when not)."""
    server = build_server(tools)
    try:
        if exposed(args):
            problem = await service_authenticates(tools.client)
            if problem:
                print(
                    f"episodic mcp: refusing to serve MCP on {args.host!r}: {problem}. Give the recall service "
                    "a tokens file (EPISODIC_TOKENS_FILE), bind to 127.0.0.1, or pass --insecure on a trusted "
                    "network.",
                    file=sys.stderr,
                )
                return 2
        if args.transport == "stdio":
            await server.run_stdio_async()
            return 0
        import uvicorn

        app = server.streamable_http_app(streamable_http_path=args.path, host=args.host)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False)
        log.warning("MCP over streamable HTTP at http://%s:%d%s", args.host, args.port, args.path)
        await uvicorn.Server(config).serve()
        return 0
    finally:
        await tools.client.aclose()
        if on_close is not None:
            await on_close()


def warn_insecure(args: argparse.Namespace) -> None:
    if args.insecure and args.transport == "http" and not is_loopback(args.host):
        log.warning("MCP on %s with --insecure: callers are not required to authenticate", args.host)


def describe(tools: MemoryTools) -> None:
    ident = tools.client.identity
    log.info(
        "memory at %s as workspace=%s agent=%s crew=%s (scope %s); writes via %s",
        tools.client.url, ident.workspace_id or "<from token>", ident.agent_id or "<from token>", ident.crew_id,
        ident.scope, tools.writer.via,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = ClientSettings.from_env()
    except ValidationError as e:
        print(f"episodic-mcp: bad configuration: {e}", file=sys.stderr)
        return 2
    problem = preflight(args, settings)
    if problem:
        print(f"episodic-mcp: {problem}", file=sys.stderr)
        return 2
    client = AsyncMemoryClient.from_settings(settings, **({"url": args.url} if args.url else {}))
    tools = MemoryTools(client, HttpWriter(), caller_tokens=args.transport == "http", require_token=exposed(args))
    describe(tools)
    warn_insecure(args)
    try:
        return asyncio.run(serve(args, tools))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":  # pragma: no cover - `python -m episodic_client.mcp.cli`
    raise SystemExit(main())
