"""The `episodic` command: up, produce, recall, forget, show, ls, dlq, export, import, check, doctor, reindex,
mcp, and `run ROLE` (one role per process, distributed mode) with its older per-role names.

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
    "dlq": ("stack.commands.dlq:main", "dead letters: `dlq ls` lists them, `dlq replay` sends them back"),
    "export": ("stack.commands.portable:export_main", "write a workspace's memories to a JSON-lines file"),
    "import": ("stack.commands.portable:import_main", "load an exported JSON-lines file into the store"),
    "check": ("stack.commands.check:main", "read the store and report broken invariants (forgotten, edges, counters)"),
    "doctor": ("stack.commands.doctor:main", "check broker, topics, every role, store, embedder, lag, decay and auth"),
    "run": ("stack.commands.run:main", "run one role (gate, embedder, http/recall, linker, ...) in this process"),
    "reindex": ("stack.commands.reindex:main", "re-embed the store with another model, then switch recall to it"),
    "gate": ("stack.commands.gate:main", "run only the gate, with its topic options (distributed mode)"),
    "embedder": ("stack.commands.run:embedder_main", "= run embedder: the embedding consumer alone"),
    "serve": ("stack.commands.run:serve_main", "= run http: the recall HTTP service alone"),
    "linker": ("stack.commands.run:linker_main", "= run linker: similar edges alone"),
    "importance": ("stack.commands.run:importance_main", "= run importance: reference counts and nightly decay"),
    "mcp": ("stack.commands.mcp:main", "serve the memory as MCP tools (stdio or streamable HTTP)"),
    "health": ("stack.commands.health:main", "print a workspace's memory-health snapshot and its last days"),
    "health-agent": ("stack.commands.run:health_main", "= run health: the daily health snapshots"),
    "nudge-agent": ("stack.commands.run:nudge_main", "= run nudge: the in-session nudges"),
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
