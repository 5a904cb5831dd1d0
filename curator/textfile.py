"""Reading a user's text file safely: a size limit checked before reading, UTF-8 errors reported by line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from curator.errors import CuratorError


def read_utf8(path: Path, max_bytes: int, error: type[CuratorError], what: str = "file",
              size_hint: str | None = None) -> str:
    """The file's text (a UTF-8 BOM is dropped); `error` names the file and the line at fault."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror})", "Check the path; nothing was stored.") from None
    if size > max_bytes:
        raise error(f"{path}: {size} bytes is over the {what} limit of {max_bytes} bytes", size_hint)
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"{path}, line {line}: not UTF-8 (byte {exc.start})") from None


def load_yaml(text: str) -> Any:
    """`yaml.safe_load(text)`, parsed by libyaml when PyYAML was built with it: the same safe constructors on the
    same events, about five times faster (the shipped labels are parsed by every process's first recall)."""
    import yaml  # here, not at import: most processes read no YAML

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
