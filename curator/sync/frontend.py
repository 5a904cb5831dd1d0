"""A front end's chat opened in memory: which memory chat it is, made or forked when needed, then synced.

SillyTavern (through its companion extension) names a chat by its scope (`character:<avatar>` or `group:<id>`) and
file, and keeps in the chat's own metadata the memory chat it was bound to (`claimed`: copied along when the user
branches, checkpoints or renames the chat). Opening it resolves, in this order:

1. **bound**: the (scope, file) pair has a binding: that chat (the metadata is only a hint);
2. **forked**: the metadata names a memory chat whose own file still exists in the front end (`files`), or that
   belongs to another scope (a chat carried to another character): this chat is a copy of it (a branch or a
   checkpoint), so it gets a fork of that memory at the last floor both chats share (by their floor hashes), the
   parent untouched; two scopes never share a memory chat;
3. **renamed**: the metadata names a memory chat of the same scope whose file is gone: the chat was renamed: the
   binding follows, the memory stays;
4. **created**: otherwise a new memory chat (the character card's schema, if it carries one).

Then the chat's messages are synced (`HistorySync`): an edit, a deletion or a swipe since it was last seen rolls
back from there, a fork finds its shared floors already there (no model call).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from curator.errors import CuratorError
from curator.schemas import Schema, load_preset, schema_from_data
from curator.store.bindings import Binding, Bindings, check_names
from curator.store.forks import ForkResult, fork_chat, shared_floors
from curator.store.messages import Message
from curator.sync.history import HistoryReport, HistorySync


@dataclass
class Claim:
    """What the front end's own chat metadata says: the memory chat, and the file it was bound to then."""

    chat_id: str
    file: str = ""


@dataclass
class Opened:
    chat_id: str
    action: str  # bound | forked | renamed | created
    binding: Binding
    fork: ForkResult | None = None
    renamed_from: str | None = None
    sync: HistoryReport | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"chat": self.chat_id, "action": self.action, "binding": self.binding.to_dict(),
                "fork": self.fork.to_dict() if self.fork else None, "renamed_from": self.renamed_from,
                "sync": self.sync.to_dict() if self.sync else None, "notes": self.notes}


def new_chat_id(label: str, prefix: str = "st") -> str:
    """A readable, unique memory chat id: `st-<label>-<8 hex>` (the label's letters and digits, any script)."""
    slug = re.sub(r"[^\w]+", "-", label, flags=re.UNICODE).strip("-_")[:40] or "chat"
    return f"{prefix}-{slug}-{uuid.uuid4().hex[:8]}"


def card_schema(value: str | dict[str, Any] | None) -> Schema:
    """The schema a character card names (`data.extensions.memory_curator.schema`): a preset name or a schema."""
    if value is None or value == "":
        return load_preset("default")
    if isinstance(value, str):
        return load_preset(value)
    return schema_from_data(value, "the character card's schema")


class FrontendChats:
    """Opening, renaming and forgetting front-end chats over one store."""

    def __init__(self, history: HistorySync):
        self.history = history
        self.store = history.store
        self.bindings = Bindings(self.store)

    def resolve(self, frontend: str, scope: str, file: str, *, label: str = "", claim: Claim | None = None,
                files: list[str] | None = None, messages: list[Message] | None = None,
                schema: str | dict[str, Any] | None = None, settings: dict[str, Any] | None = None) -> Opened:
        """Which memory chat the front end's chat is (module docstring), made, forked or moved as needed. No sync."""
        check_names(frontend, scope, file)  # before anything is made
        found = self.bindings.find(frontend, scope, file)
        if found is not None:
            opened = Opened(found.chat_id, "bound", found)
            if claim and claim.chat_id != found.chat_id:
                opened.notes.append(f"the chat's metadata names memory chat {claim.chat_id!r}; its binding, "
                                    f"{found.chat_id!r}, wins")
            return opened
        claimed = self.bindings.of_chat(claim.chat_id) if claim and self.store.has_chat(claim.chat_id) else None
        if claim and self.store.has_chat(claim.chat_id):
            if claimed is None:  # a memory chat no front-end chat holds (unbound, or from before bindings)
                return Opened(claim.chat_id, "bound", self.bindings.bind(frontend, scope, file, claim.chat_id, label))
            if (claimed.frontend, claimed.scope) != (frontend, scope) or claimed.file in (files or ()):
                # a copy (a branch, a checkpoint), or a chat carried to another character: never shared
                return self._fork(frontend, scope, file, label, claimed, messages or [])
            moved_from = claimed.file
            return Opened(claim.chat_id, "renamed", self.bindings.move(claim.chat_id, scope, file, label),
                          renamed_from=moved_from)
        chat_id = new_chat_id(label or file)
        self.store.create_chat(chat_id, card_schema(schema), settings or {})
        opened = Opened(chat_id, "created", self.bindings.bind(frontend, scope, file, chat_id, label))
        if claim:
            opened.notes.append(f"the chat's metadata names memory chat {claim.chat_id!r}, which no longer exists")
        return opened

    def _fork(self, frontend: str, scope: str, file: str, label: str, parent: Binding,
              messages: list[Message]) -> Opened:
        stored = [m.hash for m in self.store.messages(parent.chat_id)]
        floor = shared_floors(stored, [m.hash for m in messages]) - 1
        chat_id = new_chat_id(label or file)
        result = fork_chat(self.store, parent.chat_id, chat_id, floor)
        opened = Opened(chat_id, "forked", self.bindings.bind(frontend, scope, file, chat_id, label), fork=result)
        return opened

    def sync(self, opened: Opened, messages: list[Message], start: int = 0) -> Opened:
        opened.sync = self.history.sync(opened.chat_id, messages, start)
        return opened

    def rename(self, frontend: str, scope: str, file: str, new_file: str, label: str | None = None) -> Binding:
        found = self.bindings.find(frontend, scope, file)
        if found is None:
            raise CuratorError(f"{file!r} ({scope}) is bound to no memory chat", "Open the chat once first.")
        return self.bindings.move(found.chat_id, scope, new_file, label)
