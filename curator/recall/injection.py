"""Injection: what recall hands back. A persistent block (always-inject types, within their caps) and a recalled
block, each grouped into purpose buckets and packed into one token budget, best first, never cutting a node."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from curator.prompts import SHIPPED, Prompts
from curator.schemas import Schema

from curator.store.graph import Node
from curator.llm.records import Usage
from curator.store.queries import GraphView
from curator.llm.tokens import TOKENIZER_NAME, count_tokens, prepare_counts

BUCKETS = ("rules", "state", "episodic", "reflection")  # in the order they are rendered; their headings are labels


@dataclass
class Chosen:
    """A node chosen for the injection, with why and what it costs."""

    node: Node
    score: float
    reason: str
    block: str = "recalled"  # persistent | recalled
    view: str = ""  # how the speaker holds it: known | own | mistaken | rumour | unknown (see recall/story.py)
    text: str = ""
    tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.node.id, "type": self.node.type, "title": self.node.title, "level": self.node.level,
                "floors": [self.node.floor_from, self.node.floor_to], "score": round(self.score, 4),
                "reason": self.reason, "block": self.block, "tokens": self.tokens, "text": self.text,
                **({"view": self.view} if self.view else {})}


@dataclass
class Injection:
    """The memory for one generation: structured blocks, token counts, placement, and the rendered text."""

    chat_id: str
    query: str
    mode: str
    persistent: list[Chosen] = field(default_factory=list)
    recalled: list[Chosen] = field(default_factory=list)
    dropped_for_budget: list[str] = field(default_factory=list)  # the first ids of those left out
    dropped_count: int = 0
    left_out: list[dict[str, Any]] = field(
        default_factory=list
    )  # the first nodes left out, each with why (budget/cap/distance)
    left_out_count: int = 0
    budget_tokens: int = 0
    placement: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    reused: bool = False
    graph_version: int = 0
    text: str = ""
    fallback: dict[str, Any] | None = (
        None  # {"from": "llm", "reason": ...} when the requested mode failed and hybrid ran
    )
    speaker: str | None = None  # set when the memories are grouped by how the speaker holds them
    as_of: dict[str, Any] | None = None  # recall at a point in story time: the point (curator/recall/as_of.py)
    plan: list[str] = field(default_factory=list)  # the plot planner's beats, injected after the memory

    @property
    def tokens(self) -> int:
        return count_tokens(self.text) if self.text else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "chat": self.chat_id, "query": self.query, "mode": self.mode, "fallback": self.fallback,
            "reused": self.reused,
            "graph_version": self.graph_version,
            "blocks": {"persistent": [c.to_dict() for c in self.persistent],
                       "recalled": [c.to_dict() for c in self.recalled]},
            "tokens": {"persistent": sum(c.tokens for c in self.persistent),
                       "recalled": sum(c.tokens for c in self.recalled), "total": self.tokens,
                       "budget": self.budget_tokens, "tokenizer": TOKENIZER_NAME},
            "dropped_for_budget": self.dropped_for_budget[:DROPPED_LISTED], "dropped_count": self.dropped_count,
            "left_out": self.left_out, "left_out_count": self.left_out_count,
            "placement": self.placement,
            "usage": self.usage.to_dict(), "text": self.text,
            **({"speaker": self.speaker} if self.speaker else {}),
            **({"as_of": self.as_of} if self.as_of else {}),
            **({"plan": self.plan} if self.plan else {}),
        }


def node_line(node: Node, schema: Schema) -> str:
    """One node as the model reads it: title, floors, then its fields (the title field only once)."""
    spec = schema.type(node.type)
    order = spec.field_names if spec else tuple(node.fields)
    parts = [f"{name}: {' '.join(node.fields[name].split())}" for name in order
             if node.fields.get(name) and (spec is None or name != spec.title_field)]
    span = (
        f"floor {node.floor_from}" if node.floor_from == node.floor_to else f"floors {node.floor_from}-{node.floor_to}"
    )
    return f"- {node.title} ({node.type}, {span}): " + "; ".join(parts)


def persistent_nodes(graph: GraphView, schema: Schema, latest_floor: int) -> tuple[list[Node], list[Node]]:
    """Always-inject nodes within their caps, and those the caps left out (they go back to the recall pool).
    Only top-level nodes count (a compressed type shows its summaries, not the leaves folded into them);
    `max_floor_distance` keeps nodes that reach the last N floors; `max_per_type` keeps the newest K, except for
    latest-only types, whose every state stays."""
    kept: list[Node] = []
    dropped: list[Node] = []
    for name, spec in schema.types.items():
        if not spec.always_inject.enabled:
            continue
        caps = spec.always_inject
        nodes = [n for n in graph.nodes(type=name) if n.parent is None]
        nodes.sort(key=lambda n: (n.floor_to, n.floor_from, n.created_at), reverse=True)
        for index, node in enumerate(nodes):
            too_far = caps.max_floor_distance and node.floor_to < latest_floor - caps.max_floor_distance + 1
            too_many = caps.max_per_type and spec.identity != "latest_only" and index >= caps.max_per_type
            (dropped if too_far or too_many else kept).append(node)
    kept.sort(key=lambda n: (n.floor_from, n.level))
    return kept, dropped


PERSISTENT_SHARE = 0.7  # of the budget, at most, so recall always has room
MIN_LINE_TOKENS = 8  # no node line is shorter: below this much room, a block is full
DROPPED_LISTED = 50  # ids listed of the nodes left out for the budget (all are counted)
_LINES: OrderedDict[tuple[Any, ...], tuple[Schema, str, int]] = OrderedDict()  # (schema id, node, version) -> line


def _rendered(node: Node, schema: Schema) -> tuple[str, int]:
    """A node's line and its token count, remembered while the node is unchanged (a big persistent block is
    the same from one turn to the next)."""
    key = (id(schema), node.id, node.updated_at, node.title, node.floor_from, node.floor_to)
    cached = _LINES.get(key)
    if cached is None or cached[0] is not schema:  # the schema object is kept, so its id is not reused meanwhile
        text = node_line(node, schema)
        cached = _LINES[key] = (schema, text, count_tokens(text) + 1)
        while len(_LINES) > 50_000:
            _LINES.popitem(last=False)
    return cached[1], cached[2]


PREPARED = 64  # lines of each block the token counter is made ready for at once (see `prepare_counts`)
MAX_MISSES = 20  # past this many nodes in a row too long for the room left, a block counts as full


def rank_persistent(nodes: list[Node]) -> list[Node]:
    """The order persistent nodes are packed in: the highest summaries, then the newest nodes."""
    return sorted(nodes, key=lambda n: (-n.level, -n.floor_to, n.id))


def pack(injection: Injection, schema: Schema, persistent: list[Node], recalled: list[Chosen],
         prompts: Prompts = SHIPPED) -> Injection:
    """Fill the budget, never cutting a node (one that does not fit whole is left out, and named). Persistent
    nodes (given in `rank_persistent` order) come first, up to 70% of the budget; then recalled nodes by score.
    Each block is rendered in story order, with the templates and labels of `prompts`."""
    prompts = prompts.pinned()  # one version of each template for the whole injection, its file checked once
    prepare_lines([_node(item) for items in (persistent, recalled) for item in items[:PREPARED]], schema, prompts)
    used = 2 * block_overhead(prompts) + plan_tokens(injection, prompts)  # the plan's block comes off the top
    limits = {"persistent": int(injection.budget_tokens * PERSISTENT_SHARE), "recalled": injection.budget_tokens}
    blocks: tuple[tuple[str, Sequence[Node | Chosen]], ...] = (("persistent", persistent), ("recalled", recalled))
    for block, items in blocks:
        kept: list[Chosen] = []
        misses = 0
        for position, item in enumerate(items):
            if limits[block] - used < MIN_LINE_TOKENS or misses >= MAX_MISSES:  # full: do not render the rest
                injection.dropped_count += len(items) - position
                injection.dropped_for_budget.extend(_node(i).id for i in items[position:position + DROPPED_LISTED])
                break
            text, tokens = _rendered(_node(item), schema)
            if used + tokens > limits[block]:
                injection.dropped_count += 1
                injection.dropped_for_budget.append(_node(item).id)
                misses += 1
                continue
            chosen = item if isinstance(item, Chosen) else Chosen(item, 1.0, "always injected")
            chosen.block, chosen.text, chosen.tokens = block, text, tokens
            used, misses = used + tokens, 0
            kept.append(chosen)
        if block == "persistent":
            kept.sort(key=lambda c: (c.node.floor_from, c.node.level))
        setattr(injection, block, kept)
    injection.text = render_text(injection, schema, prompts)
    return injection


def prepare_lines(nodes: Sequence[Node], schema: Schema, prompts: Prompts = SHIPPED) -> None:
    """Make the token counter ready for these nodes' lines and a block's heading at once (`prepare_counts`); nothing
    is rendered once its whole encoder is built."""
    prepare_counts(text for texts in ([_empty_block(prompts)], (node_line(n, schema) for n in nodes))
                   for text in texts)


def block_overhead(prompts: Prompts = SHIPPED) -> int:
    """The tokens of an empty block (its heading), counted once per version of the template and heading."""
    return _empty_block_tokens(_empty_block(prompts))


def _empty_block(prompts: Prompts) -> str:
    return prompts.render("inject_block", heading=prompts.label("blocks", "recalled"), sections="")


@functools.lru_cache(maxsize=16)
def _empty_block_tokens(text: str) -> int:
    return count_tokens(text)


def _node(item: Node | Chosen) -> Node:
    return item.node if isinstance(item, Chosen) else item


VIEWS = ("known", "own", "mistaken", "rumour", "unknown")  # how the speaker holds a memory, in rendering order


def render_text(injection: Injection, schema: Schema, prompts: Prompts = SHIPPED) -> str:
    """The injection as text: its blocks, each grouped into sections (by bucket, or with a speaker by view and
    bucket), with the templates and labels of `prompts` (a data directory's own, or the shipped ones)."""
    prompts = prompts.pinned()
    blocks = []
    for block in ("persistent", "recalled"):
        items: list[Chosen] = getattr(injection, block)
        if not items:
            continue
        grouped: dict[tuple[str, str], list[Chosen]] = {}  # (view, bucket) -> its items, in the block's order
        for c in items:
            grouped.setdefault((c.view, _bucket(schema, c.node)), []).append(c)
        sections = []
        for view, bucket, heading in _sections(injection, prompts):
            lines = [_line(c, injection.speaker, prompts) for c in grouped.get((view, bucket), ())]
            if lines:
                sections.append(prompts.render("inject_section", bucket=heading, lines="\n".join(lines)).strip())
        blocks.append(prompts.render("inject_block", heading=prompts.label("blocks", block),
                                     sections="\n\n".join(sections)).strip())
    if injection.plan:
        blocks.append(_plan_block(injection, prompts))
    return "\n\n".join(blocks)


def _plan_block(injection: Injection, prompts: Prompts) -> str:
    return prompts.render("inject_block", heading=prompts.label("blocks", "plot"),
                          sections="\n".join(f"- {beat}" for beat in injection.plan)).strip()


def plan_tokens(injection: Injection, prompts: Prompts = SHIPPED) -> int:
    """The tokens the plan's block takes (0 without a plan)."""
    return count_tokens(_plan_block(injection, prompts)) + 1 if injection.plan else 0


def _sections(injection: Injection, prompts: Prompts) -> list[tuple[str, str, str]]:
    """(view, bucket, heading) in order: by bucket alone, or, with a speaker, by view and then bucket."""
    headings = {bucket: prompts.label("buckets", bucket) for bucket in BUCKETS}
    if not injection.speaker:
        return [("", bucket, heading) for bucket, heading in headings.items()]
    return [(view, bucket, prompts.label("views", view, bucket=heading, speaker=injection.speaker))
            for view in VIEWS for bucket, heading in headings.items()]


def _line(chosen: Chosen, speaker: str | None, prompts: Prompts) -> str:
    if chosen.view != "mistaken":
        return chosen.text
    return f"- {prompts.label('mistaken_line', speaker=speaker)} {chosen.text.removeprefix('- ')}"


def _bucket(schema: Schema, node: Node) -> str:
    spec = schema.type(node.type)
    return spec.bucket if spec else "state"
