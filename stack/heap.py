"""The heap a started stack holds is frozen out of the garbage collector's full passes (issue 46 item 5).

Once `episodic up` has started, the collector tracks about 580,000 objects (modules, functions, classes and
their descriptors: torch, Faust, pydantic, ONNX Runtime's bindings), nearly all of which live as long as
the process. A full collection (generation 2) walks every one of them with the interpreter lock held, so
the event loop, the recall threads and the agents all wait for it. Measured with `bench.bench_recall_tail`
and a collector callback (docs/benchmarks.md): full collections took 0.5-0.6 s each while 4 clients were
recalling on the loaded 2-core machine, and the recalls that overlapped any collection of 2 ms or more had
a p99 of 594 ms against 224 ms for the others (29 of the 41 slowest overlapped one).

`settle()` moves what is alive once the roles have started into the collector's permanent generation
(`gc.freeze`, the standard library's tool for exactly this): later collections walk only what was allocated
since, so a full one costs what the process allocated while running, not what it imported. A frozen object
is never collected; after the full collection that `settle` runs first, what is left is what the process
holds anyway.

Process-wide, so only the process's own entry points turn it on (`episodic up`, `episodic run ROLE`:
`freeze_when_started()`); a stack started inside another program (the tests, an embedding application)
leaves that program's collector alone.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

_wanted = False


def freeze_when_started() -> None:
    """Called by a process's entry point before it starts its stack: `settle` then freezes the heap."""
    global _wanted
    _wanted = True


def settle() -> int:
    """Once the stack has started: when the entry point asked for it, collect once, then freeze what is left.
    Returns the objects frozen in all (0: not asked)."""
    global _wanted
    if not _wanted:
        return 0
    _wanted = False  # once per process
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    took = 1000 * (time.perf_counter() - t0)
    log.info("%d objects frozen out of the collector's full passes (%.0f ms)", frozen, took)
    return frozen
