"""Reflection: the model looks at recent memories and may write one reflection node, a long-term pattern
("they often talk at sunset"), linked to the memories it rests on."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from curator.schemas import TypeSpec

from curator.store.ops import CreateNode, Link, new_node_id
from curator.maintenance.common import Job, node_line


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


@lru_cache(maxsize=16)
def reflection_model(spec: TypeSpec) -> type[BaseModel]:
    fields: dict[str, Any] = {
        "write": (bool, Field(description="false when the memories show no new long-term pattern")),
        "evidence": (list[str], Field(default_factory=list, description="ids of the memories it rests on")),
    }
    for f in spec.fields:
        fields[f.name] = (str | None, Field(default=None, description=f.hint or None))
    return create_model(f"Reflect_{spec.name}", __base__=_Answer, **fields)


async def reflect(job: Job, force: bool = False) -> None:
    cfg = job.cfg.reflection
    spec = job.schema.type(cfg.type)
    if spec is None:
        job.report.skipped = f"schema {job.schema.name!r} has no {cfg.type!r} type (maintenance.reflection.type)"
        return
    if not cfg.enabled and not force:
        job.report.skipped = "reflection is disabled (maintenance.reflection.enabled)"
        return
    graph = job.graph()
    recent = [n for n in graph.nodes() if n.type not in (cfg.type, job.cfg.summaries.type)]
    recent = sorted(recent, key=lambda n: (n.floor_to, n.id))[-cfg.window:]
    if len(recent) < 2:
        job.report.skipped = "fewer than two memories to reflect on"
        return
    existing = graph.nodes(type=cfg.type)
    ids = {n.id for n in recent}
    relation = "evidence" if job.schema.relation("evidence") else "related" if job.schema.relation("related") else None

    def check(answer: Any) -> None:
        if not answer.write:
            return
        values = _values(answer, spec)
        missing = [f for f in spec.required_fields if not values.get(f)]
        unknown = [i for i in answer.evidence if i not in ids]
        errors = ([f"fill the required field(s): {', '.join(missing)}"] if missing else []) + \
                 ([f"evidence must be ids of the memories shown; unknown: {', '.join(unknown)}"] if unknown else [])
        if len(set(answer.evidence)) < 2:
            errors.append("a reflection needs at least two memories as evidence")
        if errors:
            raise ValueError("; ".join(errors))

    prompt = job.prompts.render("maintain_reflect", type=spec.name,
                                fields=", ".join(f.name + (" (required)" if f.required else "") for f in spec.fields),
                                existing="\n".join(node_line(n, with_id=False) for n in existing[-20:]) or "(none)",
                                memories="\n".join(node_line(n) for n in recent))
    answer = await job.ask(reflection_model(spec), prompt, check, system=job.prompts.render("maintain_system"))
    if not answer.write:
        job.report.skipped = "the model saw no new long-term pattern"
        return
    values = _values(answer, spec)
    evidence = list(dict.fromkeys(answer.evidence))
    floors = [n.floor_to for n in recent if n.id in evidence]
    title = values.get(spec.title_field) if spec.title_field else None
    first = next(iter(values.values()))
    node_id = new_node_id()
    ops: list[Any] = [
        CreateNode(
            id=node_id,
            type=spec.name,
            title=title or (first if len(first) <= 80 else first[:79] + "…"),
            fields=values,
            floor_from=min(floors),
            floor_to=max(floors),
        )
    ]
    if relation is not None:  # the evidence points at the reflection it supports
        ops += [Link(source=e, target=node_id, relation=relation, strength=0.8) for e in evidence]
    job.commit(ops, f"reflection on {len(evidence)} memories")
    job.report.changes.append({"action": "reflect", "node": node_id, "evidence": evidence,
                               "relation": relation, "fields": values})


def _values(answer: BaseModel, spec: TypeSpec) -> dict[str, str]:
    return {f.name: v.strip() for f in spec.fields if isinstance(v := getattr(answer, f.name), str) and v.strip()}
