"""The library face: `curator.open(data_dir)` gives a Memory, the one object front ends talk to."""

from __future__ import annotations

from pathlib import Path

from schemas import Schema, load_schema

from .chatfile import read_chat
from .exchange import ImportMode, export_graph, import_graph, read_graph_file
from .messages import Message
from .paths import data_dir as resolve_data_dir
from .queries import GraphView
from .store import Chat, CommitRecord, RollbackResult, Store


class Memory:
    """Memory for every chat under one data directory."""

    def __init__(self, data_dir: str | Path | None = None):
        self.store = Store(resolve_data_dir(data_dir))

    @property
    def data_dir(self) -> Path:
        return self.store.data_dir

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # chats
    def create_chat(self, chat_id: str, schema: Schema | str | Path = "default", settings: dict | None = None) -> Chat:
        """Create a chat using a schema object, a preset name or a schema file path."""
        if not isinstance(schema, Schema):
            schema = load_schema(schema)
        return self.store.create_chat(chat_id, schema, settings)

    def chats(self) -> list[str]:
        return self.store.chats()

    def chat(self, chat_id: str) -> Chat:
        return self.store.chat(chat_id)

    def graph(self, chat_id: str) -> GraphView:
        return self.store.graph(chat_id)

    def set_messages(self, chat_id: str, messages: list[Message]) -> None:
        self.store.set_messages(chat_id, messages)

    def load_chat_file(self, chat_id: str, path: str | Path) -> int:
        """Store the messages of a SillyTavern .jsonl or plain JSONL file as the chat's history."""
        messages = read_chat(path).messages
        self.store.set_messages(chat_id, messages)
        return len(messages)

    # the commit log
    def commit(self, chat_id: str, ops: list, anchor_floor: int, origin: str = "manual", note: str = "") -> CommitRecord:
        return self.store.commit(chat_id, ops, anchor_floor, origin, note)

    def rollback(self, chat_id: str, floor: int) -> RollbackResult:
        return self.store.rollback(chat_id, floor)

    # import / export
    def export(self, chat_id: str) -> dict:
        return export_graph(self.store, chat_id)

    def import_(self, chat_id: str, path: str | Path, mode: ImportMode = "restore", floor: int | None = None,
                max_bytes: int | None = None) -> CommitRecord:
        """Import a graph file into `chat_id` (created with the file's schema when new) as one commit."""
        graph, schema, source = read_graph_file(path, **({"max_bytes": max_bytes} if max_bytes else {}))
        return import_graph(self.store, chat_id, graph, schema, mode, floor, source)


def open(data_dir: str | Path | None = None) -> Memory:  # noqa: A001 - mirrors the documented API
    """Open the memory store in `data_dir` (default: $CURATOR_DATA or ~/.local/share/memory-curator)."""
    return Memory(data_dir)
