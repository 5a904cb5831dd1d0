"""What each write changed, remembered in memory for a while, so derived state (recall's caches, the vector
index) can follow a commit by the nodes it touched instead of rereading the whole graph.

Every commit, rollback or rebuild bumps the chat's graph version and records here which nodes and edges it
touched at the version it produced; every write of messages bumps the messages version and records the first
floor it rewrote. A reader that knows version v and sees version V asks for the changes in (v, V]: it gets them
when every version in between was recorded by this process, and None otherwise (another process wrote, the log
was trimmed, or a write replaced everything): then it rebuilds. A touched set may hold more than changed (a write
that failed after recording, ids that ended as they began); readers reread what is touched, so that is harmless.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import threading
from collections import deque
from dataclasses import dataclass

KEEP = 512  # changes kept per chat and kind; a reader further behind rebuilds


@dataclass(frozen=True)
class GraphChange:
    nodes: frozenset[str]
    edges: frozenset[str]


class ChangeLog:
    """Per chat: (graph version, GraphChange | None) and (messages version, first floor | None); None = all."""

    def __init__(self) -> None:
        self._graph: dict[str, deque[Any]] = {}
        self._messages: dict[str, deque[Any]] = {}
        self._epochs: dict[str, int] = {}  # bumped when a chat is deleted: its versions start again
        self._lock = threading.Lock()

    def epoch(self, chat_id: str) -> int:
        return self._epochs.get(chat_id, 0)

    def graph_changed(self, chat_id: str, version: int, nodes: Iterable[str] | None = None,
                      edges: Iterable[str] | None = None, everything: bool = False) -> None:
        change = None if everything else GraphChange(frozenset(nodes or ()), frozenset(edges or ()))
        with self._lock:
            self._graph.setdefault(chat_id, deque(maxlen=KEEP)).append((version, change))

    def messages_changed(self, chat_id: str, version: int, floor: int | None) -> None:
        with self._lock:
            self._messages.setdefault(chat_id, deque(maxlen=KEEP)).append((version, floor))

    def evict(self, chat_id: str) -> None:
        with self._lock:
            self._graph.pop(chat_id, None)
            self._messages.pop(chat_id, None)
            self._epochs[chat_id] = self._epochs.get(chat_id, 0) + 1

    def graph_since(self, chat_id: str, known: int, current: int) -> GraphChange | None:
        """The nodes and edges touched by the versions after `known` up to `current`; None when unknown."""
        entries = self._between(self._graph, chat_id, known, current)
        if entries is None or any(change is None for change in entries):
            return None
        return GraphChange(frozenset().union(*(c.nodes for c in entries)),
                           frozenset().union(*(c.edges for c in entries)))

    def messages_since(self, chat_id: str, known: int, current: int) -> int | None | bool:
        """The first floor rewritten by the message writes after `known` up to `current` (False: none); None
        when unknown."""
        entries = self._between(self._messages, chat_id, known, current)
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
