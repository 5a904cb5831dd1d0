"""Where the store lives: the SQLite file under the data directory (the default), or a PostgreSQL database named
by a URL. The first of these wins: an explicit `store=` (the CLI's `--store`), $CURATOR_STORE, `store:` in the data
directory's config.yaml. The data directory keeps config.yaml and the embedded vector index either way."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from curator.errors import StoreError

STORE_ENV = "CURATOR_STORE"
# Many data directories, one database: with a prefix set, each data directory's store lives in its own schema
# (the prefix and a hash of the directory's path), made on first use, unless the URL names a schema itself. The
# test suite runs this way on PostgreSQL.
SCHEMA_PREFIX_ENV = "CURATOR_STORE_SCHEMA_PREFIX"
CONFIG_FILENAME = "config.yaml"  # the same file as curator.settings reads
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# The top-level settings (curator.settings.Settings, which is too heavy to import here; a test keeps the two equal):
# a misspelt `store:` must not send a command to a new local memory.db.
SETTINGS_KEYS = frozenset({"profiles", "tasks", "extraction", "recall", "maintenance", "history", "embedding",
                           "vectors_url", "store", "chat_model_keys", "planner"})
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
            prefix = os.environ.get(SCHEMA_PREFIX_ENV)
            if prefix and "search_path" not in candidate:  # a URL that names its schema keeps it
                key = hashlib.sha1(str(data_dir.expanduser().resolve()).encode()).hexdigest()[:12]
                return with_schema(candidate, f"{prefix}{key}")
            return candidate
        raise StoreError(f"unknown store {redact(candidate)!r}: use postgresql://user:password@host:port/database, "
                         "or 'sqlite' for the file in the data directory")
    return None


def _configured(data_dir: Path) -> str | None:
    """`store:` from config.yaml. A config that exists but cannot be read stops here: it may name a PostgreSQL store,
    and going on would write a new local memory.db beside it (a split brain)."""
    path = data_dir / CONFIG_FILENAME
    if not path.exists():
        return None
    import yaml  # here, not at import: most data directories have no config.yaml

    from curator.textfile import load_yaml

    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        detail = str(exc).splitlines()[0][:200] if not isinstance(exc, OSError) else why
        raise StoreError(f"cannot read {path} ({detail}); nothing was opened",
                         "Fix or remove the file: it may name the store (`store:`), and running without it would use "
                         "a new local memory.db instead.") from None
    if data is not None and not isinstance(data, dict):
        raise StoreError(f"{path} is not a mapping of settings (it holds a {type(data).__name__}); nothing was opened",
                         "Fix the file: `key: value` lines, e.g. `store: postgresql://...`.")
    unknown = sorted(set(data or {}) - SETTINGS_KEYS, key=str)
    if unknown:
        raise StoreError(f"{path}: unknown setting(s) {', '.join(map(repr, unknown))}; nothing was opened",
                         f"Known: {', '.join(sorted(SETTINGS_KEYS))}. A misspelt `store:` would send every command "
                         "to a new local memory.db.")
    value = data.get("store") if data else None
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


def with_schema(url: str, schema: str) -> str:
    """`url` with the connection option that keeps the store in `schema` (one database, several stores)."""
    option = quote(f"-csearch_path={schema}")
    return f"{url}{'&' if '?' in url else '?'}options={option}"
