"""The proxy's input side: the chat id (any Unicode, percent-encoded in headers) and the one refusal left for
requests that would replace a chat or empty most of it.

An edit far back is a front end's ordinary use: it is synced like any other, and what it reverts is kept in the trash
(reported in the answer's `X-Curator-Reverted` headers; `curator undo`, the panel or `POST .../undo` restore it). What
is still refused (409 `rollback_refused`, nothing changed) is a request that would revert more than
`history.ask_above` commits (3 by default) while it shares no floor with the stored chat (a front end reusing one id
for another chat) or would leave the chat fewer than half of its floors. The client says it means it with the header
`X-Curator-Allow-Rollback: true` (or uses another chat id). The refusal's message is what SillyTavern shows (it drops
the hint), so it names the SillyTavern setting to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote

from collections.abc import Callable

from curator.errors import CuratorError, RollbackRefused  # noqa: F401 - RollbackRefused is imported from here too
from curator.store.messages import Message

ALLOW_HEADER = "x-curator-allow-rollback"
MAX_CHAT_ID = 200
# Where SillyTavern (1.12) takes extra request headers for a Custom (OpenAI-compatible) source: a YAML object.
ST_HEADERS = ("SillyTavern: API Connections > Chat Completion source Custom (OpenAI-compatible) > Additional "
              "Parameters > Include Request Headers")


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
    """(how many stored floors syncing `floors` at `start` would roll back, whether any floor of the request is the
    stored floor at its place)."""
    shared = 0
    while (shared < len(floors) and start + shared < len(stored)
           and stored[start + shared].hash == floors[shared].hash):
        shared += 1
    dirty = start + shared
    common = shared > 0 or any(start + i < len(stored) and stored[start + i].hash == m.hash
                               for i, m in enumerate(floors))
    return max(len(stored) - dirty, 0), common


def check_rollback(stored: list[Message], floors: list[Message], start: int, reverting: Callable[[int], int],
                   ask_above: int, base_url: str = "", max_rollback: int | None = None) -> None:
    """Raise RollbackRefused when the request would revert more than `ask_above` commits (`reverting(floor)` counts
    them from a floor) and either shares no floor with the stored chat or leaves it fewer than half of its floors.
    `max_rollback` (None: no limit) also caps the floors any request may roll back, for who wants that."""
    if not stored or not floors:
        return
    lost, common = rollback_floors(stored, floors, start)
    if lost == 0:
        return
    kept = start + len(floors)
    chat_url = f"{base_url.rstrip('/')}/v1/chats/<another id>" if base_url else "/v1/chats/<another id>"
    how = (f"Nothing was changed. If you mean it, send the header `X-Curator-Allow-Rollback: true` with one request "
           f"({ST_HEADERS}: add the line `X-Curator-Allow-Rollback: true`, generate, then remove it); if this is "
           f"another chat, give it its own id (Custom Endpoint (Base URL) {chat_url}). What it reverts is kept: "
           "`curator undo` brings it back.")
    if max_rollback is not None and max_rollback >= 0 and lost > max_rollback:
        raise RollbackRefused(f"memory-curator refused: the request would roll back {lost} floors of the stored chat "
                              f"(from floor {len(stored) - lost}; this service allows {max_rollback}). {how}", how)
    at_stake = reverting(len(stored) - lost)
    if at_stake <= ask_above:
        return
    if not common and start == 0:
        raise RollbackRefused(f"memory-curator refused: the request's messages share no floor with the stored chat "
                              f"({len(stored)} floors): syncing it would replace that chat and revert {at_stake} "
                              f"commits of its memory. {how}", how)
    if kept * 2 < len(stored):
        raise RollbackRefused(f"memory-curator refused: the request would leave {kept} of the stored chat's "
                              f"{len(stored)} floors and revert {at_stake} commits of its memory. {how}", how)
