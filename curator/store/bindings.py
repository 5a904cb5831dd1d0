"""Which memory chat a front end's chat is: a binding from (front end, scope, chat file) to a chat id.

A front end names its chats its own way: SillyTavern by the character (its avatar file) or group a chat belongs to
(`scope`) and the chat's file name (`file`). A binding ties that pair to one memory chat, so a chat's memory
follows the front end's chat, not a URL: a rename moves the binding, a new chat or a branch gets a chat of its own,
and two characters' chats never share one. Each memory chat has at most one binding.

Also here: the recall cards, what recall injected for each reply (the front end shows them next to the reply).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from curator.errors import CuratorError, NotFound
from curator.store.db import Row
from curator.store.store import Store, utc_now

MAX_KEY = 500  # characters of a scope or file name


@dataclass
class Binding:
    frontend: str
    scope: str
    file: str
    chat_id: str
    label: str
    created_at: str
    updated_at: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _binding(row: Row) -> Binding:
    return Binding(row["frontend"], row["scope"], row["file"], row["chat_id"], row["label"], row["created_at"],
                   row["updated_at"])


def check_names(frontend: str, scope: str, file: str) -> None:
    """A clear error for a front end, scope or file name the store will not keep."""
    for what, value in (("front end", frontend), ("scope", scope), ("chat file", file)):
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_KEY \
                or any(ord(c) < 32 for c in value):
            raise CuratorError(f"invalid {what} {value!r}: use 1-{MAX_KEY} printable characters")


class Bindings:
    """The bindings of one store."""

    def __init__(self, store: Store):
        self.store = store

    def find(self, frontend: str, scope: str, file: str) -> Binding | None:
        row = self.store.conn.execute("SELECT * FROM chat_bindings WHERE frontend=? AND scope=? AND file=?",
                                      (frontend, scope, file)).fetchone()
        return None if row is None else _binding(row)

    def of_chat(self, chat_id: str) -> Binding | None:
        row = self.store.conn.execute("SELECT * FROM chat_bindings WHERE chat_id=?", (chat_id,)).fetchone()
        return None if row is None else _binding(row)

    def list(self, frontend: str | None = None, scope: str | None = None) -> list[Binding]:
        sql, params = "SELECT * FROM chat_bindings WHERE 1=1", []
        for column, value in (("frontend", frontend), ("scope", scope)):
            if value is not None:
                sql += f" AND {column}=?"
                params.append(value)
        return [_binding(r) for r in self.store.conn.execute(sql + " ORDER BY frontend, scope, file", params)]

    def bind(self, frontend: str, scope: str, file: str, chat_id: str, label: str = "") -> Binding:
        """Bind the front end's chat to `chat_id` (which must exist and be bound to nothing else)."""
        check_names(frontend, scope, file)
        now = utc_now()
        with self.store.transaction(chat_id) as conn:
            self.store.chat(chat_id)
            taken = conn.execute("SELECT scope, file FROM chat_bindings WHERE chat_id=?", (chat_id,)).fetchone()
            if taken is not None:
                raise CuratorError(f"chat {chat_id!r} is already bound to {taken[1]!r} ({taken[0]})",
                                   "Fork it for the other chat, or move the binding (rename).")
            if conn.execute("SELECT 1 FROM chat_bindings WHERE frontend=? AND scope=? AND file=?",
                            (frontend, scope, file)).fetchone():
                raise CuratorError(f"{file!r} ({scope}) is already bound to a memory chat",
                                   "Open it to use that memory, or unbind it first.")
            conn.execute("INSERT INTO chat_bindings (frontend, scope, file, chat_id, label, created_at, updated_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)", (frontend, scope, file, chat_id, label[:MAX_KEY], now, now))
        return self._bound(chat_id)

    def move(self, chat_id: str, scope: str, file: str, label: str | None = None) -> Binding:
        """The front end renamed (or moved) the chat: its binding follows, the memory stays."""
        found = self.of_chat(chat_id)
        if found is None:
            raise NotFound(f"chat {chat_id!r} is bound to no front-end chat")
        check_names(found.frontend, scope, file)
        with self.store.transaction(chat_id) as conn:
            other = conn.execute("SELECT chat_id FROM chat_bindings WHERE frontend=? AND scope=? AND file=?",
                                 (found.frontend, scope, file)).fetchone()
            if other is not None and other[0] != chat_id:
                raise CuratorError(f"{file!r} ({scope}) is already bound to memory chat {other[0]!r}",
                                   "Delete that binding first (its chat was deleted in the front end?).")
            conn.execute("UPDATE chat_bindings SET scope=?, file=?, label=?, updated_at=? WHERE chat_id=?",
                         (scope, file, found.label if label is None else label[:MAX_KEY], utc_now(), chat_id))
        return self._bound(chat_id)

    def _bound(self, chat_id: str) -> Binding:
        """The chat's binding, just written (another process may delete it the next moment: NotFound then)."""
        found = self.of_chat(chat_id)
        if found is None:
            raise NotFound(f"chat {chat_id!r} is bound to no front-end chat")
        return found

    def unbind(self, chat_id: str) -> bool:
        with self.store.transaction(chat_id) as conn:
            return conn.execute("DELETE FROM chat_bindings WHERE chat_id=?", (chat_id,)).rowcount > 0


class RecallCards:
    """What recall injected for each reply (its floor): the injection's blocks, nodes, scores, reasons and text,
    and who it was recalled for. The newest card per floor is kept; a fork takes the cards of its shared floors."""

    def __init__(self, store: Store):
        self.store = store

    def put(self, chat_id: str, floor: int, card: dict[str, Any]) -> None:
        text = json.dumps(card, ensure_ascii=False, separators=(",", ":"))
        with self.store.transaction(chat_id) as conn:
            conn.execute("INSERT INTO recall_cards (chat_id, floor, card_json, at) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (chat_id, floor) DO UPDATE SET card_json = excluded.card_json, at = excluded.at",
                         (chat_id, floor, text, utc_now()))

    def get(self, chat_id: str, floor: int) -> dict[str, Any] | None:
        row = self.store.conn.execute("SELECT card_json, at FROM recall_cards WHERE chat_id=? AND floor=?",
                                      (chat_id, floor)).fetchone()
        return None if row is None else {**json.loads(row[0]), "floor": floor, "at": row[1]}

    def floors(self, chat_id: str) -> list[int]:
        return [r[0] for r in self.store.conn.execute(
            "SELECT floor FROM recall_cards WHERE chat_id=? ORDER BY floor", (chat_id,))]


