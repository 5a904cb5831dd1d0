"""The types of the store's database calls, the same on both engines: a connection (`db.TranslatingConnection` for
SQLite, `pg.PgConnection` for PostgreSQL), its cursors and its rows."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

Params = Sequence[Any] | dict[str, Any]


class Row(Protocol):
    """A result row, by position or by column name (sqlite3.Row, or pg.Row on PostgreSQL)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The store's calling convention, the same on both engines (`TranslatingConnection` here for SQLite,
    `pg.PgConnection`): `?` placeholders, rows by position or name, errors as StoreError, and the few calls whose
    SQL differs between them."""

    dialect: str

    @property
    def where(self) -> str: ...

    @property
    def broken(self) -> bool: ...

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, params: Params = (), /) -> Cursor: ...

    def executemany(self, sql: str, params: Iterable[Params], /) -> Cursor: ...

    def begin(self) -> None: ...

    def commit(self) -> None: ...

    def rollback_quietly(self) -> None: ...

    def lock_chat(self, chat_id: str) -> None: ...

    def migration_lock(self) -> AbstractContextManager[object]: ...

    def has_table(self, name: str) -> bool: ...

    def close(self) -> None: ...
