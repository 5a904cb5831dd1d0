"""The extractor's output model, generated from the schema for the types active at this step.

Unknown keys are rejected (never silently dropped), so a model that invents a field is told so and retries. One
exception: a list for a type of the schema that is not active this step (its cadence skips it) is set aside, not
refused: the rest of the answer is kept instead of the whole step failing, and the answer says what was set aside
(`set_aside`), which the step's result reports.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr, create_model, model_validator

from curator.schemas import Schema, TypeSpec
from curator.store.story_time import KNOWS, story_fields

_FORBID = ConfigDict(extra="forbid")


class _Item(BaseModel):
    model_config = _FORBID


def item_model(spec: TypeSpec, knowledge: bool = False) -> type[BaseModel]:
    """One node of `spec`: required fields required, the rest optional text; plus an optional `ref`, and for a
    `story` type the story time, place and point of view (and `known_by` when the schema has `knows`)."""
    fields: dict[str, Any] = {
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
    link_fields: dict[str, Any] = {
        "source": (str, Field(description="name of a known node, or the ref of an item in this answer")),
        "relation": (cast(Any, Literal)[relations] if relations else str, ...),  # a Literal made at run time
        "target": (str, Field(description="name of a known node, or the ref of an item in this answer")),
    }
    link = create_model("Link", __base__=_Item, **link_fields)
    fields: dict[str, Any] = {}
    for name in active:
        spec = schema.types[name]
        item = item_model(spec, schema.relation(KNOWS) is not None)
        fields[name] = (cast(Any, list)[item], Field(default_factory=list, description=spec.description or None))
    fields["links"] = (list[link], Field(default_factory=list, description="links between nodes"))
    inactive = frozenset(schema.types) - set(active)
    return create_model("RecordMemory", __base__=_Answer, __doc__="What the newest reply establishes, as memory.",
                        __validators__={"_inactive": _set_aside(inactive)}, **fields)


class _Answer(_Item):
    _set_aside: dict[str, list[Any]] = PrivateAttr(default_factory=dict)  # inactive type -> its items, set aside

    @property
    def set_aside(self) -> dict[str, list[Any]]:
        return self._set_aside


def _set_aside(inactive: frozenset[str]) -> Any:  # a pydantic decorator proxy, for create_model's __validators__
    """A validator that takes the lists of the schema's inactive types out of the answer (and counts them)."""

    def take_out(cls: type[_Answer], data: Any, handler: ModelWrapValidatorHandler[_Answer]) -> _Answer:
        aside: dict[str, list[Any]] = {}
        if isinstance(data, dict) and inactive & data.keys():
            data = dict(data)
            for name in sorted(inactive & data.keys()):
                items = data.pop(name)
                aside[name] = items if isinstance(items, list) else [items]
        answer = handler(data)
        answer._set_aside = aside
        return answer

    return model_validator(mode="wrap")(take_out)


def _class_name(type_name: str) -> str:
    return "".join(part.capitalize() for part in type_name.split("_")) or "Item"
