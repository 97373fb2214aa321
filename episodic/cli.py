"""The `episodic` command: up, produce, recall, doctor, and the single-stage roles for distributed mode."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

# subcommand -> "module:function" taking the parsed args (lazy imports keep `--help` fast)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("episodic.runtime:up_main", "run the whole embedded stack in the foreground"),
    "produce": ("episodic.producer:produce_main", "send a journal file (JSONL) to journal.entries"),
    "recall": ("episodic.client:recall_main", "query a running recall service"),
    "doctor": ("episodic.doctor:doctor_main", "check broker, topics, store, embedder, lag and auth"),
    "gate": ("streams.runner:gate_main", "run only the gate (distributed mode)"),
    "embedder": ("consumers.embedding:consumer_main", "run only the embedding consumer (distributed mode)"),
    "serve": ("recall.server:serve_main", "run only the recall HTTP service (distributed mode)"),
}


def _resolve(target: str) -> Callable[[list[str]], int]:
    module, func = target.split(":")
    fn: Callable[[list[str]], int] = getattr(importlib.import_module(module), func)
    return fn


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        p = argparse.ArgumentParser(prog="episodic", description="Streaming episodic memory for agent fleets")
        sub = p.add_subparsers(dest="command", metavar="COMMAND")
        for name, (_, help_) in COMMANDS.items():
            sub.add_parser(name, help=help_)
        if argv and argv[0] not in ("-h", "--help"):
            p.error(f"unknown command {argv[0]!r}")
        p.print_help()
        return 0 if argv else 2
    return _resolve(COMMANDS[argv[0]][0])(argv[1:])


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
