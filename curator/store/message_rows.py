"""Reads and rewrites of the `messages` table beyond `Store.messages`: the "name: text" lines recall and the index
build documents from, the stored floor hashes, and in-place rewrites that keep each floor's memory."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from curator.store.messages import Message
from curator.store.store import Store


def _line(name: str, text: str) -> str:
    return f"{name}: {text}" if name else text


def message_lines(store: Store, chat_id: str, floors: set[int] | None = None) -> dict[int, str]:
    """Each floor's message (or only those of `floors`) as a "name: text" line."""
    if floors is None:
        rows = store.conn.execute("SELECT floor, name, text FROM messages WHERE chat_id=?", (chat_id,))
        return {floor: _line(name, text) for floor, name, text in rows}
    wanted, lines = sorted(floors), {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        rows = store.conn.execute(
            f"SELECT floor, name, text FROM messages WHERE chat_id=? AND floor IN ({', '.join('?' * len(chunk))})",
            (chat_id, *chunk))
        for floor, name, text in rows:
            lines[floor] = _line(name, text)
    return lines


def messages_from(store: Store, chat_id: str, floor: int) -> Iterator[tuple[int, str, str, str]]:
    """(floor, role, name, text) of the messages from `floor` on."""
    yield from store.conn.execute("SELECT floor, role, name, text FROM messages WHERE chat_id=? AND floor >= ?",
                                  (chat_id, floor))


def floor_hashes(store: Store, chat_id: str) -> list[tuple[int, int | None]]:
    """(floor, stored hash) of every message, by floor."""
    return [(floor, digest) for floor, digest in store.conn.execute(
        "SELECT floor, hash FROM messages WHERE chat_id=? ORDER BY floor", (chat_id,))]


def set_floor_hashes(store: Store, chat_id: str, hashes: Sequence[tuple[int, int]]) -> None:
    """Store new hashes for floors whose text is unchanged (a hash function that changed)."""
    with store.transaction(chat_id) as conn:
        conn.executemany("UPDATE messages SET hash=? WHERE chat_id=? AND floor=?",
                         [(digest, chat_id, floor) for floor, digest in hashes])


def rewrite_messages(store: Store, chat_id: str, copies: dict[int, Message]) -> None:
    """Replace the name and text of some floors in place (their memory stays: the same turns, written anew) and
    bump the chat's messages version so readers know."""
    with store.transaction(chat_id) as conn:
        conn.executemany("UPDATE messages SET name=?, text=?, hash=? WHERE chat_id=? AND floor=?",
                         [(m.name, m.text, m.hash, chat_id, f) for f, m in sorted(copies.items())])
        conn.execute("UPDATE chats SET messages_version = messages_version + 1 WHERE id=?", (chat_id,))
