"""Hierarchical summaries: every `small_every` extractions the slice since the last small summary becomes a
synopsis node (level 0); when a level holds more than `rollup_fan_in` active synopses, the oldest `fan_in` fold
into one a level up (a `compact`, so the sources are archived under it), until nothing folds.

Where the last small summary ended lives in the commit log (the anchor of the newest small-summary commit), so a
rollback moves it back by itself.

Retries are bounded: an answer outside the length bounds goes back to the model `output_retries` times and is then
clipped at a sentence (kept, not lost); a scheduled summary that still fails holds the next one back for
`small_every` extractions, twice that after a second failure in a row, and so on up to `MAX_WAIT`; a synopsis covers
at most the newest `2 x small_every` extractions, so the span of a failed one is not carried forward for ever."""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field


from curator.store.commit_log import anchored_between, newest_ops
from curator.store.graph import Node
from curator.store.ops import Compact, CreateNode
from curator.maintenance.common import Job, node_line

SMALL_NOTE = "small summary"
MAX_WAIT = 30  # extractions a failing scheduled summary waits at most before it is tried again
_SEQ = re.compile(r"^seq (\d+)")


class SummaryText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="the synopsis")


def _summary_field(job: Job) -> str | None:
    spec = job.schema.type(job.cfg.summaries.type)
    if spec is None:
        return None
    return "summary" if spec.field("summary") else (spec.required_fields or spec.field_names)[0]


def last_small_summary_floor(job: Job) -> int:
    """The last floor the newest small summary covers (-1 before the first): read from its commit, so it is
    right even when the summary ran (and is anchored) later than the extraction it covers."""
    newest = newest_ops(job.store, job.chat_id, "maintenance", 1, note_prefix=SMALL_NOTE)
    return newest[0][0]["floor_to"] if newest else -1


def pending_steps(job: Job) -> list[tuple[int, int, list[str]]]:
    """(floor, seq, created node ids) of the extraction commits since the last small summary, oldest first."""
    steps = []
    for floor, note, ops in anchored_between(job.store, job.chat_id, "extract", last_small_summary_floor(job),
                                             job.anchor):
        m = _SEQ.match(note or "")
        ids = [op["id"] for op in ops if op["op"] in ("create_node", "update_node") and op.get("id")]
        steps.append((floor, int(m.group(1)) if m else 0, ids))
    return steps


async def summarize(job: Job, force: bool = False) -> None:
    """Write the small summary if it is due (`force`: whenever at least one extraction is pending), then roll up."""
    cfg = job.cfg.summaries
    field = _summary_field(job)
    if field is None:
        job.report.skipped = (f"schema {job.schema.name!r} has no {cfg.type!r} type to hold summaries "
                              "(maintenance.summaries.type)")
        return
    if not cfg.enabled and not force:
        job.report.skipped = "summaries are disabled (maintenance.summaries.enabled)"
        return
    steps = pending_steps(job)
    job.report.details["pending_extractions"] = len(steps)
    if steps:
        job.report.details["newest_seq"] = steps[-1][1]
        held = None if force else _held_back(job, steps[-1][1])
        if held:
            job.report.skipped = held
            return
    if steps and (len(steps) >= cfg.small_every or force):
        await _small(job, field, steps[-2 * cfg.small_every:])
    await _rollup(job, field)
    if not job.report.changes:
        job.report.skipped = (f"{len(steps)} extraction(s) since the last small summary (one is written every "
                              f"{cfg.small_every}); no level holds more than {cfg.rollup_fan_in} synopses")


async def _small(job: Job, field: str, steps: list[tuple[int, int, list[str]]]) -> None:
    lo, hi = job.cfg.summaries.small_chars
    graph = job.graph()
    nodes = [n for n in (graph.get(i) for i in dict.fromkeys(i for _, _, ids in steps for i in ids)) if n is not None]
    floor_from, floor_to = steps[0][0], steps[-1][0]
    seq_from, seq_to = steps[0][1], steps[-1][1]
    material = "\n".join(node_line(n, with_id=False) for n in nodes if n.type != job.cfg.summaries.type)
    if not material.strip():
        messages = job.store.messages(job.chat_id)[floor_from:floor_to + 1]
        material = "\n".join(f"{m.name or m.role}: {m.text}" for m in messages)[:6000]
    prompt = job.prompts.render("maintain_summary", seq_from=seq_from, seq_to=seq_to, floor_from=floor_from,
                                floor_to=floor_to, min_chars=lo, max_chars=hi,
                                material=material or "(nothing was recorded)")
    answer = await job.ask(SummaryText, prompt, _length(lo, hi), system=job.prompts.render("maintain_system"),
                           settle=_clip(lo, hi))
    record = job.commit([CreateNode(type=job.cfg.summaries.type, title=f"Synopsis {seq_from}-{seq_to}",
                                    fields={field: answer.text.strip()}, floor_from=floor_from, floor_to=floor_to,
                                    level=0)],
                        f"{SMALL_NOTE}: extractions {seq_from}-{seq_to}, floors {floor_from}-{floor_to}")
    if record is None:
        return
    job.report.changes.append({"action": "small_summary", "node": record.ops[0]["id"], "kind": "small",
                               "extractions": [seq_from, seq_to], "floors": [floor_from, floor_to]})


async def _rollup(job: Job, field: str) -> None:
    cfg = job.cfg.summaries
    lo, hi = cfg.rollup_chars
    level = 0
    while True:
        active = job.graph().nodes(type=cfg.type, level=level)
        if len(active) <= cfg.rollup_fan_in:
            top = max((n.level for n in job.graph().nodes(type=cfg.type)), default=-1)
            if level >= top:
                break
            level += 1
            continue
        batch = sorted(active, key=lambda n: (n.floor_from, n.floor_to, n.id))[:cfg.rollup_fan_in]
        prompt = job.prompts.render("maintain_rollup", count=len(batch), floor_from=batch[0].floor_from,
                                    floor_to=max(n.floor_to for n in batch), min_chars=lo, max_chars=hi,
                                    synopses="\n".join(f"- {n.fields.get(field, n.title)}" for n in batch))
        answer = await job.ask(SummaryText, prompt, _length(lo, hi), system=job.prompts.render("maintain_system"),
                               settle=_clip(lo, hi))
        title = f"Synopsis {_span(batch)}"
        record = job.commit([Compact(type=cfg.type, title=title, fields={field: answer.text.strip()},
                                     children=[n.id for n in batch])],
                            f"summary rollup: level {level} -> {level + 1}, {len(batch)} synopses")
        if record is not None:
            job.report.changes.append({"action": "rollup", "node": record.ops[0]["id"], "kind": "rollup",
                                       "level": level + 1, "folded": [n.id for n in batch]})


def _span(batch: list[Node]) -> str:
    """Extraction range of a roll-up, from its sources' titles ("Synopsis 4-6"); floors when they carry none."""
    numbers = [int(x) for n in batch for x in re.findall(r"\d+", n.title.removeprefix("Synopsis "))[:2]]
    if numbers and all(n.title.startswith("Synopsis ") for n in batch):
        return f"{min(numbers)}-{max(numbers)}"
    return f"floors {batch[0].floor_from}-{max(n.floor_to for n in batch)}"


def _held_back(job: Job, newest_seq: int) -> str | None:
    """Why a scheduled summary waits (a recent one failed), or None."""
    entry = job.backoff.get(job.chat_id)
    if entry is None:
        return None
    failed_at, count = entry
    wait = min(job.cfg.summaries.small_every * 2 ** (count - 1), MAX_WAIT)
    if newest_seq >= failed_at + wait:
        return None
    return (f"the scheduled synopsis failed at extraction {failed_at} ({count} in a row); the next try is after "
            f"extraction {failed_at + wait}")


def note_outcome(job: Job) -> None:
    """After a scheduled summary: a failure holds the next one back, a synopsis written clears that."""
    report = job.report
    if report.error and "newest_seq" in report.details:
        _, count = job.backoff.get(job.chat_id, (0, 0))
        job.backoff[job.chat_id] = (report.details["newest_seq"], count + 1)
    elif report.changes:
        job.backoff.pop(job.chat_id, None)


def _clip(lo: int, hi: int) -> Callable[[SummaryText], SummaryText]:
    """On the last try: a synopsis too long is cut at its last sentence end within the bound (or at a word);
    one too short but not empty is kept as it is."""
    def settle(answer: SummaryText) -> SummaryText:
        text = " ".join(answer.text.split())
        if not text:
            raise ValueError("empty synopsis")
        if len(text) > hi:
            cut = text[:hi]
            end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "), cut.rfind("。"))
            text = cut[:end + 1] if end >= lo - 1 else cut[:cut.rfind(" ")].rstrip(",;:") if " " in cut else cut
        return SummaryText(text=text)

    return settle


def _length(lo: int, hi: int) -> Callable[[SummaryText], None]:
    def check(answer: SummaryText) -> None:
        size = len(answer.text.strip())
        if not lo <= size <= hi:
            raise ValueError(f"the synopsis has {size} characters; it must have {lo}-{hi}")

    return check
