"""What every process would otherwise rebuild before its first answer, kept on disk: e5's ONNX graph (its 4-bit
weights made int8, ~0.1 CPU-s), e5's vocabulary sorted for lookups (~0.25 CPU-s), the token counter's ranks (whole,
and sorted by length for its partial encoders), the lexicon's format and the shipped injection labels (as JSON: no
YAML parser loaded for them). Each
file is named by a key of what it was built from (the model file, the code that builds it), so a new model or a
new version of that code builds a new one and the old is removed. A file is written whole or not at all (a
temporary file renamed); one that cannot be read is built again; a folder that cannot be written is no error: the
process builds what it needs in memory, as it would without the cache. Nothing here is ever downloaded."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from curator.paths import cache_dir

log = logging.getLogger(__name__)
T = TypeVar("T")


def key(*parts: str | bytes | int | Path) -> str:
    """A short digest of `parts`; a file's part is its size and modification time (not its bytes: no read)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            stat = part.stat()
            part = f"{part.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        digest.update(part if isinstance(part, bytes) else str(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def code_of(*modules: str) -> Iterable[bytes]:
    """The source bytes of `modules` (curator's own): a change to the code that builds a file changes its key."""
    here = Path(__file__).resolve().parent
    for module in modules:
        yield (here.parent / (module.replace(".", "/") + ".py")).read_bytes()


def cached(name: str, digest: str, build: Callable[[], bytes], parse: Callable[[bytes], T]) -> T:
    """`parse` of the bytes `build()` makes, read from the cache file `name-digest` when there is one that
    `parse` takes (a damaged file raises there, and is built again)."""
    folder = cache_dir()
    path = folder / f"{name}-{digest}.bin" if folder is not None else None
    if path is not None:
        try:
            return parse(path.read_bytes())
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes `parse` raise: built again
            log.warning("the start cache %s could not be read (%s: %s); building it again", path,
                        type(exc).__name__, exc)
    data = build()
    if path is not None:
        _write(path, name, data)
    return parse(data)


def _write(path: Path, name: str, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{name}-", dir=path.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        for old in path.parent.glob(f"{name}-*.bin"):  # what older models or code built
            if old != path:
                old.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("start cache %s not written: %s", path, exc)
