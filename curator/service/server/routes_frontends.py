"""Front ends that name their own chats (SillyTavern through its companion extension, `integrations/sillytavern/`):
open a chat (bound, forked, renamed or created: `curator/sync/frontend.py`, then synced), rename, forget (unbind or
delete its memory), list the bindings; and fork any chat at a floor.

A front end's chat is (front end, scope, file): for SillyTavern the scope is `character:<avatar file>` or
`group:<group id>` and the file is the chat file's name. The memory chat it is bound to is named in the answer;
the front end keeps it in the chat's metadata (its `claim`), which is how a branch, a checkpoint or a renamed chat
is recognised when it is first opened.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import Field
from typing import TYPE_CHECKING, Any, Literal

from curator.errors import CuratorError, NotFound
from curator.service.server.deps import MessageIn, ServiceDep, Strict
from curator.service.server.frontend_status import extraction_status, model_update
from curator.store.bindings import Bindings, check_names
from curator.sync.frontend import Claim, FrontendChats

if TYPE_CHECKING:
    from curator.service.server.state import Service

router = APIRouter(tags=["front ends"])
Frontend = Literal["sillytavern"]
KEY = Field(min_length=1, max_length=500)


class ClaimIn(Strict):
    chat: str = Field(min_length=1, max_length=200, description="the memory chat the front end's metadata names")
    file: str = Field(default="", max_length=500, description="the chat file that memory chat was bound to then")


class ModelIn(Strict):
    base_url: str = Field(min_length=1, max_length=2000, description="an OpenAI-compatible base URL")
    model: str = Field(min_length=1, max_length=300)
    api_key_env: str | None = Field(default=None, max_length=200,
                                    description="the variable (on the service's machine) holding its key")


class OpenIn(Strict):
    scope: str = KEY
    file: str = KEY
    label: str = Field(default="", max_length=500, description="the character's or group's name")
    claim: ClaimIn | None = None
    files: list[str] = Field(default_factory=list, max_length=20_000,
                             description="the chat files the scope has now (tells a branch from a rename)")
    schema_: str | dict[str, Any] | None = Field(default=None, alias="schema",
                                       description="for a new chat: a preset name or a schema (the card's)")
    model: ModelIn | None = Field(default=None, description="the model the front end names for extraction, used "
                                  "when config.yaml configures none")
    messages: list[MessageIn] = Field(default_factory=list, max_length=20_000)
    extract: bool = True


class RenameIn(Strict):
    scope: str = KEY
    file: str = KEY
    new_file: str = KEY
    label: str | None = Field(default=None, max_length=500)


class ForgetIn(Strict):
    scope: str = Field(min_length=1, max_length=500, description="the scope, or `group:*` for any group")
    file: str = KEY
    delete_memory: bool = Field(default=False, description="delete the memory chat too (else only unbind it)")


class ForkIn(Strict):
    chat: str | None = Field(default=None, min_length=1, max_length=200,
                             description="the new chat's id (default: made from the parent's)")
    floor: int = Field(ge=-1, le=2**62, description="the last floor the fork shares with its parent")


def _chats(service: Service) -> FrontendChats:
    return FrontendChats(service.memory.history)


def _open(service: Service, frontend: str, body: OpenIn) -> dict[str, Any]:
    messages = [m.message() for m in body.messages]
    chats = _chats(service)
    claim = Claim(body.claim.chat, body.claim.file) if body.claim else None
    model = body.model.model_dump(exclude_none=True) if body.model else None
    if model:
        service.memory.settings.for_chat({"model": model})  # a key variable it may not use: refused, nothing made
    check_names(frontend, body.scope, body.file)  # before any lock or write
    # one opener per front-end chat at a time: two tabs opening it at once must not both make a memory chat
    with service.writer(f"front-end chat {frontend} {body.scope} {body.file}"):
        opened = chats.resolve(frontend, body.scope, body.file, label=body.label, claim=claim, files=body.files,
                               messages=messages, schema=body.schema_, settings={"model": model} if model else None)
    with service.writer(opened.chat_id):
        if model:
            model_update(service, opened.chat_id, model)
        chats.sync(opened, messages)
        job = service.jobs.submit(opened.chat_id, "extract", reuse_active=True) \
            if body.extract and opened.sync is not None and opened.sync.due else None
    chat = service.memory.chat(opened.chat_id)
    return {**opened.to_dict(), "job": job, "schema": chat.schema.name, "settings": chat.settings,
            "extraction": extraction_status(service, opened.chat_id)}


@router.post("/frontends/{frontend}/open")
async def open_chat(frontend: Frontend, body: OpenIn, service: ServiceDep) -> dict[str, Any]:
    """The memory chat of the front end's chat: bound, forked (a branch or a checkpoint: at the last floor both
    share), renamed or created; then its messages are synced (edits, deletions and swipes since it was last seen
    roll memory back) and what is due is queued for extraction."""
    return await run_in_threadpool(_open, service, frontend, body)


@router.post("/frontends/{frontend}/rename")
def rename_chat(frontend: Frontend, body: RenameIn, service: ServiceDep) -> dict[str, Any]:
    """The front end renamed a chat: its memory follows."""
    binding = _chats(service).rename(frontend, body.scope, body.file, body.new_file, body.label)
    return {"chat": binding.chat_id, "binding": binding.to_dict()}


@router.post("/frontends/{frontend}/forget")
def forget_chat(frontend: Frontend, body: ForgetIn, service: ServiceDep) -> dict[str, Any]:
    """The front end deleted a chat: unbind its memory, or (`delete_memory`) delete the memory chat too."""
    bindings = Bindings(service.memory.store)
    if body.scope.endswith(":*"):
        found = [b for b in bindings.list(frontend) if b.file == body.file and b.scope.startswith(body.scope[:-1])]
        if len(found) > 1:
            raise CuratorError(f"{len(found)} chats named {body.file!r} under {body.scope}", "Name the scope.")
        binding = found[0] if found else None
    else:
        binding = bindings.find(frontend, body.scope, body.file)
    if binding is None:
        raise NotFound(f"{body.file!r} ({body.scope}) is bound to no memory chat")
    with service.writer(binding.chat_id):
        if body.delete_memory:
            service.memory.delete_chat(binding.chat_id)
        else:
            bindings.unbind(binding.chat_id)
    if body.delete_memory:
        service.evict_floors(binding.chat_id, 0)
        service.recall_log.evict(binding.chat_id)
        service.event_log.evict(binding.chat_id)
    return {"chat": binding.chat_id, "deleted": body.delete_memory, "unbound": True}


@router.get("/frontends/{frontend}/bindings")
def list_bindings(frontend: Frontend, service: ServiceDep, scope: str | None = None) -> dict[str, Any]:
    return {"bindings": [b.to_dict() for b in Bindings(service.memory.store).list(frontend, scope)]}


@router.post("/chats/{chat_id}/fork")
def fork(chat_id: str, body: ForkIn, service: ServiceDep) -> dict[str, Any]:
    """A new chat sharing the parent's floors 0..`floor` and its memory of them (a copied commit log); the parent
    is untouched. No model call."""
    from curator.sync.frontend import new_chat_id

    new = body.chat or new_chat_id(chat_id, prefix="fork")
    with service.writer(chat_id):
        result = service.memory.fork(chat_id, new, body.floor)
    return result.to_dict()
