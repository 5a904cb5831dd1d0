"""The proxy's input side: the chat id (any Unicode, percent-encoded in headers) and the refusal of requests that
would silently erase memory.

A front end that reuses one `user` value for several chats, or that sends a different chat under the same id,
would otherwise make the proxy roll the stored chat back from floor 0 and wipe its memory. So a request that
would roll back more than `max_rollback` floors, or whose messages share nothing with the stored chat's start, is
answered 409 `rollback_refused` and changes nothing. The client says it means it with the header
`X-Curator-Allow-Rollback: true` (or uses another chat id).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote

from curator.errors import CuratorError
from curator.store.messages import Message

ALLOW_HEADER = "x-curator-allow-rollback"
MAX_CHAT_ID = 200


class RollbackRefused(CuratorError):
    """The request would roll back more memory than a proxy request may without saying so."""


def header_chat_id(raw: str | None) -> str | None:
    """The chat id of an `X-Curator-Chat` header: percent-encoded UTF-8; raw UTF-8 (read by the server as
    Latin-1) is accepted too."""
    if not raw:
        return raw
    try:
        raw = raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        pass
    return unquote(raw, errors="strict")


def encode_chat_id(chat_id: str) -> str:
    """A chat id as a header value (HTTP headers carry Latin-1 only): percent-encoded UTF-8."""
    return quote(chat_id, safe="")


def check_chat_id(chat_id: str) -> str:
    if len(chat_id) > MAX_CHAT_ID or not chat_id.strip() or any(ord(c) < 32 for c in chat_id):
        raise CuratorError(f"bad chat id {chat_id[:40]!r}: 1-{MAX_CHAT_ID} characters, no control characters",
                           "Give the chat id in the path, the X-Curator-Chat header (percent-encoded) or `user`.")
    return chat_id


def allowed(headers: Mapping[str, str]) -> bool:
    return headers.get(ALLOW_HEADER, "").strip().lower() in ("1", "true", "yes")


def rollback_floors(stored: list[Message], floors: list[Message], start: int) -> tuple[int, bool]:
    """(how many stored floors syncing `floors` at `start` would roll back, whether the two share a start)."""
    shared = 0
    while (shared < len(floors) and start + shared < len(stored)
           and stored[start + shared].hash == floors[shared].hash):
        shared += 1
    dirty = start + shared
    return max(len(stored) - dirty, 0), shared > 0


def check_rollback(stored: list[Message], floors: list[Message], start: int, max_rollback: int | None) -> None:
    """Raise RollbackRefused when the request would erase more than `max_rollback` floors' memory, or when it
    shares nothing with the stored chat (a different chat under the same id). None: no limit."""
    if max_rollback is None or max_rollback < 0 or not stored or not floors:
        return
    lost, shared = rollback_floors(stored, floors, start)
    if lost == 0:
        return
    hint = ("If you mean it (an edit far back), send the header `X-Curator-Allow-Rollback: true`; if this is "
            "another chat, give it its own id (path /v1/chats/{id}/chat/completions, X-Curator-Chat or `user`).")
    if not shared and start == 0:
        raise RollbackRefused(f"the request's messages share no start with the stored chat ({len(stored)} floors): "
                              "syncing it would erase that chat's memory", hint)
    if lost > max_rollback:
        raise RollbackRefused(f"the request would roll back {lost} floors of the stored chat (from floor "
                              f"{len(stored) - lost}; the proxy allows {max_rollback})", hint)
