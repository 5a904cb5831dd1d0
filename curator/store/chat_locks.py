"""One writer per chat, across threads and across processes.

A chat's writer lock is held around each step that writes the chat (a sync, an extraction step including its
LLM call, a maintenance operation), so two steps never interleave their commits or rollbacks. In one process it is
a re-entrant lock per chat (a thread holding it may take it again); the outermost acquire in a thread also takes a
lock that other processes honour:

- SQLite store: a lock on a file per chat under `<data>/locks/` (`filelock`: `flock` on POSIX, `msvcrt.locking` on
  Windows; the system drops it when the process dies, so a killed service never leaves a chat locked);
- PostgreSQL store: a session-level advisory lock on a connection opened for the hold and closed after it (the
  server drops the lock with the connection, so here too a dead process frees the chat).

Waiting is bounded: after `timeout` seconds the caller gets `ChatBusy` naming the chat, instead of hanging.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curator.errors import StoreLocked

if TYPE_CHECKING:
    from curator.store.store import Store

DEFAULT_TIMEOUT = 600.0  # a step holds the lock through an LLM call; the slowest calls take minutes
POLL = 0.05
# The advisory-lock key space of chat writer locks (the two-int form): apart from any lock the store takes itself,
# so a chat's writer lock and its transaction lock never wait on each other.
ADVISORY_CLASS = 0x4D45  # apart from curator/store/pg.py's migration (0x4D43) and commit (0x4D44) locks


class ChatBusy(StoreLocked):
    hint = ("Another process has been writing this chat for longer than the wait allows; retry later, or look for "
            "a stuck service process.")


CrossLock = Callable[[str], AbstractContextManager[Any]]  # chat id -> a context manager holding the cross-process lock


class ChatLock:
    """A chat's writer lock: re-entrant in a thread; the outermost hold also holds the cross-process lock."""

    def __init__(self, chat_id: str, cross: CrossLock | None) -> None:
        self.chat_id = chat_id
        self._local = threading.RLock()
        self._cross = cross
        self._depth = 0  # only changed by the thread holding `_local`
        self._held: AbstractContextManager[Any] | None = None

    def acquire(self) -> None:
        self._local.acquire()
        if self._depth == 0 and self._cross is not None:
            try:
                held = self._cross(self.chat_id)
                held.__enter__()
            except BaseException:
                self._local.release()
                raise
            self._held = held
        self._depth += 1

    def release(self) -> None:
        self._depth -= 1
        try:
            if self._depth == 0 and self._held is not None:
                held, self._held = self._held, None
                held.__exit__(None, None, None)
        finally:
            self._local.release()

    def __enter__(self) -> ChatLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ChatLocks:
    """One writer lock per chat. With a store, the locks hold across processes over that store (see the module
    doc); without one (tests of one process), they are process-local."""

    def __init__(self, store: Store | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._locks: dict[str, ChatLock] = {}
        self._guard = threading.Lock()
        self.timeout = timeout
        self._cross: CrossLock | None = None
        if store is not None:
            url = postgres_url(store)
            self._cross = (lambda chat: advisory_lock(url, chat, self.timeout)) if url else \
                (lambda chat: file_lock(Path(store.data_dir) / "locks", chat, self.timeout))

    def __call__(self, chat_id: str) -> ChatLock:
        with self._guard:
            found = self._locks.get(chat_id)
            if found is None:
                found = self._locks[chat_id] = ChatLock(chat_id, self._cross)
            return found


def postgres_url(store: Store) -> str | None:
    """The store's PostgreSQL URL, or None for a SQLite store."""
    url = str(getattr(store, "url", "") or "")
    return url if url.startswith(("postgresql:", "postgres:")) else None


def lock_name(chat_id: str) -> str:
    # chat ids may hold anything (slashes, Chinese, ...): the file is named by a digest
    return hashlib.blake2b(chat_id.encode(), digest_size=12).hexdigest()


def _wait(try_once: Callable[[], bool], timeout: float, chat_id: str, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not try_once():
        if time.monotonic() >= deadline:
            raise ChatBusy(f"chat {chat_id!r} is being written by another process ({what}); waited {timeout:g} s")
        time.sleep(POLL)


@contextmanager
def file_lock(folder: Path, chat_id: str, timeout: float) -> Iterator[None]:
    from filelock import FileLock, Timeout

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (lock_name(chat_id) + ".lock")
    # a lock object per hold (its own descriptor): two holders in one process exclude each other as two processes do
    lock = FileLock(path, mode=0o600, thread_local=False, is_singleton=False)
    try:
        lock.acquire(timeout=timeout, poll_interval=POLL)
    except Timeout:
        raise ChatBusy(f"chat {chat_id!r} is being written by another process (lock file {path}); "
                       f"waited {timeout:g} s") from None
    try:
        yield
    finally:
        lock.release()  # closing the descriptor drops the lock


@contextmanager
def advisory_lock(url: str, chat_id: str, timeout: float) -> Iterator[None]:
    from curator.store.pg import PgConnection

    conn = PgConnection(url, 5000)
    # advisory locks are per database: the key names the store's schema too, so two stores in one database differ
    key = ("SELECT hashtext(current_schema() || ':' || ?)", (chat_id,))
    key = conn.execute(*key).fetchone()[0]

    def try_once() -> bool:
        return bool(conn.execute("SELECT pg_try_advisory_lock(?, ?)", (ADVISORY_CLASS, key)).fetchone()[0])

    try:
        _wait(try_once, timeout, chat_id, "PostgreSQL advisory lock")
        try:
            yield
        finally:
            if not conn.broken:
                conn.execute("SELECT pg_advisory_unlock(?, ?)", (ADVISORY_CLASS, key))
    finally:
        conn.close()  # the server drops the session's locks with it, whatever happened above
