"""Chats: create, list, get, delete, settings, schema; the chat's messages and history sync; schema presets."""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.concurrency import run_in_threadpool
from pydantic import Field
from typing import TYPE_CHECKING, Any

from curator.schemas import Schema, dump_schema, load_preset, preset_names, schema_from_data

from curator.api.chat_settings import ChatSettingsPatch, apply
from curator.service.server.deps import ServiceDep, Strict, SyncIn, window
from curator.service.server.params import Floor, Limit

if TYPE_CHECKING:
    from curator.service.server.state import Service

router = APIRouter(tags=["chats"])


class ChatIn(Strict):
    id: str = Field(min_length=1, max_length=200)
    schema_: str | dict[str, Any] = Field(default="default", alias="schema",
                                          description="a preset name, or a schema object")
    settings: ChatSettingsPatch = Field(default_factory=ChatSettingsPatch, description="the chat's own settings "
                                        "(overrides of config.yaml)")


def _chat_dict(service: Service, chat_id: str) -> dict[str, Any]:
    chat = service.memory.chat(chat_id)
    return {"id": chat.id, "schema": chat.schema.name, "settings": chat.settings, "created_at": chat.created_at,
            "updated_at": chat.updated_at, "floors": len(service.memory.store.messages(chat_id)),
            "graph_version": service.memory.store.graph_version(chat_id)}


def _schema(value: str | dict[str, Any]) -> Schema:
    return load_preset(value) if isinstance(value, str) else schema_from_data(value, "request schema")


@router.post("/chats", status_code=status.HTTP_201_CREATED)
def create_chat(body: ChatIn, service: ServiceDep) -> dict[str, Any]:
    service.memory.create_chat(body.id, _schema(body.schema_), apply(service.memory.settings, {}, body.settings))
    return _chat_dict(service, body.id)


@router.get("/chats")
def list_chats(service: ServiceDep) -> dict[str, Any]:
    return {"chats": service.memory.chats()}


@router.get("/chats/{chat_id}")
def get_chat(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    return _chat_dict(service, chat_id)


@router.delete("/chats/{chat_id}")
def delete_chat(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    with service.writer(chat_id):
        service.memory.chat(chat_id)
        service.memory.delete_chat(chat_id)
    service.recall_log.evict(chat_id)  # the panel's last injection and recent recalls go with it
    service.event_log.evict(chat_id)
    return {"deleted": chat_id}


@router.put("/chats/{chat_id}/settings")
def put_settings(chat_id: str, body: ChatSettingsPatch, service: ServiceDep) -> dict[str, Any]:
    """Replace the chat's own settings as a whole (what it does not give follows config.yaml); PATCH changes some."""
    with service.writer(chat_id):
        service.memory.update_chat_settings(chat_id, body.model_dump(exclude_unset=True, mode="json"), replace=True)
    return _chat_dict(service, chat_id)


@router.get("/chats/{chat_id}/schema")
def get_chat_schema(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    return service.memory.chat(chat_id).schema.to_data()


@router.put("/chats/{chat_id}/schema")
def put_chat_schema(chat_id: str, body: dict[str, Any], service: ServiceDep) -> dict[str, Any]:
    schema = schema_from_data(body.get("schema", body) if isinstance(body, dict) else body, "request schema")
    with service.writer(chat_id):
        service.memory.store.set_schema(chat_id, schema)
    return {"chat": chat_id, "schema": schema.name, "types": list(schema.types)}


@router.get("/schemas")
def list_schemas() -> dict[str, Any]:
    return {"presets": preset_names()}


@router.get("/schemas/{name}")
def get_schema(name: str, format: str = "json") -> dict[str, Any]:
    schema = load_preset(name)
    return {"name": name, "yaml": dump_schema(schema, "yaml")} if format == "yaml" else schema.to_data()


@router.post("/schemas/validate")
def validate_schema(body: dict[str, Any]) -> dict[str, Any]:
    schema = schema_from_data(body, "request schema")
    return {"valid": True, "name": schema.name, "types": list(schema.types)}


@router.get("/chats/{chat_id}/messages")
def get_messages(chat_id: str, service: ServiceDep, start: Floor = 0, limit: Limit = 200) -> dict[str, Any]:
    service.memory.chat(chat_id)
    messages = service.memory.store.messages(chat_id)
    return {"floors": len(messages), "messages": [
        {"floor": f, "role": m.role, "name": m.name, "text": m.text, "swipe_id": m.swipe_id, "hash": m.hash}
        for f, m in enumerate(messages[start:start + limit], start=start)]}


@router.post("/chats/{chat_id}/sync")
async def sync(chat_id: str, body: SyncIn, service: ServiceDep) -> dict[str, Any]:
    """Follow the chat: roll memory back from the earliest changed floor (or restore it from the swipe shelf)
    and queue re-extraction of what is due as a job. What it reverts is kept as a trash batch (`batch`; POST
    .../undo restores it). A sync that would empty the chat or revert more than a few commits needs
    `allow_rollback: true`."""
    messages, start = window(body)
    limit = None if body.allow_rollback else service.memory.settings.history.ask_above
    report, job = await run_in_threadpool(service.sync, chat_id, messages, start, body.extract, max_revert=limit,
                                          allow_empty=body.allow_rollback)
    return {**report.to_dict(), "job": job}
