"""The plot planner (ST-BME's): from the open threads, the characters' goals and the recent events, the model
proposes the next few beats of the story. Off by default (`planner.enabled`); once on, one model call (task `plan`,
logged in `curator usage`) every `planner.every` replies, after that reply's extraction.

A plan lives in the commit log: a commit without ops (origin `maintenance`, note `plot plan: {...}`) anchored at the
reply it follows, so a rollback, an edit or a swipe of that reply takes it away with the memory it was made from,
and the newest plan is simply the newest such commit. Recall puts it after the memory as a short block (labelled
as story direction, not memory) when `planner.inject` is on; the panel and `curator plan` show it."""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from curator.maintenance.common import Job, node_line
from curator.store.plans import NOTE
THREAD_TYPES = ("thread", "plot_thread", "quest")  # types read as open threads, when the schema has them
GOAL_FIELDS = ("goal", "goals", "wants")


class Beats(BaseModel):
    model_config = ConfigDict(extra="forbid")
    beats: list[str] = Field(description="the next beats, most likely first, each one short line")


def _inputs(job: Job) -> tuple[str, str, str]:
    graph, schema = job.graph(), job.schema
    threads = [n for t in THREAD_TYPES if schema.type(t) for n in graph.nodes(type=t)]
    open_threads = [n for n in threads if (n.fields.get("status") or "").strip().lower() not in
                    ("resolved", "closed", "done", "abandoned")]
    goals = []
    for name, spec in schema.types.items():
        wanted = [f for f in GOAL_FIELDS if f in spec.field_names]
        if spec.identity != "event" and wanted:
            for node in graph.nodes(type=name):
                goal = "; ".join(node.fields[f] for f in wanted if node.fields.get(f))
                if goal:
                    goals.append(f"- {node.title}: {goal}")
    events = [n for name, spec in schema.types.items() if spec.identity == "event" and spec.extracted
              for n in graph.nodes(type=name) if n.parent is None]
    events.sort(key=lambda n: (n.floor_to, n.floor_from, n.id))
    recent = events[-job.settings.planner.recent_events:]
    return ("\n".join(node_line(n, with_id=False) for n in open_threads[-12:]) or "(none recorded)",
            "\n".join(goals[-12:]) or "(none recorded)",
            "\n".join(node_line(n, with_id=False) for n in recent) or "(nothing yet)")


async def plan(job: Job, seq: int | None = None) -> None:
    """Ask for the next beats and keep them as a plan anchored at the job's floor."""
    cfg = job.settings.planner
    threads, goals, events = _inputs(job)
    if events == "(nothing yet)":
        job.report.skipped = "nothing has happened yet to plan from"
        return
    prompt = job.prompts.render("plan", beats=cfg.beats, threads=threads, goals=goals, events=events)
    answer: Beats = await job.ask(Beats, prompt, _check(cfg.beats), system=job.prompts.render("maintain_system"),
                                  settle=lambda a: Beats(beats=[b for b in a.beats if b.strip()][:cfg.beats]))
    beats = [" ".join(b.split()) for b in answer.beats if b.strip()][:cfg.beats]
    record = job.store.commit(job.chat_id, [], job.anchor, "maintenance",
                              note=NOTE + json.dumps({"beats": beats, "seq": seq}, ensure_ascii=False))
    job.report.commits.append(record.id)
    job.report.changes.append({"action": "plan", "beats": beats})


def _check(limit: int) -> Callable[[Beats], None]:
    def check(answer: Beats) -> None:
        beats = [b for b in answer.beats if b.strip()]
        if not beats:
            raise ValueError("give at least one beat")
        if len(beats) > limit:
            raise ValueError(f"give at most {limit} beats, not {len(beats)}")

    return check
