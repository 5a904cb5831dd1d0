"""Write tools, generated from the chat's schema for the types active this run (seq % extract_every == 0):
`create_<type>` (its arguments are the type's own fields), `edit_<type>` and `delete_<type>`, plus link upsert /
delete over the schema's relation vocabulary and the compaction tool. Every write is staged in the workspace."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from curator.store.graph import split_aliases
from curator.store.queries import GraphView
from curator.schemas import Schema, TypeSpec

from curator.tools.compact import memory_compact_nodes
from curator.tools.story_args import story_args, story_ops
from curator.tools.registry import ToolSpec, from_function
from curator.tools.workspace import ToolError, Workspace

_STRICT = ConfigDict(extra="forbid")
RESERVED = ("title", "importance")  # extra create arguments, unless the type has a field of that name


def write_tools(schema: Schema, active_types: list[str]) -> list[ToolSpec]:
    """The write tools of one run: per active type, then links, then compaction (when any type is compressed)."""
    specs: list[ToolSpec] = []
    for name in active_types:
        spec = schema.types[name]
        specs += [_create_tool(spec, schema), _edit_tool(spec, schema), _delete_tool(spec)]
    relations = [r.name for r in schema.relations if not r.internal]
    if relations:
        specs += _link_tools(relations)
    if any(s.compression.mode == "hierarchical" for s in schema.types.values()):
        specs.append(from_function(memory_compact_nodes, writes=True))
    return specs


def _field_args(spec: TypeSpec, all_optional: bool) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for f in spec.fields:
        required = (f.required or f.name in spec.primary_key) and not all_optional
        description = f.hint + (" (required)" if required else "")
        args[f.name] = (str, Field(description=description)) if required else \
            (str | None, Field(default=None, description=description))
    return args


def _create_tool(spec: TypeSpec, schema: Schema) -> ToolSpec:
    args = _field_args(spec, all_optional=False) | story_args(schema, spec)
    if "title" not in args:
        args["title"] = (str | None, Field(default=None, description="a title; by default it comes from the fields"))
    if "importance" not in args:
        args["importance"] = (float, Field(default=5.0, ge=0, le=10, description="0-10; 8+ for milestones"))
    model = create_model(f"create_{spec.name}_args", __config__=_STRICT, **args)
    policy = {"event": "Always a new node: one per thing that happened.",
              "entity": "Check memory_find_by_name first: a name or alias that exists already is an error "
                        "(edit that node instead).",
              "latest_only": "One node per name holding its latest state; an existing name is an error (edit it)."}
    description = (f"Create a {spec.name} node. {spec.description} {policy[spec.identity]}"
                   + (f" Rules: {spec.extraction_instructions}" if spec.extraction_instructions else ""))

    def run(ws: Workspace, given: BaseModel) -> dict[str, Any]:
        values = {k: v.strip() for k, v in given.model_dump().items()
                  if k in spec.field_names and isinstance(v, str) and v.strip()}
        missing = [f for f in spec.field_names
                   if (f in spec.required_fields or f in spec.primary_key) and f not in values]
        if missing:
            raise ToolError(f"create_{spec.name} needs non-empty {', '.join(missing)}")
        if spec.identity != "event":
            refuse_duplicate(ws.graph, spec, values)
        title = getattr(given, "title", None) if "title" not in spec.field_names else None
        op: dict[str, Any] = {"op": "create_node", "type": spec.name, "fields": values,
                              "importance": getattr(given, "importance", 5.0)}
        if title and title.strip():
            op["title"] = title.strip()
        elif not spec.title_field:
            op["title"] = _default_title(ws, spec, values)
        knows = story_ops(ws, spec, given, op)
        [done] = ws.stage([op])
        if knows:
            ws.stage([{**link, "target": done["id"]} for link in knows])
        return {"ok": True, "id": done["id"], "title": ws.node(done["id"]).title}

    return ToolSpec(f"create_{spec.name}", description.strip(), model, run, writes=True)


def refuse_duplicate(graph: GraphView, spec: TypeSpec, values: dict[str, str]) -> None:
    """The identity rule of entities: no second node of a type under a name (or alias) one already has."""
    names = [values[k] for k in spec.primary_key if values.get(k)]
    names += [a for f in spec.alias_fields for a in split_aliases(values.get(f, ""))]
    for name in names:
        for node in graph.find_by_name(name, [spec.name]):
            raise ToolError(f"a {spec.name} named {name!r} exists already: {node.id} ({node.title!r})",
                            f"Edit it with edit_{spec.name}(node_id={node.id!r}, set_fields=...) instead of "
                            "creating a duplicate.")


def _default_title(ws: Workspace, spec: TypeSpec, values: dict[str, str]) -> str:
    if spec.title_template and "{n}" in spec.title_template:
        pattern = re.compile("^" + re.escape(spec.title_template).replace(r"\{n\}", r"(\d+)") + "$")
        used = [int(m.group(1)) for t in ws.graph.titles(spec.name) if (m := pattern.match(t))]
        return spec.title_template.replace("{n}", str(max(used, default=0) + 1))
    if spec.title_template:
        return spec.title_template
    first = next((values[f] for f in spec.field_names if values.get(f)), spec.name)
    return first if len(first) <= 80 else first[:79] + "…"


def _literal(values: Sequence[str]) -> Any:
    """`Literal[...]` of values known only at run time (a schema's field names, its relations)."""
    return cast(Any, Literal)[tuple(values)]


def _edit_tool(spec: TypeSpec, schema: Schema) -> ToolSpec:
    fields_model = create_model(f"{spec.name}_fields", __config__=_STRICT, **_field_args(spec, all_optional=True))
    names = _literal(spec.field_names)
    model = create_model(
        f"edit_{spec.name}_args", __config__=_STRICT,
        node_id=(str, Field(description=f"the id of the {spec.name} node to change")),
        set_fields=(fields_model | None, Field(default=None, description="fields to set (only these change)")),
        clear_fields=(cast(Any, list)[names], Field(default_factory=list, description="optional fields to empty")),
        title=(str | None, Field(default=None, description="a new title")),
        importance=(float | None, Field(default=None, ge=0, le=10, description="a new importance, 0-10")),
        **story_args(schema, spec),
    )

    def run(ws: Workspace, given: Any) -> dict[str, Any]:
        node = ws.node(given.node_id, spec.name)
        changes = {k: v.strip() for k, v in (given.set_fields.model_dump() if given.set_fields else {}).items()
                   if isinstance(v, str) and v.strip()}
        both = sorted(set(changes) & set(given.clear_fields))
        if both:
            raise ToolError(f"field(s) {', '.join(both)} are both set and cleared")
        op: dict[str, Any] = {"op": "update_node", "id": node.id, "set_fields": changes,
                              "clear_fields": list(given.clear_fields)}
        if given.title and given.title.strip():
            op["title"] = given.title.strip()
        if given.importance is not None:
            op["importance"] = given.importance
        knows = story_ops(ws, spec, given, op)
        if not (changes or given.clear_fields or knows or {"title", "importance", "scope", "story_time"} & set(op)):
            raise ToolError("nothing to change", "Give set_fields, clear_fields, title or importance.")
        if ws.anchor > node.floor_to:
            op["floor_to"] = ws.anchor
        ws.stage([op, *({**link, "target": node.id} for link in knows)])
        return {"ok": True, "id": node.id, "changed": sorted(changes) + [f"-{c}" for c in given.clear_fields]}

    return ToolSpec(f"edit_{spec.name}", f"Change a {spec.name} node: set or clear fields, retitle it, or change its "
                    "importance. Only what you give changes.", model, run, writes=True)


def _delete_tool(spec: TypeSpec) -> ToolSpec:
    model = create_model(f"delete_{spec.name}_args", __config__=_STRICT,
                         node_id=(str, Field(description=f"the id of the {spec.name} node to delete")))

    def run(ws: Workspace, given: Any) -> dict[str, Any]:
        node = ws.node(given.node_id, spec.name)
        ws.stage([{"op": "delete_node", "id": node.id}])
        return {"ok": True, "deleted": node.id, "title": node.title}

    return ToolSpec(f"delete_{spec.name}", f"Delete a {spec.name} node for good, with its links (its children are "
                    "detached). Only for a node that is wrong or a duplicate.", model, run, writes=True)


def _link_tools(relations: list[str]) -> list[ToolSpec]:
    relation = _literal(relations)

    class LinkArg(BaseModel):
        model_config = _STRICT
        source: str = Field(description="node id")
        target: str = Field(description="node id")
        relation: relation  # type: ignore[valid-type]  # a Literal made at run time
        strength: float = Field(default=0.8, ge=0, le=1)

    upsert_model = create_model("memory_link_upsert_args", __config__=_STRICT,
                                links=(list[LinkArg], Field(min_length=1, description="links to create or update")))
    delete_model = create_model("memory_link_delete_args", __config__=_STRICT, source=(str, ...),
                                target=(str, ...), relation=(relation, ...))

    def upsert(ws: Workspace, given: Any) -> dict[str, Any]:
        ops = [{"op": "link", "source": link.source, "target": link.target, "relation": link.relation,
                "strength": link.strength, "valid_from": ws.anchor} for link in given.links]
        for link in given.links:
            ws.node(link.source, active=True)
            ws.node(link.target, active=True)
        done = ws.stage(ops)
        return {"ok": True, "edges": [op["id"] for op in done]}

    def delete(ws: Workspace, given: Any) -> dict[str, Any]:
        ws.stage([{"op": "unlink", "source": given.source, "target": given.target, "relation": given.relation}])
        return {"ok": True}

    return [ToolSpec("memory_link_upsert", "Create links between nodes, or update the strength of existing ones. "
                     "Relations: " + ", ".join(relations) + ".", upsert_model, upsert, writes=True),
            ToolSpec("memory_link_delete", "Remove the link (source, relation, target).", delete_model, delete,
                     writes=True)]
