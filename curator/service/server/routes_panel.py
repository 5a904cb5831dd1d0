"""Read endpoints the memory panel needs beyond the core API: a chat's overview, its whole graph in one compact
answer, the last injection recall produced, rollback to a floor, and a schema change that keeps every node valid.

`install(app)` adds the router and starts remembering each chat's last injection (the recall endpoint and the
proxy both go through `Service.recall`)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.concurrency import run_in_threadpool
from pydantic import Field
from typing import TYPE_CHECKING, Any

from curator.schemas import schema_from_data

from curator.errors import NotFound
from curator.extract.extractor import due_floors, last_extracted_floor
from curator.llm.usage import extraction_failures
from curator.store.commit_log import newest_commit
from curator.store.usage import recent_steps
from curator.service.server.deps import ServiceDep, Strict
from curator.service.server.params import MAX_INT
from curator.service.server.routes_work import RecallIn

if TYPE_CHECKING:
    from curator.api.memory import Memory

router = APIRouter(tags=["panel"])

RECENT = 10  # recent extractions and recalls shown on the overview
RECENT_REVERTED = 3  # the newest reverted batches shown on the overview, each with its Restore button


class RollbackIn(Strict):
    floor: int = Field(ge=0, le=MAX_INT, description="undo every commit anchored at or after this floor (an "
                             "integer: not true, not \"7\")")


def install(app: FastAPI, responses: dict[int | str, dict[str, Any]] | None = None) -> None:
    """Register the panel's endpoints under /api/v1 (every recall's injection is recorded by the service:
    `Service.recall_log`)."""
    app.include_router(router, prefix="/api/v1", responses=responses)


@router.get("/chats/{chat_id}/overview")
def overview(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """Counts, fragmentation, chat / vector / history status, recent extractions and recalls with their cost."""
    memory = service.memory
    chat = memory.chat(chat_id)
    graph = memory.graph(chat_id)
    stats = graph.stats()
    isolated = graph.isolated()
    active = stats["nodes_active"]
    floors = len(memory.store.messages(chat_id))
    last_commit = newest_commit(memory.store, chat_id)
    pointer = last_extracted_floor(memory.store, chat_id)  # from the commit log: a rollback moves it back
    due = [f for f, _ in due_floors(memory.store, chat_id, memory.settings)]
    extractions = recent_steps(memory.store, chat_id, RECENT)
    failures = len(extraction_failures(memory.store, chat_id))  # still failing: a later run may have extracted it
    log = service.recall_log
    return {
        "chat": {"id": chat.id, "schema": chat.schema.name, "types": list(chat.schema.types),
                 "settings": chat.settings, "floors": floors, "graph_version": memory.store.graph_version(chat_id),
                 "created_at": chat.created_at,
                 # who made it, when this service did (the proxy creates a chat a request names on first sight)
                 "created_by": next((e["by"] for e in service.event_log.of(chat_id) if e.get("event") == "created"),
                                    None)},
        "stats": {**stats, "isolated": isolated,
                  # the share of active nodes linked to nothing: memory that recall can only reach by itself
                  "fragmentation": round(isolated / active, 4) if active else 0.0},
        "vectors": _vector_status(memory, chat_id),
        "history": {"floors": floors, "extracted_to": None if pointer < 0 else pointer, "due": due,
                    "failed_steps": failures,
                    "last_commit": dict(last_commit) if last_commit else None},
        "usage": memory.usage(chat_id)["usage"],
        "recent_extractions": extractions,
        "recent_recalls": list(log.recent.get(chat_id, ())),
        "reverted": [b.to_dict() for b in memory.trash(chat_id)[:RECENT_REVERTED]],  # each restorable in one click
        "jobs": service.jobs.list(chat_id, 5),
    }


def _vector_status(memory: Memory, chat_id: str) -> dict[str, Any]:
    try:
        return {"ok": True, **memory.index.status(chat_id)}
    except Exception as exc:  # noqa: BLE001 - the overview still answers when the vector store is unreachable
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


@router.get("/chats/{chat_id}/graph/all")
def whole_graph(chat_id: str, service: ServiceDep, archived: bool = True) -> dict[str, Any]:
    """Every node (compact: no fields) and edge of the chat, for drawing; archived nodes are flagged."""
    memory = service.memory
    memory.chat(chat_id)
    graph = memory.graph(chat_id)
    nodes = graph.outline(archived=None if archived else False)
    ids = {n["id"] for n in nodes}
    edges = [{"id": edge_id, "source": source, "target": target, "relation": relation}
             for edge_id, relation, source, target in graph.links() if source in ids and target in ids]
    return {"chat": chat_id, "graph_version": memory.store.graph_version(chat_id), "nodes": nodes, "edges": edges}


@router.get("/chats/{chat_id}/injection/last")
def last_injection(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    service.memory.chat(chat_id)
    injection = service.recall_log.last.get(chat_id)
    if injection is None:
        raise NotFound(f"no recall for chat {chat_id!r} since the service started",
                       "Run one: POST .../recall, or send a generation through the proxy.")
    return injection


@router.post("/chats/{chat_id}/recall/try")
async def try_recall(chat_id: str, body: RecallIn, service: ServiceDep) -> dict[str, Any]:
    """Recall as POST .../recall does, without becoming the chat's "last injection" (a panel experiment)."""
    injection = await run_in_threadpool(service.recall, chat_id, body.query, mode=body.mode,
                                        user_floor=body.user_floor, speaker=body.speaker, at=body.at, record=False)
    return injection.to_dict()


@router.post("/chats/{chat_id}/rollback")
def rollback(chat_id: str, body: RollbackIn, service: ServiceDep) -> dict[str, Any]:
    """Undo every commit anchored at or after `floor` (the chat's messages stay as they are). What it reverts is
    kept as a trash batch (`batch`; POST .../undo restores it)."""
    with service.writer(chat_id):
        service.memory.chat(chat_id)
        result = service.memory.rollback(chat_id, body.floor, detail="the panel")
    service.evict_floors(chat_id, body.floor)
    return {"chat": chat_id, "floor": body.floor, "reverted": [c.id for c in result.reverted], "batch": result.batch,
            "graph_version": service.memory.store.graph_version(chat_id)}


@router.put("/chats/{chat_id}/schema/compatible")
def put_compatible_schema(chat_id: str, body: dict[str, Any], service: ServiceDep) -> dict[str, Any]:
    """Change a chat's schema while it has memory, when every node stays valid: its type is kept, and the type
    still has each field the node uses and no new required field the node lacks. Settings (cadence,
    always-inject, caps, compression) may change freely."""
    schema = schema_from_data(body.get("schema", body), "request schema")
    with service.writer(chat_id):
        service.memory.store.change_schema(chat_id, schema)
    service.evict_floors(chat_id, 0)  # cached recalls were packed with the old settings
    return {"chat": chat_id, "schema": schema.name, "types": list(schema.types)}
