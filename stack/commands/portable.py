"""`episodic export` and `episodic import`: a workspace's memories to a JSON-lines file, and back into a store.

    episodic export --workspace W [--out FILE.jsonl]       # stdout without --out
    episodic import FILE.jsonl [--check]                   # --check: validate only, write nothing

Both open the configured store themselves (`stack.stores.open_store`: Qdrant Edge under EPISODIC_DATA_DIR, or
the Qdrant server at EPISODIC_QDRANT_URL) and the configured model (EPISODIC_EMBED_MODEL: import carries the
vectors over when they are that model's, and embeds the text again otherwise). Qdrant Edge is
single-process: with the embedded store, run them while `episodic up` is stopped. The file format is
`schemas.portable`; what import does is `episodic.lifecycle.portable`. Exit statuses: 0 done, 1 the store or the file
failed (nothing written when the file is bad), 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from episodic.embedding.generations import Generation, adopt, embedder_making, follow_active
from episodic.kernel.errors import StoreError, StoreUnavailable
from episodic.kernel.settings import Settings
from episodic.lifecycle.portable import BadExport, Importer, ImportFailed, check_export, export_workspace, read_export
from episodic.store.facade import QdrantStore

DEFAULT_DIM = 384  # the collection's dense size when no model loads (stack.runtime.DEFAULT_DIM)


@contextlib.contextmanager
def opened(settings: Settings) -> Iterator[tuple[Any, Any, Any]]:
    """(store, state, embedder) as the stack opens them; a store in use is a clear error."""
    from episodic.embedding.embedder import load_embedder
    from stack.stores import open_state, open_store

    embedder = load_embedder(settings, queries=False)
    dim = embedder.dim if embedder is not None else DEFAULT_DIM
    try:
        store = open_store(settings, dim=dim)
    except (StoreError, StoreUnavailable) as e:
        hint = "" if settings.qdrant_url else " (Qdrant Edge is single-process: stop `episodic up` first)"
        raise StoreUnavailable(f"cannot open the store{hint}: {e}") from e
    try:
        state = open_state(store)
        try:
            yield store, state, embedder
        finally:
            state.close()
    finally:
        store.close()


def export_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="episodic export", description="a workspace's memories as JSON lines")
    ap.add_argument("--workspace", "-w", required=True)
    ap.add_argument("--out", "-o", type=Path, help="file to write (default: stdout); written whole or not at all")
    args = ap.parse_args(argv)
    settings = Settings()
    try:
        with opened(settings) as (store, state, _embedder):
            active = follow_active(store, state) if isinstance(store, QdrantStore) else None
            lines = export_workspace(store, args.workspace, pieces=active.pieces if active else None)
            n = _write(lines, sys.stdout.buffer) if args.out is None else _write_file(lines, args.out)
    except (StoreError, StoreUnavailable, OSError) as e:
        print(f"episodic export: {e}", file=sys.stderr)
        return 1
    print(f"exported {n} memories of {args.workspace}" + (f" to {args.out}" if args.out else ""), file=sys.stderr)
    return 0


def _write(lines: Iterator[bytes], out: IO[bytes]) -> int:
    n = 0
    for line in lines:
        out.write(line + b"\n")
        n += 1
    out.flush()
    return n


def _write_file(lines: Iterator[bytes], path: Path) -> int:
    """Into a temporary file beside `path`, renamed over it once complete: never a half-written export."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as f:
            n = _write(lines, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return n


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from f


def import_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="episodic import", description="load an `episodic export` file into the store")
    ap.add_argument("file", type=Path)
    ap.add_argument("--check", action="store_true", help="validate the file only, write nothing")
    ap.add_argument(
        "--force",
        action="store_true",
        help="replace a memory even when the store holds a newer version of it (by ts, then acceptance stamp); "
        "without it an older version is left out and listed",
    )
    args = ap.parse_args(argv)
    if not args.file.is_file():
        print(f"episodic import: no such file: {args.file}", file=sys.stderr)
        return 2
    try:
        total = check_export(_lines(args.file))  # the whole file, before anything is written
    except BadExport as e:
        print(f"episodic import: {args.file}: {e}", file=sys.stderr)
        return 1
    if args.check:
        print(f"{args.file}: {total} memories, every line valid")
        return 0
    from episodic.store.sparse import Bm25Encoder

    try:
        with opened(Settings()) as (store, state, embedder):
            target: Generation | None = None
            if isinstance(store, QdrantStore):  # rows go to the active generation, cut its way
                adopt(store, state, embedder)  # a new store: the configured model and pieces, as `up` would
                target = follow_active(store, state)
            if target is not None:
                maker = embedder_making(target, embedder)
                if embedder is not None and maker is None:
                    print(
                        f"episodic import: the store ranks with {target.model} (pieces {target.pieces}), not the "
                        f"configured {embedder.model_id}: memories whose vectors cannot be carried over are "
                        "written BM25-only, and the stack's backfill embeds them",
                        file=sys.stderr,
                    )
                embedder = maker
            importer = Importer(
                store=store, state=state, embedder=embedder, bm25=Bm25Encoder(), generation=target, force=args.force
            )
            report = importer.run(read_export(_lines(args.file)))
            store.flush()
    except (StoreError, StoreUnavailable, ImportFailed, OSError) as e:
        print(f"episodic import: {e}", file=sys.stderr)
        return 1
    print(
        f"imported {report.written} of {report.memories} memories into {', '.join(sorted(report.workspaces)) or '-'}"
        f" ({report.replaced} replaced; vectors: {report.vectors_kept} carried over, {report.embedded} embedded again,"
        f" {report.sparse_only} BM25 only)"
    )
    if report.forgotten:
        shown = ", ".join(report.forgotten[:10]) + (" ..." if len(report.forgotten) > 10 else "")
        print(f"left out {len(report.forgotten)} forgotten in the target: {shown}")
    if report.stale:
        shown = ", ".join(report.stale[:10]) + (" ..." if len(report.stale) > 10 else "")
        print(f"left out {len(report.stale)} older than the version the store holds (--force replaces them): {shown}")
    if report.aliases_dropped:
        print(f"dropped {report.aliases_dropped} aliases forgotten in the target")
    return 0
