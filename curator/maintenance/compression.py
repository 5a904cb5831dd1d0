"""Built-in hierarchical compression: for every type whose compression mode is `hierarchical`, old nodes of a
level are folded `fan_in` at a time into a summary one level up, until every level is within its threshold or
`max_depth` is reached. Each level of each type is one commit (a `compact` op per batch), so a model failure
keeps what the levels below it already did, and a rollback below the commit's floor undoes it exactly."""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache, partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from curator.schemas import Schema, TypeSpec

from curator.store.graph import Node
from curator.store.ops import Compact
from curator.maintenance.common import Job, Progress, gather_limited, node_line


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


@lru_cache(maxsize=64)
def summary_model(spec: TypeSpec) -> type[BaseModel]:
    """The answer for one batch: the type's fields (required ones required), and a title when the type has no
    field that gives one."""
    fields: dict[str, Any] = {}
    if spec.title_field is None:
        fields["title"] = (str, Field(description="a short title for the summary, at most 60 characters"))
    for f in spec.fields:
        required = f.required or f.name in spec.primary_key
        fields[f.name] = (str if required else str | None, Field(... if required else None,
                                                                description=f.hint or None))
    return create_model(f"Summary_{spec.name}", __base__=_Answer, **fields)


def plan_batches(nodes: list[Node], spec: TypeSpec, level: int) -> list[list[Node]]:
    """The batches to fold at one level: per point of view (objective, or one POV owner), when the group has more
    than `threshold` nodes, all but the newest `keep_recent_leaves` (leaves only) in full batches of `fan_in`. Not
    per region: the extractor gives most events one, and a story that moves through many places would then never
    fold (a summary keeps its children's region only when they share one)."""
    c = spec.compression
    groups: dict[tuple[Any, ...], list[Node]] = defaultdict(list)
    for node in sorted(nodes, key=lambda n: (n.floor_from, n.floor_to, n.id)):
        groups[(node.scope.get("layer"), node.scope.get("owner"))].append(node)
    batches = []
    for group in groups.values():
        if len(group) <= c.threshold:
            continue
        keep = c.keep_recent_leaves if level == 0 else 0
        old = group[:max(0, len(group) - keep)]
        batches += [old[i:i + c.fan_in] for i in range(0, len(old) - c.fan_in + 1, c.fan_in)]
    return batches


def compressible_types(schema: Schema, types: list[str] | None = None) -> list[TypeSpec]:
    return [spec for name, spec in schema.types.items()
            if spec.compression.mode == "hierarchical" and (types is None or name in types)]


async def compress(job: Job, types: list[str] | None = None, progress: Progress | None = None) -> None:
    """Compress every hierarchical type (or the ones named) of the job's chat, level by level."""
    specs = compressible_types(job.schema, types)
    if types:
        unknown = sorted(set(types) - {s.name for s in specs})
        if unknown:
            job.report.skipped = (f"not hierarchically compressed in schema {job.schema.name!r}: "
                                  f"{', '.join(unknown)}")
            return
    if not specs:
        job.report.skipped = f"schema {job.schema.name!r} has no type with hierarchical compression"
        return
    done = [0]
    for spec in specs:
        for level in range(spec.compression.max_depth):
            batches = plan_batches(job.graph().nodes(type=spec.name, level=level), spec, level)
            if not batches:
                continue
            total = done[0] + len(batches)

            async def fold(batch: list[Node], spec: TypeSpec = spec, level: int = level, total: int = total) -> Compact:
                op = await _fold(job, spec, level, batch)
                done[0] += 1
                if progress:
                    progress(done[0], total)
                return op

            ops = await gather_limited(job.cfg.compression.concurrency, [partial(fold, b) for b in batches])
            record = job.commit(ops, f"compress {spec.name} level {level}: {len(ops)} summaries")
            for op, batch in zip(record.ops if record else [], batches):
                job.report.changes.append({"action": "compact", "type": spec.name, "level": level + 1,
                                           "node": op["id"], "children": [n.id for n in batch]})
    if not job.report.changes:
        job.report.skipped = "every level is within its threshold"


async def _fold(job: Job, spec: TypeSpec, level: int, batch: list[Node]) -> Compact:
    answer_type = summary_model(spec)
    limit = job.cfg.compression.max_chars
    title_rule = "" if spec.title_field else "\nGive a short `title` (at most 60 characters)."
    prompt = job.prompts.render(
        "maintain_compress", count=len(batch), type=spec.name, level=level, next_level=level + 1,
        floor_from=min(n.floor_from for n in batch), floor_to=max(n.floor_to for n in batch),
        fields=", ".join(f.name + (" (required)" if f.required else "") for f in spec.fields),
        max_chars=limit, title_rule=title_rule,
        instruction=spec.compression.instruction, children="\n".join(node_line(n, with_id=False) for n in batch))

    def check(answer: BaseModel) -> None:
        values = _fields(answer)
        size = sum(len(v) for v in values.values())
        if size > limit:
            raise ValueError(f"the summary has {size} characters; write at most {limit}")
        missing = [f for f in spec.required_fields if not values.get(f, "").strip()]
        if missing:
            raise ValueError(f"fill the required field(s): {', '.join(missing)}")

    answer = await job.ask(answer_type, prompt, check, system=job.prompts.render("maintain_system"))
    title = getattr(answer, "title", None)
    return Compact(type=spec.name, title=title.strip()[:80] if title else None, fields=_fields(answer),
                   children=[n.id for n in batch])


def _fields(answer: BaseModel) -> dict[str, str]:
    return {k: v.strip() for k, v in answer.model_dump(exclude={"title"}).items() if isinstance(v, str) and v.strip()}
