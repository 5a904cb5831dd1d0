"""Turning a validated extraction answer into ops: events become new "Summary N" nodes, entities are matched
by primary key or alias and only the fields the model gave are filled or changed, latest-only types have
their state replaced, and links are resolved by name or ref."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


from curator.schemas import Schema, TypeSpec
from curator.extract.story_plan import apply_story
from curator.store.story_time import STORY_FIELDS, StoryInputError

from curator.store.graph import Node, normalize_name, split_aliases
from curator.store.ops import new_node_id
from curator.store.queries import GraphView


class PlanError(ValueError):
    """The answer cannot be turned into ops as it is; the message is meant for the model."""


@dataclass
class Plan:
    ops: list[dict[str, Any]] = field(default_factory=list)
    handles: dict[str, str] = field(default_factory=dict)  # normalized name or ref -> node id
    typed: dict[tuple[str, str], str] = field(default_factory=dict)  # (type, normalized name) -> node id
    refs: dict[str, str] = field(default_factory=dict)  # normalized ref -> node id
    clashes: dict[str, set[str]] = field(default_factory=dict)  # a name items of several types share -> types
    story_items: list[tuple[str, str, Any]] = field(default_factory=list)  # (where, node id, answer item)
    _creates: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id -> create op of this step
    _updates: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id -> update op of this step
    _types: dict[str, str] = field(default_factory=dict)  # node id -> type, of the entities of this answer


def plan_ops(schema: Schema, graph: GraphView, answer: Any, active: list[str], anchor: int,
             focus_from: int) -> list[dict[str, Any]]:
    plan = Plan()
    for type_name in active:
        spec = schema.types[type_name]
        numbers = _NumberSource(spec, graph)
        for position, item in enumerate(getattr(answer, type_name)):
            values = {k: " ".join(v.split()) if k not in spec.alias_fields else v.strip()
                      for k, v in item.model_dump(exclude={"ref", *STORY_FIELDS}).items()
                      if isinstance(v, str) and v.strip()}
            if spec.identity == "event":
                node_id = new_node_id()
                plan.ops.append({"op": "create_node", "id": node_id, "type": type_name,
                                 "title": numbers.title(values), "fields": values,
                                 "floor_from": focus_from, "floor_to": anchor})
                plan._creates[node_id] = plan.ops[-1]
            else:
                node_id = _upsert_entity(plan, spec, graph, values, anchor)
            if item.ref:
                ref = normalize_name(item.ref)
                if ref in plan.refs and plan.refs[ref] != node_id:
                    raise PlanError(f"{type_name}[{position}].ref: {item.ref!r} is the ref of another item of this "
                                    "answer too; give each item its own ref")
                plan.refs[ref] = node_id
            if spec.story:
                plan.story_items.append((f"{type_name}[{position}]", node_id, item))
    if plan.story_items:
        try:
            apply_story(plan, schema, graph, anchor, _resolve)
        except StoryInputError as exc:
            raise PlanError(str(exc)) from None
    seen = set()
    aside = _handles_set_aside(answer)
    for index, link in enumerate(answer.links):
        if aside and (normalize_name(link.source) in aside or normalize_name(link.target) in aside) and not (
                _resolvable(plan, graph, link.source) and _resolvable(plan, graph, link.target)):
            continue  # a link to an item of a type not active this step: set aside with the item
        source = _resolve(plan, graph, link.source, f"links[{index}].source")
        target = _resolve(plan, graph, link.target, f"links[{index}].target")
        if source == target:
            raise PlanError(f"links[{index}] links {link.source!r} to itself; drop it or name two different nodes")
        key = (source, link.relation, target)
        if key not in seen:
            seen.add(key)
            plan.ops.append({"op": "link", "source": source, "target": target, "relation": link.relation,
                             "valid_from": anchor})
    return plan.ops


def _handles_set_aside(answer: Any) -> set[str]:
    """The refs and names of the items the answer gave for types not active this step (output_model.py)."""
    handles: set[str] = set()
    for items in getattr(answer, "set_aside", {}).values():
        for item in items:
            if isinstance(item, dict):
                handles.update(normalize_name(v) for v in item.values() if isinstance(v, str) and v.strip())
    return handles


def _resolvable(plan: Plan, graph: GraphView, name: str) -> bool:
    key = normalize_name(name)
    return key in plan.refs or key in plan.handles or bool(graph.find_by_name(name))


def _upsert_entity(plan: Plan, spec: TypeSpec, graph: GraphView, values: dict[str, str], anchor: int) -> str:
    key_field = spec.primary_key[0]
    name = values[key_field]
    names = [name] + [a for f in spec.alias_fields for a in split_aliases(values.get(f, ""))]
    # Names are matched within the type: a thread and a character may both be called "The Grey Hand".
    node_id = next((plan.typed[(spec.name, n)] for n in map(normalize_name, names) if (spec.name, n) in plan.typed),
                   None)
    existing: Node | None = None
    if node_id is None:
        existing = _match(graph, spec, names)
        node_id = existing.id if existing else None
    if node_id is None:  # a new entity
        node_id = new_node_id()
        plan.ops.append({"op": "create_node", "id": node_id, "type": spec.name, "fields": dict(values),
                         "floor_from": anchor, "floor_to": anchor})
        plan._creates[node_id] = plan.ops[-1]
    elif node_id in plan._creates:  # mentioned twice in one answer: merge into the pending create
        _merge_into(plan._creates[node_id]["fields"], values, spec)
    else:
        node = existing or graph.get(node_id)
        if node is None:
            raise PlanError(f"{spec.name} {name!r}: node {node_id} is gone")  # deleted while this step ran
        _update_entity(plan, spec, node, values, anchor)
    for n in map(normalize_name, names):
        plan.typed[(spec.name, n)] = node_id
        if plan.handles.get(n, node_id) != node_id:
            plan.clashes.setdefault(n, set()).update({spec.name, plan._types.get(plan.handles[n], "?")})
        plan.handles[n] = node_id
    plan._types[node_id] = spec.name
    return node_id


def _match(graph: GraphView, spec: TypeSpec, names: list[str]) -> Node | None:
    for name in names:
        found = graph.find_by_name(name, types=[spec.name])
        if found:
            return max(found, key=lambda n: (n.floor_to, n.updated_at))
    return None


def _update_entity(plan: Plan, spec: TypeSpec, node: Node, values: dict[str, str], anchor: int) -> None:
    current = dict(node.fields)
    pending = plan._updates.get(node.id)
    if pending:
        current.update(pending["set_fields"])
    changes: dict[str, str] = {}
    for key, value in values.items():
        if key in spec.alias_fields:
            value = _union_aliases(current.get(key, ""), value)
        if key in spec.primary_key and normalize_name(value) == normalize_name(current.get(key, "")):
            continue  # the same name, perhaps spelled differently: keep the node's spelling
        if key in spec.primary_key:
            # Matched through an alias: keep the node's name, remember the other one as an alias.
            if spec.alias_fields:
                alias_field = spec.alias_fields[0]
                merged = _union_aliases(changes.get(alias_field, current.get(alias_field, "")), value)
                if merged != current.get(alias_field, ""):
                    changes[alias_field] = merged
            continue
        if value != current.get(key):
            changes[key] = value
    clears = []
    if spec.identity == "latest_only":  # the new state replaces the old one
        keep = set(spec.primary_key) | set(spec.alias_fields) | set(values)
        clears = [k for k in current if k not in keep and k not in spec.required_fields]
    if pending:
        pending["set_fields"].update(changes)
        pending["clear_fields"] = sorted(set(pending["clear_fields"]) | set(clears))
        return
    op: dict[str, Any] = {"op": "update_node", "id": node.id, "set_fields": changes, "clear_fields": clears}
    if anchor > node.floor_to:
        op["floor_to"] = anchor
    if changes or clears or "floor_to" in op:
        plan.ops.append(op)
        plan._updates[node.id] = op


def _merge_into(fields: dict[str, str], values: dict[str, str], spec: TypeSpec) -> None:
    for key, value in values.items():
        if key in spec.alias_fields:
            fields[key] = _union_aliases(fields.get(key, ""), value)
        elif key not in spec.primary_key:  # the first spelling of the name stays
            fields[key] = value


def _union_aliases(old: str, new: str) -> str:
    names, seen = [], set()
    for name in split_aliases(old) + split_aliases(new):
        if normalize_name(name) not in seen:
            seen.add(normalize_name(name))
            names.append(name)
    return ", ".join(names)


def _resolve(plan: Plan, graph: GraphView, name: str, where: str) -> str:
    key = normalize_name(name)
    if key in plan.refs:
        return plan.refs[key]
    if key in plan.clashes:
        kinds = " and a ".join(sorted(plan.clashes[key]))
        raise PlanError(f"{where}: {name!r} names both a {kinds} in this answer; give those items refs and "
                        "link by ref")
    if key in plan.handles:
        return plan.handles[key]
    found = graph.find_by_name(name)
    if found:
        return max(found, key=lambda n: (n.floor_to, n.updated_at)).id
    raise PlanError(f"{where}: {name!r} names no known node and no item of this answer; use a name from "
                    "'Known entities', a name you give in this answer, or the ref of one of its items")


class _NumberSource:
    """Titles for event nodes: the type's template with {n} increasing per chat ("Summary 1", "Summary 2"...)."""

    def __init__(self, spec: TypeSpec, graph: GraphView) -> None:
        self.template = spec.title_template
        self.spec = spec
        self.next = 1
        if self.template and "{n}" in self.template:
            pattern = re.compile("^" + re.escape(self.template).replace(r"\{n\}", r"(\d+)") + "$")
            numbers = [int(m.group(1)) for title in graph.titles(spec.name) if (m := pattern.match(title))]
            self.next = max(numbers, default=0) + 1

    def title(self, values: dict[str, str]) -> str:
        if self.template:
            title = self.template.replace("{n}", str(self.next))
            self.next += 1
            return title
        first = next((values[f] for f in self.spec.required_fields if values.get(f)), None) or next(
            iter(values.values()), ""
        )
        return first if len(first) <= 80 else first[:79] + "…"
