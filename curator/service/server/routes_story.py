"""Story time and the contradiction inbox: the memory as it was at a point in story time, and the new facts that
contradict stored ones, waiting for a decision (supersede, keep both, drop)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, status
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from curator.service.server.deps import ServiceDep, Strict

router = APIRouter(tags=["story"])


class ResolveIn(Strict):
    action: Literal["supersede", "keep_both", "drop"]


class ScoutIn(Strict):
    message: str = Field(min_length=1, max_length=20_000, description="the user's message about to be answered")
    speaker: str | None = Field(default=None, max_length=200, description="the character about to speak")
    recall: bool = Field(default=True, description="also report what recall will inject (one query embedding)")


class SimulateIn(Strict):
    draft_reply: str | None = Field(default=None, max_length=100_000,
                                    description="a reply not stored yet (default: the newest stored reply)")
    floor: int | None = Field(default=None, ge=0, description="a stored reply to simulate instead of the newest")
    writer: Literal["extractor", "curator"] | None = Field(default=None, description="default: the chat's channel")


@router.post("/chats/{chat_id}/scouts")
async def scouts(chat_id: str, body: ScoutIn, service: ServiceDep) -> dict[str, Any]:
    """Read-only looks at the memory before the reply to `message` (no model call): the entities it names, where
    the story stands, open threads and undecided contradictions, what the speaker must not know, what recall will
    inject. `text` is written for a director's prompt."""
    report = await run_in_threadpool(service.memory.scout, chat_id, body.message, body.speaker, body.recall)
    return report.to_dict()


@router.post("/chats/{chat_id}/simulate", status_code=status.HTTP_202_ACCEPTED)
def simulate(chat_id: str, body: SimulateIn, service: ServiceDep) -> dict[str, Any]:
    """What the chat's writers (or `writer`) would commit for the newest reply, a stored `floor` or a
    `draft_reply`, without committing, as a job: its result lists each writer's ops and changes (nodes created,
    fields before and after, links). The model is asked; its calls are in the chat's usage."""
    service.memory.chat(chat_id)
    return service.jobs.submit(chat_id, "simulate", body.model_dump(exclude_none=True))


@router.get("/chats/{chat_id}/facts")
async def facts(chat_id: str, service: ServiceDep, name: str = Query(min_length=1, max_length=200),
                at: str = Query(min_length=1, max_length=200)) -> dict[str, Any]:
    """The nodes named `name` (or of that id) as they were at a story time ("day 5", a date, a floor), with each
    one's spans of story time (from which story time each value held, until which)."""
    return await run_in_threadpool(service.memory.facts_at, chat_id, name, at)


@router.get("/chats/{chat_id}/plan")
def plan(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """The plot planner's newest plan ({beats, floor, seq}; null when none). Run it now with
    POST /chats/{id}/maintenance/plan; on a cadence with `planner.enabled` in the chat's settings."""
    settings = service.memory.settings.for_chat(service.memory.chat(chat_id).settings).planner
    return {"plan": service.memory.current_plan(chat_id), "settings": settings.model_dump()}


@router.get("/chats/{chat_id}/contradictions")
def contradictions(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """The contradiction inbox: each new fact that contradicts a stored one, both still active."""
    return {"contradictions": service.memory.contradictions(chat_id)}


@router.post("/chats/{chat_id}/contradictions/{contradiction_id}")
def resolve(chat_id: str, contradiction_id: str, body: ResolveIn, service: ServiceDep) -> dict[str, Any]:
    """Decide: `supersede` (the new fact replaces the old one, which keeps its story-time span), `keep_both`, or
    `drop` (the new fact was wrong). One commit, undone by a rollback of the new fact's floor."""
    with service.writer(chat_id):
        record = service.memory.resolve_contradiction(chat_id, contradiction_id, body.action)
    return {"commit": record.id, "anchor_floor": record.anchor_floor, "ops": len(record.ops), "note": record.note}
