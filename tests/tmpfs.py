"""A scratch directory on tmpfs for the stores under test (no IO beyond the directory itself)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fast_tmp_dir(fallback: Path) -> Iterator[Path]:
    """A directory on tmpfs where there is one, else `fallback`: Qdrant Edge fsyncs on shard creation, every
    payload index and close (~1 s per store on this disk), which tmpfs makes free. Restart tests use the
    real disk."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield fallback
        return
    d = Path(tempfile.mkdtemp(prefix="episodic-test-", dir=shm))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
