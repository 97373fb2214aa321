"""The files of an index cycle on disk (episodic.store.edge_index): the names beside the shard (the copy, the
replaced shard, the swap's marker) and what is done to them: the copy, the check that the disk has room for
it, reading a shard back into the page cache, fsyncs, and putting the shard back after a crash or a power
cut (`recover`, run at every open)."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from pathlib import Path

from episodic.kernel.errors import StoreError

COPY_SUFFIX = ".indexing"
REPLACED_SUFFIX = ".replaced"
SWAP_SUFFIX = ".swapping"  # a marker file: see `recover`
ROOM_FACTOR = 2.0  # a cycle's disk, times the shard's: the copy and the optimizer's new segments (`check_room`)
ROOM_FACTOR_COPYTREE = 2.5  # the same where the copy writes the shard's holes out (no GNU cp)
ROOM_SPARE = 256 << 20  # and room for the live shard's writes while it runs


def copy_path(path: Path) -> Path:
    return path.with_name(path.name + COPY_SUFFIX)


def replaced_path(path: Path) -> Path:
    return path.with_name(path.name + REPLACED_SUFFIX)


def swap_marker(path: Path) -> Path:
    """Present while a swap replays the last journaled operations into the shard it renamed into place."""
    return path.with_name(path.name + SWAP_SUFFIX)


def warm(path: Path, chunk: int = 1 << 20) -> int:
    """Read every file of the shard at `path` into the page cache; returns the bytes read.

    Qdrant Edge drops a shard's files from the page cache when it closes it (`POSIX_FADV_DONTNEED` on each,
    seen with strace), so loading a shard that was just closed, as the worker's copy is at the swap, pulls
    what the load keeps in memory (the dense vectors, the payload indexes) back from disk one page fault at a
    time, with the interpreter lock held: 3.0-3.3 s at 100k memories against 0.6-0.8 s once the files are
    read back first. Plain sequential reads (the lock is released during each) take 0.5-1 s there, and read
    the files' preallocated chunks too. Which files a load needs is Edge's business (skipping the payload
    indexes' null bitmaps made it slow again), so every file is read. It only saves load time, so it never
    raises: what cannot be read (a file or directory that vanished) is skipped."""
    total, buf = 0, bytearray(chunk)
    try:
        files = sorted(path.rglob("*"))
    except OSError:
        return 0
    for f in files:
        try:
            if not f.is_file():
                continue
            with open(f, "rb", buffering=0) as fh:
                while n := fh.readinto(buf):
                    total += n
        except OSError:
            continue
    return total


def _fsync(path: Path, *, directory: bool) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path) -> None:
    """Make the names created, renamed and removed in the directory `path` durable (fsync it): without it a
    power cut may keep a later rename and lose an earlier one. Raises OSError."""
    _fsync(path, directory=True)


def sync_tree(path: Path) -> None:
    """fsync every file and directory of the shard at `path`, then its parent: the copy a cycle renames into
    place must be on disk before the rename is (a copy leaves it to the kernel's writeback, and
    a power cut after the rename could keep empty files). 0.35 s for a just-copied 100k shard (795 MiB),
    0.03 s once written back. Raises OSError."""
    for f in [*sorted(path.rglob("*"), reverse=True), path]:  # files before the directories naming them
        _fsync(f, directory=f.is_dir())
    sync_dir(path.parent)


def copy_shard(src: Path, dst: Path) -> None:
    """Copy the shard's directory `src` to `dst` (which must not exist) as it is on disk, holes included.
    Edge sizes its files ahead of their data, sparsely (100k memories: 432 MiB allocated of 796 MiB), and
    `shutil.copytree` writes the holes out as zeros (797 MiB written, 0.37-1.79 s here, while writers wait),
    where GNU cp copies the data extents only (431 MiB, 0.24-0.32 s) or shares them where the filesystem can
    (reflink: XFS, btrfs). Elsewhere (no GNU cp), `shutil.copytree`. Raises OSError."""
    if os.path.lexists(dst):  # cp -T would merge into it: a stale segment could bring deleted points back
        raise FileExistsError(f"{dst} exists: a copy of the shard goes into a new directory")
    cp = _gnu_cp()
    if cp is None:
        shutil.copytree(src, dst)
        return
    done = subprocess.run(
        [cp, "-a", "-T", "--reflink=auto", "--sparse=auto", "--", str(src), str(dst)], capture_output=True
    )
    if done.returncode != 0:
        raise OSError(f"cp {src} {dst}: {done.stderr.decode(errors='replace').strip()[-300:]}")


@functools.cache
def _gnu_cp() -> str | None:
    cp = shutil.which("cp")
    if cp is None:
        return None
    try:
        version = subprocess.run([cp, "--version"], capture_output=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return cp if b"GNU coreutils" in version else None


def shard_bytes(path: Path) -> int:
    """What the shard's files take on disk (their allocated blocks: Edge preallocates its chunks)."""
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):
            total += f.lstat().st_blocks * 512
    return total


def check_room(path: Path) -> None:
    """Raise StoreError unless the disk holding the shard at `path` has room for a cycle: the copy, the
    optimizer's new segments written beside the copy's old ones until they replace them (up to the copy's
    size again), and `ROOM_SPARE` for the live shard's writes meanwhile. Measured on a never-indexed shard of
    100k memories (368 MiB allocated): its copy peaked at 689 MiB during the build (1.87x), 928 MiB (2.52x)
    when copied with `shutil.copytree` (hence two factors). A cycle that filled the disk would make the live
    shard's own writes fail; this one is retried later (`BackgroundIndexer`'s back-off)."""
    need = int((ROOM_FACTOR if _gnu_cp() else ROOM_FACTOR_COPYTREE) * shard_bytes(path)) + ROOM_SPARE
    free = shutil.disk_usage(path.parent).free
    if free < need:
        raise StoreError(
            f"qdrant-edge index cycle at {path}: {free / 2**20:.0f} MiB free on its disk, a cycle needs "
            f"{need / 2**20:.0f} MiB (a copy of the shard and its rebuilt segments); queries scan until there is room"
        )


def recover(path: Path) -> None:
    """Put the shard at `path` back after a cycle that a crash cut short (see the module doc). Each step is
    made durable before the next (`sync_dir`), so a power cut during a recovery leaves a state it recovers
    from as well."""
    replaced, copy, marker = replaced_path(path), copy_path(path), swap_marker(path)
    if marker.exists():  # the copy in place may lack the last operations: the live shard holds them all
        if replaced.exists():
            if path.exists():
                shutil.rmtree(path)  # raises rather than leave part of it (the marker stays: the next start retries)
                sync_dir(path.parent)  # the copy is gone before the live shard takes its name
            replaced.rename(path)
            sync_dir(path.parent)
        marker.unlink()  # only once the live shard is back in place
        sync_dir(path.parent)
    if not path.exists() and replaced.exists():
        replaced.rename(path)  # the live shard, flushed and closed before the first rename
        sync_dir(path.parent)
    if path.exists():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.rmtree(replaced, ignore_errors=True)
