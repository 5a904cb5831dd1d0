"""The graph of one chat: nodes and edges with filters, node create/edit/delete (each one commit), import and
export (graph JSON, SillyTavern World Info). Every query is scoped to the chat in the path."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, status
from pydantic import Field

from curator.errors import NotFound
from curator.store.exchange import import_graph, parse_graph
from curator.store.messages import manual_anchor_floor
from curator.store.ops import FieldValues
from curator.service.server.deps import ServiceDep, Strict
from curator.service.server.node_rules import check_names, check_title
from curator.service.server.params import Level, Limit, Offset, OptionalFloor

if TYPE_CHECKING:
    from curator.service.server.state import Service
    from curator.store.graph import Node

router = APIRouter(tags=["graph"])


class NodeIn(Strict):
    type: str
    title: str | None = None
    fields: FieldValues = Field(default_factory=dict)
    importance: float = Field(default=5.0, ge=0, le=10)
    anchor_floor: int | None = Field(
        default=None,
        ge=0,
        description="default: the newest user message's floor, so a regenerate or swipe of the reply keeps the change",
    )


class NodeEdit(Strict):
    title: str | None = None
    set_fields: FieldValues = Field(default_factory=dict)
    clear_fields: list[str] = Field(default_factory=list)
    importance: float | None = Field(default=None, ge=0, le=10)
    archived: bool | None = None
    anchor_floor: int | None = Field(default=None, ge=0)


class ImportIn(Strict):
    graph: dict[str, Any]
    mode: Literal["restore", "bind_latest", "bind_floor"] = "restore"
    floor: int | None = Field(default=None, ge=0)


def _anchor(service: Service, chat_id: str, given: int | None) -> int:
    """The floor given, else the newest user message's, so regenerating or swiping the reply keeps the commit."""
    return given if given is not None else manual_anchor_floor(service.memory.store.messages(chat_id))


def _commit(service: Service, chat_id: str, ops: list[dict[str, Any]], anchor: int | None,
            note: str) -> dict[str, Any]:
    with service.writer(chat_id):
        record = service.memory.commit(chat_id, ops, _anchor(service, chat_id, anchor), "manual", note)
    return {"commit": record.id, "anchor_floor": record.anchor_floor, "ops": record.ops}


def _node(service: Service, chat_id: str, node_id: str) -> Node:
    node = service.memory.graph(chat_id).get(node_id)
    if node is None:
        raise NotFound(f"no node {node_id!r} in chat {chat_id!r}", "List nodes with GET .../nodes.")
    return node


@router.get("/chats/{chat_id}/graph")
def graph_stats(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    return {"chat": chat_id, "graph_version": service.memory.store.graph_version(chat_id),
            "stats": service.memory.graph(chat_id).stats()}


@router.get("/chats/{chat_id}/nodes")
def list_nodes(chat_id: str, service: ServiceDep, type: str | None = None, level: Level = None,
               archived: bool | None = False, floor_from: OptionalFloor = None, floor_to: OptionalFloor = None,
               limit: Limit = 200, offset: Offset = 0) -> dict[str, Any]:
    graph = service.memory.graph(chat_id)
    if floor_from is not None or floor_to is not None:
        nodes = graph.timeline(floor_from or 0, floor_to, [type] if type else None, archived is not False)
        nodes = nodes[offset:offset + limit]
    else:
        nodes = graph.nodes(type=type, level=level, archived=archived, limit=min(limit, 5000), offset=offset)
    return {"nodes": [n.to_dict() for n in nodes]}


@router.get("/chats/{chat_id}/nodes/{node_id}")
def get_node(chat_id: str, node_id: str, service: ServiceDep) -> dict[str, Any]:
    node = _node(service, chat_id, node_id)
    return {**node.to_dict(), "edges": [e.to_dict() for e in service.memory.graph(chat_id).edges(node_id)]}


@router.get("/chats/{chat_id}/edges")
def list_edges(
    chat_id: str, service: ServiceDep, node: str | None = None, relation: str | None = None
) -> dict[str, Any]:
    return {"edges": [e.to_dict() for e in service.memory.graph(chat_id).edges(node, relation)]}


@router.post("/chats/{chat_id}/nodes", status_code=status.HTTP_201_CREATED)
def create_node(chat_id: str, body: NodeIn, service: ServiceDep) -> dict[str, Any]:
    op = {"op": "create_node", "type": body.type, "title": body.title, "fields": body.fields,
          "importance": body.importance}
    check_title(body.title)
    check_names(service.memory.graph(chat_id), service.memory.chat(chat_id).schema, body.type, body.fields)
    result = _commit(service, chat_id, [op], body.anchor_floor, "created through the API")
    return {**result, "node": result["ops"][0]["id"]}


@router.patch("/chats/{chat_id}/nodes/{node_id}")
def edit_node(chat_id: str, node_id: str, body: NodeEdit, service: ServiceDep) -> dict[str, Any]:
    node = _node(service, chat_id, node_id)
    check_title(body.title)
    check_names(service.memory.graph(chat_id), service.memory.chat(chat_id).schema, node.type, body.set_fields,
                exclude_id=node_id)
    ops: list[dict[str, Any]] = []
    change = body.model_dump(include={"title", "set_fields", "clear_fields", "importance"}, exclude_defaults=True)
    if change:
        ops.append({"op": "update_node", "id": node_id, **change})
    if body.archived is not None:
        ops.append({"op": "archive_node", "id": node_id, "archived": body.archived})
    if not ops:
        from curator.errors import CuratorError

        raise CuratorError("nothing to change", "Give title, set_fields, clear_fields, importance or archived.")
    return _commit(service, chat_id, ops, body.anchor_floor, "edited through the API")


@router.delete("/chats/{chat_id}/nodes/{node_id}")
def delete_node(chat_id: str, node_id: str, service: ServiceDep, anchor_floor: OptionalFloor = None) -> dict[str, Any]:
    _node(service, chat_id, node_id)
    return _commit(service, chat_id, [{"op": "delete_node", "id": node_id}], anchor_floor, "deleted through the API")


@router.get("/chats/{chat_id}/export")
def export(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    return service.memory.export(chat_id)


@router.get("/chats/{chat_id}/worldinfo")
def world_info(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    return service.memory.world_info(chat_id)


@router.post("/chats/{chat_id}/import", status_code=status.HTTP_201_CREATED)
def import_(chat_id: str, body: ImportIn, service: ServiceDep) -> dict[str, Any]:
    graph, schema, source = parse_graph(json.dumps(body.graph, ensure_ascii=False), "request graph")
    with service.writer(chat_id):
        record = import_graph(service.memory.store, chat_id, graph, schema, body.mode, body.floor, source)
    return {"commit": record.id, "anchor_floor": record.anchor_floor, "ops": len(record.ops)}
