"""The forward passes of an ingestion batch: cut by length under a word-piece budget (`passes`), taken by
concurrent streams (`Passes`), each with its share of the cores (`share`). See episodic.embedding.onnx_encoder."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np


def passes(lengths: Sequence[int], budget: int, max_batch: int) -> list[list[int]]:
    """Indices of `lengths` in forward passes: longest first, each pass at most `max_batch` texts and at
    most `budget` word pieces once padded to its longest text (a text longer than the budget goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]  # sorted: the first is the longest
        if cur and (len(cur) >= max_batch or (len(cur) + 1) * width > budget):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def share(cores: int, streams: int, k: int) -> int:
    """Stream `k`'s threads when `cores` are shared among `streams` streams (the first ones get the rest)."""
    return max(1, cores // streams + (1 if k < cores % streams else 0))


class Passes:
    """The forward passes of one batch, taken by its streams, and their vectors. Thread-safe."""

    def __init__(self, todo: list[list[int]]) -> None:
        self._todo = todo
        self._next = 0
        self._left = len(todo)
        self._out: np.ndarray | None = None
        self._lock = threading.Condition()
        self.stop = False  # a stream failed: the others take no more passes

    def take(self) -> list[int] | None:
        with self._lock:
            if self._next >= len(self._todo):
                return None
            self._next += 1
            return self._todo[self._next - 1]

    def wait(self, timeout: float) -> bool:
        """Wait for a pass to finish (at most `timeout`); False when none is left to take."""
        with self._lock:
            if self._next >= len(self._todo):
                return False
            self._lock.wait(timeout)
            return self._next < len(self._todo)

    def put(self, group: list[int], vecs: np.ndarray) -> None:
        with self._lock:
            if self._out is None:
                rows = sum(len(g) for g in self._todo)
                self._out = np.zeros((rows, vecs.shape[1]), dtype=np.float32)
            self._out[group] = vecs
            self._left -= 1
            self._lock.notify_all()

    def guard(self, stream: Callable[[int], None], k: int) -> None:
        try:
            stream(k)
        except BaseException:
            with self._lock:
                self.stop = True
                self._lock.notify_all()
            raise

    def result(self) -> np.ndarray:
        if self._left or self._out is None:  # pragma: no cover - a failed stream raised before this
            raise RuntimeError("a forward pass is missing")
        return self._out
