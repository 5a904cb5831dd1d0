"""Recall, extraction, rebuild, vectors, usage and jobs. Long work runs as a job (progress, cancel, result).

A job-backed endpoint takes a few lines: register the kind in `state.build_service` (or with
`state.register_kind`) and submit it with `service.jobs.submit(chat_id, kind, params)`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from pydantic import Field
from typing import Any, Literal

from curator.errors import CuratorError
from curator.service.server.deps import MessageIn, ServiceDep, Strict
from curator.service.server.params import OptionalFloor

router = APIRouter(tags=["work"])
MaintenanceOp = Literal["compact", "consolidate", "evolve", "summarize", "forget", "reflect", "plan"]


class RecallIn(Strict):
    query: str = Field(default="", max_length=20_000)
    mode: str | None = Field(default=None, pattern="^(hybrid|rag|llm)$")
    user_floor: int | None = Field(default=None, ge=0, description="reuse the result on a swipe of this turn")
    speaker: str | None = Field(default=None, max_length=200,
                                description="who speaks next (default: the newest assistant message's name)")
    turns: list[MessageIn] | None = Field(default=None, max_length=50, description=(
        "the recent turns, oldest first, the message answered last: the query is built from them"))
    at: str | None = Field(default=None, max_length=200, description=(
        "recall over the memory as it was at this point in story time: a story time the memory uses "
        "('day 5'), a date, or a floor number"))


class VectorsIn(Strict):
    full: bool = False


class CurateIn(Strict):
    floor: int | None = Field(default=None, ge=0, description="the reply to curate (default: the newest)")
    draft_reply: str | None = Field(default=None, max_length=100_000,
                                    description="director mode: a reply the orchestrator drafted, not yet in the chat")
    dry_run: bool = False


class MaintainIn(Strict):
    types: list[str] | None = None  # compact: only these types
    steps: int = Field(default=1, ge=1, le=1000)  # consolidate / evolve: the newest N extraction steps
    node_ids: list[str] | None = None  # consolidate / evolve: these nodes instead
    dry_run: bool = False  # forget: list what would be archived


@router.post("/chats/{chat_id}/recall")
async def recall(chat_id: str, body: RecallIn, service: ServiceDep) -> dict[str, Any]:
    """The injection for the next generation: persistent and recalled blocks, token counts, placement."""
    turns = [t.message() for t in body.turns] if body.turns else None
    if not body.query.strip() and not turns:
        raise CuratorError("nothing to recall for: give `query`, `turns` or both")
    injection = await run_in_threadpool(service.recall, chat_id, body.query, mode=body.mode,
                                        user_floor=body.user_floor, speaker=body.speaker, messages=turns,
                                        at=body.at)
    return injection.to_dict()


@router.post("/chats/{chat_id}/extract", status_code=status.HTTP_202_ACCEPTED)
def extract(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """Extract every floor still due, as a job (one per chat: an active one is returned instead)."""
    service.memory.chat(chat_id)
    return service.jobs.submit(chat_id, "extract", reuse_active=True)


@router.post("/chats/{chat_id}/rebuild", status_code=status.HTTP_202_ACCEPTED)
def rebuild(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """Clear the chat's memory and extract every floor again, as a job."""
    service.memory.chat(chat_id)
    return service.jobs.submit(chat_id, "rebuild")


@router.post("/chats/{chat_id}/vectors/rebuild", status_code=status.HTTP_202_ACCEPTED)
def rebuild_vectors(chat_id: str, body: VectorsIn, service: ServiceDep) -> dict[str, Any]:
    service.memory.chat(chat_id)
    return service.jobs.submit(chat_id, "vectors", {"full": body.full})


@router.post("/chats/{chat_id}/curate", status_code=status.HTTP_202_ACCEPTED)
def curate(chat_id: str, body: CurateIn, service: ServiceDep) -> dict[str, Any]:
    """Run the memory_curator agent as a job (director mode with `draft_reply`); its result is the run's trace."""
    service.memory.chat(chat_id)
    params = body.model_dump(exclude_none=True)
    return service.jobs.submit(chat_id, "curate", params if params != {"dry_run": False} else {})


@router.post("/chats/{chat_id}/maintenance/{op}", status_code=status.HTTP_202_ACCEPTED)
def maintain(chat_id: str, op: MaintenanceOp, body: MaintainIn, service: ServiceDep) -> dict[str, Any]:
    """Compact, consolidate, evolve, summarize, forget (`dry_run` lists what would go) or reflect, as a job;
    the result is the operation's report (changes, commits, LLM calls, tokens)."""
    service.memory.chat(chat_id)
    return service.jobs.submit(chat_id, op, body.model_dump(exclude_none=True))


@router.get("/chats/{chat_id}/usage")
def usage(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    return service.memory.usage(chat_id)


@router.get("/usage")
def usage_all(service: ServiceDep) -> dict[str, Any]:
    """LLM calls, tokens and latency per chat and in all."""
    from curator.llm.records import Usage

    chats = {chat_id: service.memory.usage(chat_id)["usage"]["total"] for chat_id in service.memory.chats()}
    total = Usage()
    for u in chats.values():
        total.merge(Usage(**u))
    return {"total": total.to_dict(), "chats": chats}


@router.get("/chats/{chat_id}/commits")
def commits(chat_id: str, service: ServiceDep, since_floor: OptionalFloor = None) -> dict[str, Any]:
    service.memory.chat(chat_id)
    return {"commits": [{"id": c.id, "anchor_floor": c.anchor_floor, "origin": c.origin, "at": c.at,
                         "ops": len(c.ops), "note": c.note}
                        for c in service.memory.store.commits(chat_id, since_floor)]}


@router.get("/jobs")
def list_jobs(service: ServiceDep, chat: str | None = None, limit: int = 100) -> dict[str, Any]:
    return {"jobs": service.jobs.list(chat, max(1, min(limit, 1000)))}


@router.get("/jobs/{job_id}")
def get_job(job_id: str, service: ServiceDep) -> dict[str, Any]:
    return service.jobs.get(job_id)


@router.post("/jobs/{job_id}/cancel")
def cancel_job(job_id: str, service: ServiceDep) -> dict[str, Any]:
    return service.jobs.cancel(job_id)


@router.get("/health")
def health(request: Request, service: ServiceDep) -> dict[str, Any]:
    """Liveness (`ok`), the process that answered (`worker`: with `serve --workers N`, any of them may) and whether
    replies can be extracted, by which model (`extraction`: {ok, model, source, warning}; a missing model is a
    warning here, in `serve`'s banner and in the panel)."""
    from curator.service.proxy_upstream import extraction_status

    proxy = getattr(request.app.state, "proxy", None)
    return {"ok": True, "worker": service.jobs.worker,
            "extraction": extraction_status(service.memory, proxy.upstream if proxy else None,
                                            proxy.key_env if proxy else None,
                                            override=service.models.extract is not None)}
