"""Compression as part of the pipeline, not an opt-in.

After every commit that writes memory for a floor (an extraction step, a curator run), each hierarchical type
that is now over its threshold at some level is compressed in the same job, exactly as its schema says
(`fan_in`, `threshold`, `keep_recent_leaves`, `max_depth`), anchored at that floor and undone by a rollback of it
like every commit. It needs a model for the `summarize` task (`tasks: {summarize: cheap}` in config.yaml, else the
`default` profile, or a model handed in); without one nothing runs and the recall caps keep the persistent block
small (`recall.max_per_type`), the rest falling to recall.

Cost: one `summarize` call per batch of `fan_in` nodes folded; with the default preset (`event`: fan_in 3,
threshold 9, keep_recent_leaves 6) that is one call about every third extraction step at level 0, plus a third of
that per level above, i.e. about half a call per step on a long chat.
"""

from __future__ import annotations

from curator.schemas import Schema
from curator.settings import Task

from curator.maintenance.common import MaintenanceReport
from curator.maintenance.compression import compressible_types, plan_batches
from curator.maintenance.runner import Maintainer
from curator.store.queries import GraphView
from curator.store.store import Store

TASK: Task = "summarize"


def types_over_threshold(store: Store, chat_id: str, schema: Schema) -> list[str]:
    """The hierarchical types with a level that has something to fold now (a cheap count first)."""
    due = []
    counts = GraphView(store.conn, chat_id)  # no check that the chat exists: the caller knows it does
    for spec in compressible_types(schema):
        graph = None
        for level, count in counts.level_counts(spec.name).items():
            if count <= spec.compression.threshold or level >= spec.compression.max_depth:
                continue
            graph = graph or store.graph(chat_id)
            if plan_batches(graph.nodes(type=spec.name, level=level), spec, level):
                due.append(spec.name)
                break
    return due


RETRY_AFTER = (
    10  # floors to wait after a failed compression before trying again (a broken model is not paid every step)
)


async def compress_due(maintainer: Maintainer, chat_id: str, anchor: int,
                       failures: dict[str, int] | None = None) -> MaintenanceReport | None:
    """Compress the types over their threshold, anchored at `anchor`; None when nothing is due or there is no
    model for `summarize` (then nothing is asked and nothing changes). `failures` (chat id -> floor of the last
    failed compression, kept by the caller) holds a failed compression back for `RETRY_AFTER` floors."""
    if failures is not None and chat_id in failures and anchor < failures[chat_id] + RETRY_AFTER:
        return None
    types = types_over_threshold(maintainer.store, chat_id, maintainer.store.chat(chat_id).schema)
    if not types or not maintainer.job("compact", chat_id, anchor, TASK).has_model():
        return None
    report = await maintainer.compact(chat_id, types, anchor=anchor, task=TASK)
    if failures is not None:
        if report.ok:
            failures.pop(chat_id, None)
        else:
            failures[chat_id] = anchor
    return report
