"""A read-write lock for threads: many holders share it, or one holds it alone.

Qdrant Edge's data calls run concurrently on the open shard, and only its lifecycle (load, create, close)
is exclusive (episodic.store.edge).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """Many holders share it, or one holds it alone; a waiting exclusive holder goes before new sharers
    (so a close is not starved by a stream of queries). The stdlib has none; this is the textbook one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharers = 0
        self._exclusive = False
        self._waiting = 0  # exclusive holders waiting

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._sharers += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharers -= 1
                if not self._sharers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._sharers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
