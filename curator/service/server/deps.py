"""Request models and dependencies shared by the routers."""

from __future__ import annotations

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from typing import Annotated, Literal

from curator.store.messages import Message
from curator.service.server.state import Service

MAX_MESSAGES = 20_000
MAX_TEXT = 200_000


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(_service)]


class Strict(BaseModel):
    """A request body: unknown fields are refused, and values are taken as the OpenAPI document types them (no
    `0` for false, no `"7"` for 7)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class MessageIn(Strict):
    floor: int | None = Field(default=None, ge=0, description="explicit floor number (tail windows)")
    role: Literal["user", "assistant", "system"]
    name: str = Field(default="", max_length=200)
    text: str = Field(max_length=MAX_TEXT)
    swipe_id: int = Field(default=0, ge=0)
    swipes: list[str] = Field(default_factory=list, max_length=100)

    def message(self) -> Message:
        return Message(self.role, self.name, self.text, self.swipe_id, list(self.swipes))


class SyncIn(Strict):
    messages: list[MessageIn] = Field(max_length=MAX_MESSAGES)
    start: int | None = Field(default=None, ge=0, description="floor of the first message (a tail window); "
                              "default: the first message's `floor`, or 0")
    extract: bool = Field(default=True, description="queue re-extraction of the floors now due, as a job")
    allow_rollback: bool = Field(default=False, description=(
        "revert memory even when the sync would empty the chat or revert more than `history.ask_above` commits "
        "(3 by default); without it such a sync is refused with 409 `rollback_refused`. What a sync reverts is "
        "kept either way (`batch` in the answer; POST .../undo restores it)"))


def window(body: SyncIn) -> tuple[list[Message], int]:
    """The messages and the floor they start at; explicit floors must be consecutive."""
    from curator.errors import CuratorError

    first = body.messages[0].floor if body.messages and body.messages[0].floor is not None else None
    start = body.start if body.start is not None else (first or 0)
    for offset, m in enumerate(body.messages):
        if m.floor is not None and m.floor != start + offset:
            raise CuratorError(f"messages[{offset}] has floor {m.floor}, expected {start + offset}",
                               "Floors of a window must be consecutive, starting at `start`.")
    return [m.message() for m in body.messages], start
