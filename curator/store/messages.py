"""Chat messages (floors) and the 64-bit floor hash that tells when one was edited, deleted or swiped.

The hash covers role, name and text, not the swipe index: a client that cannot see swipe indices (the proxy)
must still recognise a floor, and a swipe that changes the text changes the hash anyway."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard, get_args

from curator.errors import MessageError

Role = Literal["user", "assistant", "system"]


def _is_role(value: object) -> TypeGuard[Role]:
    return value in get_args(Role)


@dataclass(frozen=True)
class Message:
    """One floor of a chat. `text` is the active swipe's text; `swipes` holds every alternative."""

    role: Role
    name: str
    text: str
    swipe_id: int = 0
    swipes: list[str] = field(default_factory=list, compare=False)
    sent_at: str | None = field(default=None, compare=False)

    @property
    def hash(self) -> int:
        return floor_hash(self.role, self.name, self.text, 0)

    @property
    def legacy_hash(self) -> int:
        """The hash as stored before it left out the swipe index (databases written by older versions)."""
        return floor_hash(self.role, self.name, self.text, self.swipe_id)


# What the library accepts wherever it takes a message: a `Message`, or a plain dict as OpenAI's API and our HTTP API
# write them ({"role": "user", "name": "Ann", "content": "..."}; "text" for "content" too).
MessageLike = Message | Mapping[str, Any]
_KEYS = ("role", "name", "content", "text", "swipe_id", "swipes", "sent_at")


def as_message(item: MessageLike, where: str = "message") -> Message:
    """A `Message` from a `Message` or a plain dict; a dict that is not one is a MessageError naming `where`."""
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise MessageError(f"{where} is a {type(item).__name__}, not a message")
    unknown = sorted(str(k) for k in item if k not in _KEYS)
    if unknown:
        raise MessageError(f"{where} has unknown key(s) {', '.join(map(repr, unknown))}")
    role = item.get("role")
    if not _is_role(role):
        raise MessageError(f"{where} has role {role!r}; a message's role is 'user', 'assistant' or 'system'")
    if "content" in item and "text" in item:
        raise MessageError(f"{where} has both 'content' and 'text'; give one")
    text = _content_text(item.get("content", item.get("text")), where)
    name = item.get("name") or ""
    swipes = item.get("swipes") or []
    swipe_id = item.get("swipe_id") or 0
    if not isinstance(name, str):
        raise MessageError(f"{where} has a name that is not a string: {name!r}")
    if not isinstance(swipes, list) or not all(isinstance(s, str) for s in swipes):
        raise MessageError(f"{where} has 'swipes' that is not a list of strings")
    if not isinstance(swipe_id, int) or swipe_id < 0:
        raise MessageError(f"{where} has 'swipe_id' {swipe_id!r}; it is a floor's swipe number, 0 or more")
    return Message(role, name, text, swipe_id, list(swipes), item.get("sent_at"))


def as_messages(items: Iterable[MessageLike], what: str = "messages") -> list[Message]:
    """Every item as a `Message` (see `as_message`)."""
    if isinstance(items, (str, bytes, Mapping)):
        raise MessageError(f"{what} is a {type(items).__name__}, not a list of messages")
    return [as_message(item, f"{what}[{i}]") for i, item in enumerate(items)]


def _content_text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI's content parts: the text ones, joined
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    if content is None:
        raise MessageError(f"{where} has no 'content' (or 'text')")
    raise MessageError(f"{where} has 'content' of type {type(content).__name__}; give a string")


def floor_hash(role: str, name: str, text: str, swipe_id: int) -> int:
    """64-bit digest of what makes a floor what it is, as a signed integer (SQLite's INTEGER range)."""
    payload = json.dumps([role, name, text, swipe_id], ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.blake2b(payload.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def latest_assistant_floor(messages: list[Message]) -> int | None:
    """The floor of the newest assistant reply, or None when there is none."""
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)


def manual_anchor_floor(messages: list[Message]) -> int:
    """Where a commit written by hand (MCP, panel, HTTP) is anchored when no floor is given: the newest user
    message, the one the latest reply answers. Regenerating or swiping that reply (a rollback of its floor)
    keeps the commit; editing or deleting the user message, or anything before it, rolls it back like the
    memory around it. 0 for a chat with no user message yet."""
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), 0)
