"""The store on PostgreSQL: a psycopg 3 connection that speaks the store's calling convention.

The store's modules write SQL in the subset SQLite and PostgreSQL share, with `?` placeholders, and read rows by
position or by column name (as `sqlite3.Row`). This module is the thin dialect layer that makes that true here:
placeholders are rewritten once per statement text (cached), rows carry their column names, errors become the
`curator.errors` hierarchy with a message that names the database without its password, and the connection runs
in autocommit so a read never leaves a transaction open; `begin()` starts an explicit one.
(bench/store_engines.py measured psycopg against SQLAlchemy Core on this path: bench/README.md.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from curator.errors import MissingExtra, StoreError, StoreLocked

try:
    import psycopg
    import psycopg.sql
    from psycopg import errors as pg_errors
    from psycopg.adapt import Loader
    from psycopg.types.numeric import Int8Dumper
except ImportError as exc:
    raise MissingExtra("postgres", "a store on PostgreSQL") from exc
from curator.store.dbtypes import Params
from curator.store.location import redact

CONNECT_TIMEOUT_S = 10
# Advisory-lock namespaces (the first key of the two-key form), so the store's locks never collide.
MIGRATION_LOCK = 0x4D43  # "MC": one migrator at a time per schema
CHAT_LOCK = 0x4D44  # one commit or rollback at a time per chat


class Row:
    """A result row readable by position, by column name, unpacked, or as `dict(row)` (like sqlite3.Row)."""

    __slots__ = ("_values", "_index")

    def __init__(self, values: tuple[Any, ...], index: dict[str, int]) -> None:
        self._values, self._index = values, index

    def __getitem__(self, key: int | str, /) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._index)

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values))!r})"


_INDEXES: dict[tuple[bytes, ...], dict[str, int]] = {}  # column names -> {name: position}, shared by all rows


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], Any]:
    # Column names straight from the result (cheaper than building cursor.description for every statement).
    result = cursor.pgresult
    if result is None or not result.nfields:
        return tuple
    names = tuple(result.fname(i) for i in range(result.nfields))
    index = _INDEXES.get(names)
    if index is None:
        index = _INDEXES[names] = {name.decode(): i for i, name in enumerate(names)}
    return lambda values: Row(tuple(values), index)


class _NumericLoader(Loader):
    """SUM over BIGINT is NUMERIC in PostgreSQL; SQLite gives an int (or a float). Keep SQLite's types, not Decimal."""

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        return float(text) if any(c in text for c in ".eEN") else int(text)


class _BoolAsIntDumper(Int8Dumper):
    """The schema stores flags as integers (SQLite has no booleans): send True/False as 1/0."""

    def dump(self, obj: Any) -> Any:
        return super().dump(int(obj))


@lru_cache(maxsize=4096)
def to_pyformat(sql: str) -> str:
    """`?` placeholders to psycopg's `%s` (and a literal `%` to `%%`), leaving quoted text alone."""
    out, quote = [], ""
    for ch in sql:
        if quote:
            out.append("%%" if ch == "%" else ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


class PgConnection:
    """One PostgreSQL session with the store's calling convention (see the module docstring)."""

    dialect = "postgresql"

    def __init__(self, url: str, busy_timeout_ms: int) -> None:
        self.url = url
        self.where = redact(url)
        try:
            self._conn = psycopg.connect(url, autocommit=True, row_factory=_row_factory,
                                         connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store {self.where}: {_reason(exc)}",
                             "Check that the server is running and the URL's host, port, user, password and "
                             "database are right (--store, CURATOR_STORE or `store:` in config.yaml).") from None
        except (ValueError, TypeError) as exc:  # libpq rejects a malformed URL or option
            raise StoreError(f"invalid PostgreSQL store URL {self.where}: {exc}") from None
        self._conn.adapters.register_loader("numeric", _NumericLoader)
        self._conn.adapters.register_dumper(bool, _BoolAsIntDumper)
        try:
            self._ensure_schema()
            # A write waits this long for a lock (a chat's commit lock, a row) before failing with StoreLocked.
            self.execute(f"SET lock_timeout = {int(busy_timeout_ms)}")
        except BaseException:
            self._conn.close()
            raise

    def _ensure_schema(self) -> None:
        """A URL whose search_path names a schema that is not there yet: make it (the store's tables go there)."""
        if self.execute("SELECT current_schema()").fetchone()[0] is not None:
            return
        first = self.execute("SHOW search_path").fetchone()[0].split(",")[0].strip().strip('"')
        if not first or first.startswith("$"):
            return
        try:
            self._conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psycopg.sql.Identifier(first)))
        except (pg_errors.UniqueViolation, pg_errors.DuplicateSchema):
            pass  # another process made it meanwhile
        except psycopg.Error as exc:
            raise translate(exc, self.where) from None

    # ---- the calling convention ---------------------------------------------------------------
    def execute(self, sql: str, params: Params = (), /) -> Any:  # a psycopg cursor
        try:
            return self._conn.execute(to_pyformat(sql), tuple(params) or None)
        except psycopg.Error as exc:
            raise translate(exc, self.where) from None

    def executemany(self, sql: str, params: Iterable[Params], /) -> Any:
        params = [tuple(p) for p in params]
        cursor = self._conn.cursor()
        if params:
            try:
                cursor.executemany(to_pyformat(sql), params)
            except psycopg.Error as exc:
                raise translate(exc, self.where) from None
        return cursor

    # ---- transactions and locks ---------------------------------------------------------------
    @property
    def in_transaction(self) -> bool:
        return self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def begin(self) -> None:
        self.execute("BEGIN")

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback_quietly(self) -> None:
        """End the open transaction, if any; a connection that broke meanwhile is left for the store to replace."""
        if self.broken:
            return
        try:
            if self.in_transaction:
                self._conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def lock_chat(self, chat_id: str) -> None:
        """Hold the chat's write lock until this transaction ends: no other process commits or rolls it back
        meanwhile (within one process the store's own lock already serialises writes)."""
        self.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (CHAT_LOCK, chat_id))

    @contextmanager
    def migration_lock(self) -> Iterator[None]:
        """One migrator at a time per schema. A session lock taken before the migration's transactions begin, so
        each of them starts after the previous migrator's commit and sees its tables (a lock taken inside an open
        transaction would leave it reading a catalog from before)."""
        self.execute("SELECT pg_advisory_lock(?, hashtext(current_schema()))", (MIGRATION_LOCK,))
        try:
            yield
        finally:
            if not self.broken:
                self.rollback_quietly()
                self.execute("SELECT pg_advisory_unlock(?, hashtext(current_schema()))", (MIGRATION_LOCK,))

    def has_table(self, name: str) -> bool:
        return bool(self.execute("SELECT to_regclass(?) IS NOT NULL", (name,)).fetchone()[0])

    def backend_pid(self) -> int:
        return self._conn.info.backend_pid

    @property
    def broken(self) -> bool:
        return self._conn.closed or self._conn.broken

    def close(self) -> None:
        self._conn.close()


def _reason(exc: psycopg.Error) -> str:
    """libpq's words without its framing: 'Connection refused', 'password authentication failed for user ...'."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    reason = lines[0].rsplit(" failed: ", 1)[-1] if lines[0].startswith("connection failed") else lines[0]
    return reason.removeprefix("FATAL:").strip()


def translate(exc: psycopg.Error, where: str) -> StoreError:
    """Turn a psycopg error into one of ours with a message that names the database (never its password)."""
    if isinstance(exc, (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected)):
        return StoreLocked(f"database {where} is locked ({_reason(exc)})")
    if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, pg_errors.QueryCanceled):
        return StoreError(f"lost the connection to the PostgreSQL store {where} ({_reason(exc)}); "
                          "the transaction in progress was not committed",
                          "Check the server, then retry: nothing half-written was kept.")
    return StoreError(f"database {where}: {_reason(exc)}")
