"""What happens in a front end's chat, as its own events say (SillyTavern: message sent, received, edited, deleted,
swiped; generation started and ended, with its type), instead of guessed from what a proxy sees.

Each event carries the chat's messages as the front end holds them (all, or a tail window from `start`), so memory
follows them exactly: an edit anywhere rolls back from its floor and queues re-extraction from there, a swipe or a
regenerate shelves the reply's memory (swiping back restores it with no model call), a Continue re-extracts the
reply it extended. `generation_started` also recalls for the coming reply and returns the injection (the front
end puts it into its prompt itself): the query is built from the recent turns, for the speaker the front end names
(in a group chat, the character about to speak). Its recall card is kept at the floor the reply takes. A `quiet`
generation (a summary, an image prompt) changes nothing and recalls nothing; an `impersonate` one recalls for the
user and keeps no card.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from curator.errors import NotFound
from curator.service.server.deps import MessageIn, ServiceDep, Strict
from curator.service.server.frontend_status import extraction_status
from curator.service.server.params import MAX_INT
from curator.store.bindings import Bindings, RecallCards
from curator.store.forks import fork_of
from curator.store.store import utc_now

if TYPE_CHECKING:
    from curator.service.server.state import Service

router = APIRouter(tags=["front ends"])
RECALL_TURNS = 6  # of the chat's newest floors build the recall query (as in the proxy)
EVENTS = ("opened", "message_sent", "message_received", "message_edited", "message_deleted", "message_swiped",
          "generation_started", "generation_ended", "generation_stopped", "sync")


class EventIn(Strict):
    event: str = Field(pattern="^(" + "|".join(EVENTS) + ")$")
    generation_type: str | None = Field(default=None, max_length=40, pattern=r"^[a-z_]*$", description=(
        "SillyTavern's generation type: normal, regenerate, swipe, continue, impersonate, quiet, group_chat, ..."))
    messages: list[MessageIn] | None = Field(default=None, max_length=20_000, description=(
        "the chat as the front end holds it from `start` on (for a swipe being generated: without the reply "
        "being replaced); none: memory is not synced"))
    start: int = Field(default=0, ge=0, le=2**62)
    speaker: str | None = Field(default=None, max_length=200, description="who speaks next (generation_started)")
    reply_floor: int | None = Field(default=None, ge=0, le=2**62,
                                    description="the floor the coming reply takes (its recall card is kept there)")
    extract: bool = True


def _event(service: Service, chat_id: str, body: EventIn) -> dict[str, Any]:
    began = time.perf_counter()
    service.memory.chat(chat_id)  # ChatNotFound first
    kind = body.generation_type or ""
    answer: dict[str, Any] = {"chat": chat_id, "event": body.event, "generation_type": kind or None, "sync": None,
                              "job": None, "injection": None}
    quiet = body.event == "generation_started" and kind == "quiet"
    if body.messages is not None and not quiet:  # a quiet prompt's answer goes nowhere in the chat
        messages = [m.message() for m in body.messages]
        report, job = service.sync(chat_id, messages, body.start, extract=body.extract)
        answer["sync"], answer["job"] = report.to_dict(), job
    if body.event == "generation_started" and not quiet:
        answer["injection"] = _recall(service, chat_id, body, kind)
    answer["extraction"] = extraction_status(service, chat_id)
    answer["ms"] = round((time.perf_counter() - began) * 1000, 1)
    sync = answer["sync"] or {}
    injection = answer["injection"] or {}
    service.event_log.add(chat_id, {
        "at": utc_now(), "event": body.event, "generation_type": kind or None, "ms": answer["ms"],
        "dirty_floor": sync.get("dirty_floor"), "reason": sync.get("reason"),
        "reverted": len(sync.get("reverted") or []), "restored": len(sync.get("restored") or []),
        "due": sync.get("due") or [], "speaker": injection.get("speaker_requested"),
        "recall_tokens": (injection.get("tokens") or {}).get("total"), "reply_floor": injection.get("reply_floor")})
    return answer


def _recall(service: Service, chat_id: str, body: EventIn, kind: str) -> dict[str, Any] | None:
    """Recall for the coming reply: the query from the newest floors, up to the last user message."""
    messages = service.memory.store.messages(chat_id)
    user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    end = len(messages) if user is None else user + 1
    turns = [m for m in messages[max(0, end - RECALL_TURNS):end] if m.role in ("user", "assistant")]
    if not turns:
        return None
    query = messages[user].text if user is not None else turns[-1].text
    injection = service.recall(chat_id, query, user_floor=user, speaker=body.speaker, messages=turns)
    reply_floor = body.reply_floor if body.reply_floor is not None else len(messages)
    card = {**injection.to_dict(), "generation_type": kind or "normal", "speaker_requested": body.speaker,
            "reply_floor": reply_floor}
    if kind != "impersonate":  # an impersonation's answer becomes the user's message, not a reply
        RecallCards(service.memory.store).put(chat_id, reply_floor, card)
    return card


@router.post("/chats/{chat_id}/events")
async def chat_event(chat_id: str, body: EventIn, service: ServiceDep) -> dict[str, Any]:
    """One event of the front end's chat (module docstring): memory synced to `messages`, re-extraction queued,
    and for `generation_started` the injection for the coming reply; `extraction` says whether memory is being
    written (and if not, why)."""
    return await run_in_threadpool(_event, service, chat_id, body)


@router.get("/chats/{chat_id}/events")
def recent_events(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """The chat's last events since the service started, newest first, and what each did."""
    service.memory.chat(chat_id)
    return {"chat": chat_id, "events": service.event_log.of(chat_id)}


@router.get("/chats/{chat_id}/cards")
def card_floors(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    service.memory.chat(chat_id)
    return {"chat": chat_id, "floors": RecallCards(service.memory.store).floors(chat_id)}


@router.get("/chats/{chat_id}/cards/{floor}")
def recall_card(chat_id: str, floor: Annotated[int, Path(ge=0, le=MAX_INT)], service: ServiceDep) -> dict[str, Any]:
    """What recall injected for the reply at `floor`, and why: blocks, nodes, scores, reasons, tokens, the text."""
    service.memory.chat(chat_id)
    card = RecallCards(service.memory.store).get(chat_id, floor)
    if card is None:
        raise NotFound(f"no recall card for floor {floor} of chat {chat_id!r}",
                       "Cards are kept for replies generated with the SillyTavern extension.")
    return card


@router.get("/chats/{chat_id}/status")
def chat_status(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """What a front end shows about a chat's memory: its binding, where it was forked from, whether extraction
    runs (and why not), its size and cost."""
    memory = service.memory
    chat = memory.chat(chat_id)
    binding = Bindings(memory.store).of_chat(chat_id)
    stats = memory.graph(chat_id).stats()
    return {"chat": chat_id, "schema": chat.schema.name, "settings": chat.settings,
            "binding": binding.to_dict() if binding else None, "fork": fork_of(memory.store, chat_id),
            "floors": len(memory.store.messages(chat_id)), "commits": len(memory.store.commits(chat_id)),
            "graph": stats, "usage": memory.usage(chat_id)["usage"]["total"],
            "extraction": extraction_status(service, chat_id), "jobs": service.jobs.list(chat_id, 5)}
