"""What each write changed, remembered in memory for a while, so derived state (recall's caches, the vector
index) can follow a commit by the nodes it touched instead of rereading the whole graph.

Every commit, rollback or rebuild bumps the chat's graph version and records here which nodes and edges it
touched at the version it produced; every write of messages bumps the messages version and records the first
floor it rewrote. A reader that knows version v and sees version V asks for the changes in (v, V]: it gets them
when every version in between was recorded by this process, and None otherwise (another process wrote, the log
was trimmed, or a write replaced everything): then it rebuilds. A touched set may hold more than changed (a write
that failed after recording, ids that ended as they began); readers reread what is touched, so that is harmless.

The same changes are written to the store, in the transaction of the write (`graph_changes`, `message_changes`), and
kept for the chat's last PERSISTED versions: what this process did not see (another process wrote, or it just
started) is read from there, so a one-shot command or a restarted service follows a chat by what changed since the
stamp its derived state was saved at (the vector index, recall's lexicon) instead of reading the whole chat.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

if TYPE_CHECKING:
    from curator.store.dbtypes import Connection

KEEP = 512  # changes kept in memory per chat and kind; a reader further behind asks the store
PERSISTED = 4096  # versions of a chat's changes kept in the store; a reader further behind rebuilds
PRUNE_EVERY = 256  # versions between two trims of the store's changes


@dataclass(frozen=True)
class GraphChange:
    nodes: frozenset[str]
    edges: frozenset[str]


class ChangeLog:
    """Per chat: (graph version, GraphChange | None) and (messages version, first floor | None); None = all."""

    def __init__(self, connection: Callable[[], Connection] | None = None) -> None:
        self._connection = connection  # this thread's store connection, for what this process did not record
        self._graph: dict[str, deque[Any]] = {}
        self._messages: dict[str, deque[Any]] = {}
        self._epochs: dict[str, int] = {}  # bumped when a chat is deleted: its versions start again
        self._lock = threading.Lock()

    def epoch(self, chat_id: str) -> int:
        return self._epochs.get(chat_id, 0)

    def graph_changed(self, chat_id: str, version: int, nodes: Iterable[str] | None = None,
                      edges: Iterable[str] | None = None, everything: bool = False,
                      conn: Connection | None = None) -> None:
        """Record what the write that produced `version` touched; with `conn` (the write's transaction), in the
        store too."""
        change = None if everything else GraphChange(frozenset(nodes or ()), frozenset(edges or ()))
        if conn is not None:
            record_graph(conn, chat_id, version, change)
        with self._lock:
            self._graph.setdefault(chat_id, deque(maxlen=KEEP)).append((version, change))

    def messages_changed(self, chat_id: str, version: int, floor: int | None, conn: Connection | None = None) -> None:
        if conn is not None and floor is not None:
            record_messages(conn, chat_id, version, floor)
        with self._lock:
            self._messages.setdefault(chat_id, deque(maxlen=KEEP)).append((version, floor))

    def evict(self, chat_id: str) -> None:
        with self._lock:
            self._graph.pop(chat_id, None)
            self._messages.pop(chat_id, None)
            self._epochs[chat_id] = self._epochs.get(chat_id, 0) + 1

    def graph_since(self, chat_id: str, known: int, current: int, stored: bool = True) -> GraphChange | None:
        """The nodes and edges touched by the versions after `known` up to `current`; None when unknown. Without
        `stored`, only what this process recorded (a reader whose own caches another process's write makes stale)."""
        entries = self._between(self._graph, chat_id, known, current)
        if entries is None and stored and self._connection is not None:
            entries = stored_graph(self._connection(), chat_id, known, current)
        if entries is None or any(change is None for change in entries):
            return None
        return GraphChange(frozenset().union(*(c.nodes for c in entries)),
                           frozenset().union(*(c.edges for c in entries)))

    def messages_since(self, chat_id: str, known: int, current: int, stored: bool = True) -> int | None | bool:
        """The first floor rewritten by the message writes after `known` up to `current` (False: none); None
        when unknown."""
        entries = self._between(self._messages, chat_id, known, current)
        if entries is None and stored and self._connection is not None:
            entries = stored_messages(self._connection(), chat_id, known, current)
        if entries is None or any(floor is None for floor in entries):
            return None
        return min(entries, default=False)

    def _between(self, table: dict[str, Any], chat_id: str, known: int, current: int) -> list[Any] | None:
        if current < known:
            return None
        with self._lock:
            log = list(table.get(chat_id, ()))
        found: dict[int, list[Any]] = {}
        for version, change in log:
            if known < version <= current:
                found.setdefault(version, []).append(change)
        if len(found) != current - known:
            return None  # a version this process did not see
        return [change for version in sorted(found) for change in found[version]]


# ---- the store's copy ----------------------------------------------------------------------------
# A row per version ("v": the version was recorded; "*": everything changed) and per node ("n") and edge ("e") it
# touched. A version without its "v" row is one the store cannot say anything about.

def record_graph(conn: Connection, chat_id: str, version: int, change: GraphChange | None) -> None:
    rows = [(chat_id, version, "v", "")]
    if change is None:
        rows.append((chat_id, version, "*", ""))
    else:
        rows += [(chat_id, version, "n", i) for i in change.nodes] + [(chat_id, version, "e", i) for i in change.edges]
    conn.executemany("INSERT INTO graph_changes (chat_id, version, kind, item) VALUES (?, ?, ?, ?)", rows)
    if version % PRUNE_EVERY == 0:
        conn.execute("DELETE FROM graph_changes WHERE chat_id=? AND version <= ?", (chat_id, version - PERSISTED))


def record_messages(conn: Connection, chat_id: str, version: int, floor: int) -> None:
    conn.execute("INSERT INTO message_changes (chat_id, version, floor) VALUES (?, ?, ?)", (chat_id, version, floor))
    if version % PRUNE_EVERY == 0:
        conn.execute("DELETE FROM message_changes WHERE chat_id=? AND version <= ?", (chat_id, version - PERSISTED))


def stored_graph(conn: Connection, chat_id: str, known: int, current: int) -> list[GraphChange | None] | None:
    """The changes of the versions after `known` up to `current` as the store kept them; None when a version is
    missing (trimmed, or written before the store kept changes)."""
    if current < known or current - known > PERSISTED:
        return None
    found: dict[int, tuple[set[str], set[str], list[str]]] = {}
    for version, kind, item in conn.execute("SELECT version, kind, item FROM graph_changes WHERE chat_id=? AND "
                                            "version > ? AND version <= ?", (chat_id, known, current)):
        nodes, edges, flags = found.setdefault(version, (set(), set(), []))
        if kind == "n":
            nodes.add(item)
        elif kind == "e":
            edges.add(item)
        else:
            flags.append(kind)
    if sum("v" in flags for _, _, flags in found.values()) != current - known:
        return None
    return [None if "*" in flags else GraphChange(frozenset(nodes), frozenset(edges))
            for _, (nodes, edges, flags) in sorted(found.items())]


def stored_messages(conn: Connection, chat_id: str, known: int, current: int) -> list[int] | None:
    if current < known or current - known > PERSISTED:
        return None
    floors = [r[0] for r in conn.execute("SELECT floor FROM message_changes WHERE chat_id=? AND version > ? AND "
                                         "version <= ?", (chat_id, known, current))]
    return floors if len(floors) == current - known else None

