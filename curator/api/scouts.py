"""Scouts: read-only looks at the memory before a reply, whose findings feed the director (the agent that drafts
the reply: an outer orchestrator, or the memory_curator in director mode). No model call; each scout is a few
graph queries (`recall` embeds the message once).

- `named`: the entities the message names (name or alias), each with its fields and its strongest links;
- `continuity`: the newest events, so the reply picks up where the story stands;
- `threads`: open plot threads, and the contradictions still waiting in the inbox (facts the reply should not lean
  on either way until they are decided);
- `epistemic` (with a speaker): of the memories found, those the speaker does not know (they must not act on them)
  and the speaker's own mistaken beliefs;
- `recall`: what recall would inject for the message (the memory the reply will see).

The report is a mapping per scout, and a text for a model (template `scouts`, editable like every prompt)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from curator.maintenance.contradictions import open_contradictions
from curator.prompts import Prompts
from curator.recall.story import story_context
from curator.schemas import Schema
from curator.store.graph import Node, normalize_name
from curator.store.queries import GraphView
from curator.store.store import Store
from curator.vectors.documents import node_document

SCOUTS = ("named", "continuity", "threads", "epistemic", "recall")
THREAD_TYPES = ("thread", "plot_thread", "quest")
CLOSED = ("resolved", "closed", "done", "abandoned")
BRIEF = 220


@dataclass
class ScoutReport:
    chat_id: str
    message: str
    speaker: str | None
    findings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"chat": self.chat_id, "message": self.message, "speaker": self.speaker, "findings": self.findings,
                "text": self.text}


def _brief(node: Node, schema: Schema, **extra: Any) -> dict[str, Any]:
    text = " ".join(node_document(node, schema).split())
    return {"id": node.id, "type": node.type, "title": node.title,
            "floors": [node.floor_from, node.floor_to],
            "text": text if len(text) <= BRIEF else text[:BRIEF - 1] + "…", **extra}


def named_nodes(graph: GraphView, message: str) -> list[Node]:
    words = [w for w in normalize_name(re.sub(r"[^\w\s'-]", " ", message)).split() if w]
    spans = {" ".join(words[i:i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)}
    spans |= {s[:-2] for s in spans if s.endswith("'s")}
    found: dict[str, Node] = {}
    for span in sorted(spans, key=lambda s: -len(s)):
        for node in graph.find_by_name(span):
            found.setdefault(node.id, node)
    return list(found.values())


def scout(store: Store, chat_id: str, message: str, prompts: Prompts, speaker: str | None = None,
          recalled: list[Node] | None = None, scouts: tuple[str, ...] = SCOUTS) -> ScoutReport:
    """Run the scouts for the message about to be answered (`recalled`: what recall chose, for the `recall`
    and `epistemic` scouts)."""
    chat = store.chat(chat_id)
    schema, graph = chat.schema, store.graph(chat_id)
    report = ScoutReport(chat_id, message, speaker)
    named = named_nodes(graph, message)
    if "named" in scouts:
        report.findings["named"] = [
            _brief(n, schema, links=[f"{e.relation} {'→' if e.source == n.id else '←'} {other.title}"
                                     for e, other in graph.neighbours(n.id)[:5]]) for n in named[:8]]
    if "continuity" in scouts:
        events = [n for name, spec in schema.types.items() if spec.identity == "event" and spec.extracted
                  for n in graph.nodes(type=name) if n.parent is None]
        events.sort(key=lambda n: (n.floor_to, n.floor_from, n.id))
        report.findings["continuity"] = [_brief(n, schema) for n in events[-2:]]
    if "threads" in scouts:
        threads = [n for t in THREAD_TYPES if schema.type(t) for n in graph.nodes(type=t)
                   if (n.fields.get("status") or "").strip().lower() not in CLOSED]
        conflicts = [{"id": c["id"], "new": c["new"]["title"], "old": c["old"]["title"], "type": "contradiction",
                      "text": "waiting for a decision (inbox): do not rely on either"}
                     for c in open_contradictions(store, chat_id)[:5]]
        report.findings["threads"] = [_brief(n, schema) for n in threads[-8:]] + conflicts
    if "recall" in scouts and recalled is not None:
        report.findings["recall"] = [_brief(n, schema) for n in recalled]
    if "epistemic" in scouts and speaker:
        context = story_context(graph, store.graph_version(chat_id), speaker, store.changes)
        seen = {n.id: n for n in [*named, *(recalled or [])]}
        views = []
        for node in seen.values():
            view = context.view(node.id)
            if view in ("unknown", "mistaken", "rumour"):
                why = {"unknown": f"{speaker} does not know this: must not act on it",
                       "mistaken": f"{speaker} believes this, but the facts contradict it",
                       "rumour": "another character's view, not a fact"}[view]
                views.append(_brief(node, schema, view=view, why=why))
        report.findings["epistemic"] = views
    report.text = render(report, prompts)
    return report


def render(report: ScoutReport, prompts: Prompts) -> str:
    def lines(name: str) -> str:
        items = report.findings.get(name)
        if items is None:
            return "(not run)"
        return "\n".join(f"- {i.get('title') or i.get('new')}: {i.get('why') or i.get('text', '')}"
                         + (f" [{'; '.join(i['links'])}]" if i.get("links") else "") for i in items) or "(nothing)"

    return prompts.render("scouts", message=report.message, speaker=report.speaker or "(not given)",
                          named=lines("named"), continuity=lines("continuity"), threads=lines("threads"),
                          epistemic=lines("epistemic"), recalled=lines("recall")).strip()
