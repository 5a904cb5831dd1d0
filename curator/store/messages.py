"""Chat messages (floors) and the 64-bit floor hash that tells when one was edited, deleted or swiped.

The hash covers role, name and text, not the swipe index: a client that cannot see swipe indices (the proxy)
must still recognise a floor, and a swipe that changes the text changes the hash anyway."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["user", "assistant", "system"]


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
