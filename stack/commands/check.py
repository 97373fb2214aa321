"""`episodic check`: read the store and the state and report every broken invariant (issue 25).

What is checked is listed in `episodic.lifecycle.check`: forgotten ids or texts present (as memories,
aliases, run context or edges), edges to missing memories, an id listed by two memories, a vector made
from another summary than the memory's, counters out of range. Read-only. Prints one JSON report and exits
0 when everything holds, 1 when something does not, 2 when the store cannot be read.

The embedded store (Qdrant Edge) is single-process: stop `episodic up` first (or run it against a
Qdrant server with `EPISODIC_QDRANT_URL`, beside the serving stack).
"""

from __future__ import annotations

import argparse
import json
import sys

from episodic.kernel.errors import EpisodicError
from episodic.kernel.settings import Settings


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="episodic check", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--workspace", "-w", action="append", help="only this workspace (repeatable; default: all)")
    args = ap.parse_args(argv)
    from episodic.embedding.generations import follow_active
    from episodic.lifecycle.check import check_store
    from stack.stores import open_state, open_store

    settings = Settings()
    try:
        store = open_store(settings, dim=384)
    except EpisodicError as e:
        print(f"episodic check: cannot open the store: {e}", file=sys.stderr)
        return 2
    try:
        state = open_state(store)
        try:
            follow_active(store, state)  # type: ignore[arg-type]
            report = check_store(store, state, workspaces=args.workspace)
        finally:
            state.close()
    except EpisodicError as e:
        print(f"episodic check: {e}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(json.dumps(report.as_dict(), indent=2))
    if not report.ok:
        print(f"episodic check: {sum(report.counts.values())} violations", file=sys.stderr)
    return 0 if report.ok else 1
