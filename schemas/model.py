"""The schema data model: node types, their fields and settings, and the relation vocabulary.

Everything here is plain data validated by pydantic; unknown keys are errors so a typo in a user's YAML
never silently turns a setting off.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
Identity = Literal["event", "entity", "latest_only"]
# The extra item fields of a type with `story: true` (see curator/store/story_time.py).
STORY_FIELDS = ("story_time", "scene", "flashback", "region", "region_path", "pov", "known_by")
Bucket = Literal["state", "episodic", "reflection", "rules"]


def _check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"{what} {value!r} must start with a lower-case letter and use only a-z, 0-9 and _ (max 64)"
        )
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldSpec(_Strict):
    """One field of a node type."""

    name: str
    hint: str = ""
    required: bool = False
    embedded: bool = False  # part of the text the vector index embeds

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "field name")


class AlwaysInject(_Strict):
    """Persistent injection: nodes of this type are in every prompt, within these caps and the persistent share of
    the budget (`max_floor_distance` 0 = no cap; `max_per_type` 0 = recall's default cap, `recall.max_per_type`).
    The nodes the caps leave out compete in recall."""

    enabled: bool = False
    max_per_type: int = Field(default=0, ge=0)
    max_floor_distance: int = Field(default=0, ge=0)


class Compression(_Strict):
    """Hierarchical compression: old nodes of a level are folded `fan_in` at a time into a summary one level up."""

    mode: Literal["none", "hierarchical"] = "none"
    fan_in: int = Field(default=3, ge=2, le=20)
    threshold: int = Field(default=9, ge=2)
    keep_recent_leaves: int = Field(default=0, ge=0)
    max_depth: int = Field(default=1, ge=1, le=20)
    instruction: str = ""


class TypeSpec(_Strict):
    """One node type: what it holds and how it is extracted, injected and compressed."""

    name: str
    description: str = ""
    identity: Identity = "entity"
    fields: tuple[FieldSpec, ...]
    primary_key: tuple[str, ...] = ()
    alias_fields: tuple[str, ...] = ()
    title_field: str | None = None
    title_template: str | None = None
    bucket: Bucket = "state"
    extract_every: int = Field(default=1, ge=1, le=1000)
    # False: written by maintenance only (a synopsis): the extractor and the curator's write tools leave it alone
    extracted: bool = True
    extraction_instructions: str = ""
    story: bool = False  # the extractor and the curator write story time, region and point of view for this type
    trigger_keywords: tuple[str, ...] = ()  # a reply with one of these words extracts the type off its cadence
    always_inject: AlwaysInject = AlwaysInject()
    compression: Compression = Compression()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "type name")

    @model_validator(mode="after")
    def _consistent(self) -> TypeSpec:
        names = [f.name for f in self.fields]
        if not names:
            raise ValueError("a type needs at least one field")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate field(s): {', '.join(dupes)}")
        for attr in ("primary_key", "alias_fields"):
            missing = [n for n in getattr(self, attr) if n not in names]
            if missing:
                raise ValueError(f"{attr} names unknown field(s): {', '.join(missing)}")
        clash = sorted(set(names) & set(STORY_FIELDS)) if self.story else []
        if clash:
            raise ValueError(f"with story: true, field name(s) {', '.join(clash)} are taken by the story fields")
        if self.title_field is not None and self.title_field not in names:
            raise ValueError(f"title_field names unknown field {self.title_field!r}")
        if self.identity in ("entity", "latest_only") and not self.primary_key:
            raise ValueError(f"identity {self.identity!r} needs a primary_key (the fields that identify a node)")
        return self

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def required_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.required)

    @property
    def embedded_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.embedded)

    @property
    def name_fields(self) -> tuple[str, ...]:
        """Fields whose values name the node (primary key, then aliases): used by find-by-name."""
        return tuple(dict.fromkeys(self.primary_key + self.alias_fields))


class Relation(_Strict):
    """A relation an edge may carry. Symmetric relations are stored with their endpoints ordered."""

    name: str
    description: str = ""
    symmetric: bool = False
    internal: bool = False  # written by the engine (compaction), never proposed by a model

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "relation name")


class Schema(_Strict):
    """A named set of node types and the relations between them. A chat uses exactly one."""

    name: str
    version: int = 1
    description: str = ""
    relations: tuple[Relation, ...] = ()
    types: dict[str, TypeSpec]

    @model_validator(mode="before")
    @classmethod
    def _type_names_from_keys(cls, data: object) -> object:
        # In YAML a type is written as `types: {event: {...}}`; its name is the key.
        if isinstance(data, dict) and isinstance(data.get("types"), dict):
            types = {}
            for key, spec in data["types"].items():
                if isinstance(spec, dict):
                    spec = {"name": key, **spec}
                types[key] = spec
            data = {**data, "types": types}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Schema:
        if not self.types:
            raise ValueError("a schema needs at least one type")
        for key, spec in self.types.items():
            if spec.name != key:
                raise ValueError(f"type key {key!r} and its name {spec.name!r} differ")
        names = [r.name for r in self.relations]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate relation(s): {', '.join(dupes)}")
        return self

    def type(self, name: str) -> TypeSpec | None:
        return self.types.get(name)

    def relation(self, name: str) -> Relation | None:
        return next((r for r in self.relations if r.name == name), None)

    def to_data(self) -> dict[str, Any]:
        """Plain JSON-able data (types keyed by name), as written in YAML and in graph exports."""
        data = self.model_dump(mode="json")
        for spec in data["types"].values():
            spec.pop("name", None)
        return data
