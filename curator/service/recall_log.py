"""What the panel shows of recall since the service started: each chat's last injection and its recent recalls."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from curator.store.store import utc_now

RECENT = 10  # recent recalls kept per chat


class RecallLog:
    """The last injection per chat, and a short list of recent recalls (query, mode, usage), kept in memory:
    the panel shows what the model saw since the service started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last: dict[str, dict[str, Any]] = {}
        self.recent: dict[str, deque[dict[str, Any]]] = {}

    def record(self, chat_id: str, injection: dict[str, Any]) -> None:
        entry = {"at": utc_now(), "query": injection.get("query", ""), "mode": injection.get("mode"),
                 "reused": injection.get("reused", False), "tokens": injection.get("tokens", {}).get("total", 0),
                 "nodes": sum(len(b) for b in injection.get("blocks", {}).values()),
                 "usage": injection.get("usage", {})}
        with self._lock:
            self.last[chat_id] = {**injection, "at": entry["at"]}
            self.recent.setdefault(chat_id, deque(maxlen=RECENT)).appendleft(entry)

    def evict(self, chat_id: str) -> None:
        with self._lock:
            self.last.pop(chat_id, None)
            self.recent.pop(chat_id, None)
