"""The extractor's output model, generated from the schema for the types active at this step.

Unknown keys are rejected (never silently dropped), so a model that invents a field is told so and retries.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from curator.schemas import Schema, TypeSpec
from curator.store.story_time import KNOWS, story_fields

_FORBID = ConfigDict(extra="forbid")


class _Item(BaseModel):
    model_config = _FORBID


def item_model(spec: TypeSpec, knowledge: bool = False) -> type[BaseModel]:
    """One node of `spec`: required fields required, the rest optional text; plus an optional `ref`, and for a
    `story` type the story time, place and point of view (and `known_by` when the schema has `knows`)."""
    fields: dict = {
        "ref": (str | None, Field(default=None, description="a short handle for linking to this item in `links`")),
    }
    for f in spec.fields:
        required = f.required or f.name in spec.primary_key
        annotation = str if required else str | None
        fields[f.name] = (annotation, Field(... if required else None, description=f.hint or None))
    if spec.story:
        fields.update(story_fields(knowledge))
    return create_model(_class_name(spec.name), __base__=_Item, __doc__=spec.description or None, **fields)


def output_model(schema: Schema, active: list[str]) -> type[BaseModel]:
    """The whole answer of one extraction step: a list per active type, then links."""
    relations = tuple(r.name for r in schema.relations if not r.internal)
    link_fields: dict = {
        "source": (str, Field(description="name of a known node, or the ref of an item in this answer")),
        "relation": (Literal[relations] if relations else str, ...),  # type: ignore[valid-type]
        "target": (str, Field(description="name of a known node, or the ref of an item in this answer")),
    }
    link = create_model("Link", __base__=_Item, **link_fields)
    fields: dict = {}
    for name in active:
        spec = schema.types[name]
        item = item_model(spec, schema.relation(KNOWS) is not None)
        fields[name] = (list[item], Field(default_factory=list, description=spec.description or None))
    fields["links"] = (list[link], Field(default_factory=list, description="links between nodes"))
    return create_model("RecordMemory", __base__=_Item,
                        __doc__="What the newest reply establishes, as memory.", **fields)


def _class_name(type_name: str) -> str:
    return "".join(part.capitalize() for part in type_name.split("_")) or "Item"
