"""What a front end's events did to each chat since the service started (the SillyTavern drawer's Status shows it)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

KEPT = 50  # events kept per chat


class EventLog:
    """The last events of each chat and what each did, newest first, kept in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, deque[dict[str, Any]]] = {}

    def add(self, chat_id: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self._events.setdefault(chat_id, deque(maxlen=KEPT)).appendleft(entry)

    def of(self, chat_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events.get(chat_id, ()))

    def evict(self, chat_id: str) -> None:
        with self._lock:
            self._events.pop(chat_id, None)
