"""The `episodic` command: up, produce, recall, forget, show, ls, doctor, mcp, and the single-stage roles for
distributed mode.

`python -m stack.cli COMMAND ...` (or `python -m stack ...`) is the same command without the console script.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

# subcommand -> ("module:function" taking the arguments after it, help); lazy imports keep `--help` fast
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("stack.commands.up:main", "run the whole embedded stack in the foreground"),
    "produce": ("stack.commands.produce:main", "send a journal file (JSONL) to journal.entries"),
    "recall": ("stack.commands.recall:main", "query a running recall service"),
    "forget": ("stack.commands.memory:forget_main", "forget memories: entry ids, an agent's, a run's, a workspace"),
    "show": ("stack.commands.memory:show_main", "one memory with its counters, aliases and relations"),
    "ls": ("stack.commands.memory:ls_main", "list a workspace's memories, newest first"),
    "doctor": ("stack.commands.doctor:main", "check broker, topics, store, embedder, lag and auth"),
    "gate": ("stack.commands.gate:main", "run only the gate (distributed mode)"),
    "embedder": ("stack.commands.up:embedder_main", "run only the embedding consumer (distributed mode)"),
    "serve": ("stack.commands.serve:main", "run only the recall HTTP service (distributed mode)"),
    "linker": ("stack.commands.up:linker_main", "run only the linker: similar edges (distributed mode)"),
    "importance": (
        "stack.commands.up:importance_main",
        "run only the importance agent and the nightly decay (distributed mode)",
    ),
    "mcp": ("stack.commands.mcp:main", "serve the memory as MCP tools (stdio or streamable HTTP)"),
}


def resolve(command: str) -> Callable[[list[str]], int]:
    module, func = COMMANDS[command][0].split(":")
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
    return resolve(argv[0])(argv[1:])


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
