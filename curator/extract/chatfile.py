"""Read chats from files: SillyTavern `.jsonl` (metadata line, then one message per line) and plain JSONL of
`{role, name, content}`. Errors name the file and line; nothing is half-read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curator.errors import ChatFileError
from curator.store.messages import Message, Role
from curator.textfile import read_utf8

MAX_CHAT_BYTES = 256 * 1024 * 1024


@dataclass
class ChatFile:
    messages: list[Message]
    format: str  # "sillytavern" | "plain"
    user_name: str = ""
    character_name: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


def read_chat(path: str | Path) -> ChatFile:
    path = Path(path)
    return parse_chat(read_utf8(path, MAX_CHAT_BYTES, ChatFileError, "chat file"), str(path))


def parse_chat(text: str, source: str = "<chat>") -> ChatFile:
    _not_a_graph(text, source)
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ChatFileError(f"{source}, line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ChatFileError(f"{source}, line {number}: expected a JSON object")
        records.append((number, record))
    if not records:
        raise ChatFileError(f"{source}: the file holds no messages")
    first = records[0][1]
    if "mes" in first or "user_name" in first or "chat_metadata" in first:
        return _sillytavern(records, source)
    return _plain(records, source)


def _not_a_graph(text: str, source: str) -> None:
    """A memory-curator graph file (`*.graph.json`) given where a chat belongs: say which command reads it."""
    head = text.lstrip()[:4096]
    if head.startswith("{") and '"memory-curator/graph"' in head:
        raise ChatFileError(f"{source}: this is a memory-curator graph file, not a chat",
                            "Load it with `curator import FILE --chat ID`; nothing was stored.")


def _sillytavern(records: list[tuple[int, dict[str, Any]]], source: str) -> ChatFile:
    header: dict[str, Any] = {}
    if "mes" not in records[0][1]:
        header = records.pop(0)[1]
    messages = []
    for number, rec in records:
        if "mes" not in rec:
            raise ChatFileError(f"{source}, line {number}: a message needs 'mes'")
        text = rec["mes"]
        swipes = rec.get("swipes") or []
        swipe_id = rec.get("swipe_id") or 0
        if not isinstance(text, str) or not isinstance(swipes, list) or not isinstance(swipe_id, int):
            raise ChatFileError(f"{source}, line {number}: 'mes' must be text, 'swipes' a list, 'swipe_id' a number")
        if swipes and not 0 <= swipe_id < len(swipes):
            raise ChatFileError(f"{source}, line {number}: swipe_id {swipe_id} is outside its {len(swipes)} swipes")
        role: Role = "user" if rec.get("is_user") else "system" if rec.get("is_system") else "assistant"
        messages.append(Message(role=role, name=str(rec.get("name") or ""), text=text, swipe_id=swipe_id,
                                swipes=[str(s) for s in swipes], sent_at=_text(rec.get("send_date"))))
    return ChatFile(messages, "sillytavern", str(header.get("user_name") or ""),
                    str(header.get("character_name") or ""), header.get("chat_metadata") or {})


def _plain(records: list[tuple[int, dict[str, Any]]], source: str) -> ChatFile:
    messages = []
    for number, rec in records:
        role, content = rec.get("role"), rec.get("content")
        if role not in ("user", "assistant", "system") or not isinstance(content, str):
            raise ChatFileError(f"{source}, line {number}: expected {{role: user|assistant|system, content: text}}")
        messages.append(Message(role=role, name=str(rec.get("name") or role), text=content))
    return ChatFile(messages, "plain")


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def chat_messages(path: Path) -> list[Message]:
    """The file's messages; a file with no user or assistant message is refused (ingesting it would clear the
    chat's memory)."""
    messages = read_chat(path).messages
    if not any(m.role in ("user", "assistant") for m in messages):
        raise ChatFileError(f"{path}: the file holds no chat messages (only a header or system lines)",
                            "Nothing was changed. Check that this is the chat file you meant; ingesting it would "
                            "clear the chat's memory.")
    return messages
