"""`episodic serve`: the recall HTTP service on its own (distributed mode).

It needs a shared Kafka (EPISODIC_KAFKA_BOOTSTRAP, for memory.referenced) and, when other roles run too,
a Qdrant server (EPISODIC_QDRANT_URL): Qdrant Edge is single-process. It refuses to bind beyond loopback
without a tokens file (EPISODIC_TOKENS_FILE or --tokens-file) unless --insecure is given.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from episodic.auth import AuthConfigError, load_tokens
from episodic.settings import Settings
from recall.app import InsecureBind, check_bind
from stack.roles import HttpRole
from stack.runtime import run_stack, setup_logging

log = logging.getLogger("episodic")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="episodic serve", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--host", help="bind address (overrides EPISODIC_HTTP_HOST, default 127.0.0.1)")
    ap.add_argument("--port", type=int, help="port (overrides EPISODIC_HTTP_PORT, default 8080)")
    ap.add_argument("--tokens-file", type=Path, help="bearer tokens file (overrides EPISODIC_TOKENS_FILE)")
    ap.add_argument("--data-dir", type=Path, help="overrides EPISODIC_DATA_DIR")
    ap.add_argument(
        "--insecure", action="store_true", help="allow binding beyond loopback without tokens (trusted networks)"
    )
    ap.add_argument("--log-level", default="INFO")
    return ap


def settings_from_args(args: argparse.Namespace, base: Settings | None = None) -> Settings:
    over: dict[str, Any] = {}
    if args.host is not None:
        over["http_host"] = args.host
    if args.port is not None:
        over["http_port"] = args.port
    if args.tokens_file is not None:
        over["tokens_file"] = args.tokens_file
    if args.data_dir is not None:
        over["data_dir"] = args.data_dir
    if base is None:
        return Settings(**over)
    return base.model_copy(update=over)


def preflight(settings: Settings, *, insecure: bool) -> str | None:
    """Start-up checks that need no IO beyond the tokens file: an error message, or None."""
    try:
        tokens = load_tokens(settings.tokens_file)
    except AuthConfigError as e:
        return str(e)
    try:
        check_bind(settings.http_host, tokens_configured=tokens is not None, insecure=insecure)
    except InsecureBind as e:
        return str(e)
    if settings.embedded_broker:
        return "`episodic serve` runs the recall service alone against a shared Kafka: set EPISODIC_KAFKA_BOOTSTRAP"
    return None


def main(argv: list[str]) -> int:
    """`episodic serve`; returns the exit status."""
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    settings = settings_from_args(args)
    problem = preflight(settings, insecure=args.insecure)
    if problem:
        print(f"episodic serve: {problem}", file=sys.stderr)
        return 2
    if settings.qdrant_url is None:
        log.warning(
            "no EPISODIC_QDRANT_URL: serving from the embedded Qdrant Edge store under %s, which no other "
            "process may open at the same time",
            settings.data_dir,
        )
    if args.insecure:
        log.warning("--insecure: serving on %s without requiring tokens", settings.http_host)
    return asyncio.run(run_stack(settings, (HttpRole.name,), insecure=args.insecure))
