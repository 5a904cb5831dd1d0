"""Where the store lives: the SQLite file under the data directory (the default), or a PostgreSQL database named
by a URL. The first of these wins: an explicit `store=` (the CLI's `--store`), $CURATOR_STORE, `store:` in the data
directory's config.yaml. The data directory keeps config.yaml and the embedded vector index either way."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

from curator.errors import StoreError

STORE_ENV = "CURATOR_STORE"
CONFIG_FILENAME = "config.yaml"  # the same file as curator.settings reads
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_NAMES = ("", "sqlite")


def store_url(data_dir: Path, explicit: str | None = None) -> str | None:
    """The PostgreSQL URL the store uses, or None for the SQLite file in `data_dir`."""
    for candidate in (explicit, os.environ.get(STORE_ENV), _configured(data_dir)):
        if candidate is None:
            continue
        candidate = str(candidate).strip()
        if candidate.lower() in SQLITE_NAMES:
            return None
        if candidate.startswith(POSTGRES_SCHEMES):
            return candidate
        raise StoreError(f"unknown store {redact(candidate)!r}: use postgresql://user:password@host:port/database, "
                         "or 'sqlite' for the file in the data directory")
    return None


def _configured(data_dir: Path) -> str | None:
    """`store:` from config.yaml; a file that does not parse is left for the settings to report."""
    path = data_dir / CONFIG_FILENAME
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    value = data.get("store") if isinstance(data, dict) else None
    return None if value is None else str(value)


def redact(url: str) -> str:
    """The URL with its password (in the netloc or in a `password=` parameter) replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable store URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
