"""Ops: the only ways the memory graph changes. A commit is a list of ops applied all-or-nothing.

Ops are plain pydantic models with a literal `op` tag, so a list of them round-trips through JSON (the
commit log stores them) and an LLM's tool call can be validated into one directly.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

FieldValues = dict[str, str]


class Scope(BaseModel):
    """Whose view a memory belongs to: the objective world, or one character's point of view, and where."""

    model_config = ConfigDict(extra="forbid")
    layer: Literal["objective", "pov"] = "objective"
    owner: str | None = None
    region: str | None = None


class StoryTime(BaseModel):
    """When a memory happens inside the story (not wall-clock time)."""

    model_config = ConfigDict(extra="forbid")
    label: str | None = None
    segment: str | None = None


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateNode(_Op):
    op: Literal["create_node"] = "create_node"
    id: str | None = None
    type: str
    title: str | None = None
    fields: FieldValues = {}
    level: int = Field(default=0, ge=0)
    parent: str | None = None
    floor_from: int | None = Field(default=None, ge=0)
    floor_to: int | None = Field(default=None, ge=0)
    importance: float = Field(default=5.0, ge=0, le=10)
    access_count: int = Field(default=0, ge=0)
    archived: bool = False
    scope: Scope | None = None
    story_time: StoryTime | None = None
    created_at: str | None = None  # imports keep the original times; otherwise the commit's time
    updated_at: str | None = None


class UpdateNode(_Op):
    """Change a node. Only what is given changes; `parent` changes only when it is given (None detaches)."""

    op: Literal["update_node"] = "update_node"
    id: str
    title: str | None = None
    set_fields: FieldValues = {}
    clear_fields: list[str] = []
    level: int | None = Field(default=None, ge=0)
    parent: str | None = None
    floor_from: int | None = Field(default=None, ge=0)
    floor_to: int | None = Field(default=None, ge=0)
    importance: float | None = Field(default=None, ge=0, le=10)
    scope: Scope | None = None
    story_time: StoryTime | None = None


class ArchiveNode(_Op):
    op: Literal["archive_node"] = "archive_node"
    id: str
    archived: bool = True


class DeleteNode(_Op):
    """Remove a node for good, with its edges; its children are detached."""

    op: Literal["delete_node"] = "delete_node"
    id: str


class Link(_Op):
    """Create or update the edge (source, relation, target)."""

    op: Literal["link"] = "link"
    id: str | None = None
    source: str
    target: str
    relation: str
    strength: float = Field(default=0.8, ge=0, le=1)
    valid_from: int | None = Field(default=None, ge=0)
    valid_to: int | None = Field(default=None, ge=0)
    created_at: str | None = None  # imports keep the original times
    updated_at: str | None = None


class Unlink(_Op):
    """Remove an edge, by id or by (source, relation, target)."""

    op: Literal["unlink"] = "unlink"
    id: str | None = None
    source: str | None = None
    target: str | None = None
    relation: str | None = None


class Compact(_Op):
    """Fold `children` into one new summary node a level above them: the children are archived under it,
    its floor range spans theirs, its importance is their maximum, and their outside edges move to it."""

    op: Literal["compact"] = "compact"
    id: str | None = None
    type: str
    title: str | None = None
    fields: FieldValues = {}
    children: list[str] = Field(min_length=1)


AnyOp = CreateNode | UpdateNode | ArchiveNode | DeleteNode | Link | Unlink | Compact
Op = Annotated[AnyOp, Field(discriminator="op")]
OPS = TypeAdapter(list[Op])


def new_node_id() -> str:
    return "n_" + secrets.token_hex(6)


def new_edge_id() -> str:
    return "e_" + secrets.token_hex(6)


def parse_ops(data: object) -> list[AnyOp]:
    """Validate JSON-like data (a list of op mappings) into ops; raises pydantic.ValidationError."""
    return OPS.validate_python(data)


def dump_ops(ops: Sequence[AnyOp]) -> list[dict[str, Any]]:
    # exclude_unset keeps `parent: None` (detach) distinct from "parent not given".
    return [op.model_dump(mode="json", exclude_unset=True) | {"op": op.op} for op in ops]
