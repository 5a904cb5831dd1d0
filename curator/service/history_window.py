"""The raw-history window: the proxy may forward only the last K floors of the chat plus the memory injection.

The memory then stands in for the older history, which is where the token saving comes from. Off by default
(`recall.history_floors: 0` in config.yaml, or per request the `X-Curator-History-Floors` header); every system
message is kept (the character card, world info, author's notes), only old user and assistant messages go, and the
tokens they held are reported with each response (`X-Curator-History-Tokens-Saved`)."""

from __future__ import annotations

import json
from typing import Any

from curator.errors import CuratorError
from curator.llm.tokens import count_tokens

HEADER = "x-curator-history-floors"
SAVED_HEADER = "x-curator-history-tokens-saved"


def history_floors(setting: int, header: str | None) -> int:
    """The window for one request: the header when given (0 turns it off), else the setting."""
    if header is None or not header.strip():
        return setting
    try:
        value = int(header)
    except ValueError:
        raise CuratorError(f"{HEADER} must be a whole number of floors (0 = off), not {header!r}") from None
    if value < 0:
        raise CuratorError(f"{HEADER} must be 0 or more, not {value}")
    return value


def keep_recent_floors(messages: list[dict[str, Any]], floors: int) -> tuple[list[dict[str, Any]], int, int]:
    """`messages` without the user and assistant messages older than the last `floors` of them (0 = keep all).
    Returns the kept messages, how many were dropped and the tokens they held."""
    if floors <= 0:
        return messages, 0, 0
    chat = [i for i, m in enumerate(messages) if m.get("role") in ("user", "assistant")]
    cut = set(chat[:-floors]) if len(chat) > floors else set()
    if not cut:
        return messages, 0, 0
    saved = sum(count_tokens(_text(messages[i].get("content"))) for i in cut)
    return [m for i, m in enumerate(messages) if i not in cut], len(cut), saved


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return json.dumps(content) if content is not None else ""
