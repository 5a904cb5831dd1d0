"""The trash of the commit log over HTTP: list what a chat's rollbacks, syncs, proxy edits and rebuilds reverted,
restore a batch by id (exactly: graph and floors), purge batches for good. One writer per chat, as for a sync."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import Field, StrictBool, StrictInt

from curator.errors import CuratorError
from curator.extract.extractor import due_floors
from curator.service.server.deps import ServiceDep, Strict
from curator.service.server.state import Service
from curator.service.server.params import MAX_INT, BatchId

router = APIRouter(tags=["history"])


class UndoIn(Strict):
    batch: StrictInt | None = Field(default=None, ge=1, le=MAX_INT,
                                    description="the batch to restore (GET .../trash lists them); default: the newest")
    extract: StrictBool = Field(default=True, description="queue extraction of the floors due afterwards, as a job")


@router.get("/chats/{chat_id}/trash")
def list_trash(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """The chat's reverted batches, newest first: why (rollback, sync, proxy, ingest, rebuild, undo), when, from
    which floor, how many commits and floors, the titles of the first nodes they had created."""
    return {"chat": chat_id, "batches": [b.to_dict() for b in service.memory.trash(chat_id)]}


@router.get("/chats/{chat_id}/trash/{batch_id}")
def get_batch(chat_id: str, batch_id: BatchId, service: ServiceDep) -> dict[str, Any]:
    """One batch with its commits (oldest first) and the floors it keeps (null when it kept none)."""
    found, commits, floors = service.memory.store.trash_batch(chat_id, batch_id)
    return {**found.to_dict(), "commits": commits, "messages": None if floors is None else [
        {"floor": found.floor + i, "role": m.role, "name": m.name, "text": m.text, "swipe_id": m.swipe_id}
        for i, m in enumerate(floors)]}


@router.post("/chats/{chat_id}/undo")
async def undo(chat_id: str, body: UndoIn, service: ServiceDep) -> dict[str, Any]:
    """Restore a reverted batch exactly: its commits (the graph as before the rollback) and the floors it replaced.
    What was committed since is reverted first and kept as a new batch (`displaced_batch`), so an undo can be undone."""
    return await run_in_threadpool(_undo, service, chat_id, body.batch, body.extract)


def _undo(service: Service, chat_id: str, batch: int | None, extract: bool) -> dict[str, Any]:
    memory = service.memory
    with service.writer(chat_id):
        if batch is None:
            newest = memory.trash(chat_id)
            if not newest:
                raise CuratorError(f"nothing to undo: chat {chat_id!r} has no reverted batch")
            batch = newest[0].id
        result = memory.undo(chat_id, batch)
        due = [f for f, _ in due_floors(memory.store, chat_id, memory.settings)]
        job = service.jobs.submit(chat_id, "extract", reuse_active=True) if extract and due else None
    return {**result.to_dict(), "due": due, "job": job, "graph_version": memory.store.graph_version(chat_id)}


@router.delete("/chats/{chat_id}/trash/{batch_id}")
def purge_batch(chat_id: str, batch_id: BatchId, service: ServiceDep) -> dict[str, Any]:
    """Drop one batch for good (it can no longer be undone)."""
    with service.writer(chat_id):
        return {"chat": chat_id, "purged": service.memory.purge_trash(chat_id, [batch_id])}


@router.delete("/chats/{chat_id}/trash")
def purge(chat_id: str, service: ServiceDep, all: bool = False,
          older_than_days: Annotated[float | None, Query(ge=0, le=1e6)] = None) -> dict[str, Any]:
    """Drop batches for good: those older than `older_than_days`, or all of them (`all=true`); one of the two."""
    if (older_than_days is None) == (not all):
        raise CuratorError("say what to purge: `older_than_days=N` or `all=true` (one of them)")
    with service.writer(chat_id):
        return {"chat": chat_id, "purged": service.memory.purge_trash(chat_id, None, older_than_days)}
