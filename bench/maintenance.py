"""Maintenance cost with scripted models (model time excluded): hierarchical compression of 1,000 events, and
consolidation of a 500-node extraction stream against the real vector index (local embedder).

Compression: 1,000 `event` nodes of the default schema (fan-in 3, threshold 9, keep 6, max depth 10), each linked to
a character, folded in one `compact` run: wall time, LLM calls (one per batch), commits (one per level) and the graph
after. Consolidation: 250 extraction commits of two new nodes each (an event and a character sheet, drawn from small
pools so that near-duplicates recur), each followed by a gated consolidation of that step's nodes; the scripted model
skips a node whose nearest neighbour is at least 0.97 similar and keeps the rest. It reports the time per step
(embedding, neighbour queries, the model call and the commit), LLM calls, how often the gate opened and what was
skipped."""

from __future__ import annotations

import asyncio
import random
import re

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from curator.store.messages import Message

PEOPLE = ["Eileen", "Rowan", "Mira", "Brannoch", "Silas Marrow", "Old Tam", "the ferryman", "Captain Vell"]
PLACES = ["the bridge", "the mill", "the river ford", "the chapel", "the market", "the watchtower"]
DEEDS = ["pays a toll to", "argues with", "heals", "shares bread with", "lies to", "swears an oath to",
         "steals a map from", "gives a salve to"]


def fold(messages, info) -> ModelResponse:
    prompt = messages[0].parts[-1].content
    count, first, last = re.search(r"Fold these (\d+) .*?floors (\d+)-(\d+)\)", prompt).groups()
    args = {"title": f"Arc {first}-{last}", "summary": f"{count} events of floors {first}-{last}, folded."}
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])


def decide(messages, info) -> ModelResponse:
    prompt = messages[0].parts[-1].content
    decisions = []
    for block in prompt.split("NEW [")[1:]:
        node_id = block.split("]", 1)[0]
        top = re.search(r"neighbour \(([\d.]+)\)", block)
        action = "skip" if top and float(top.group(1)) >= 0.97 else "keep"
        decisions.append({"node_id": node_id, "action": action})
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"decisions": decisions})])


def compression(memory, events: int) -> dict:
    memory.create_chat("compress", "default")
    memory.set_messages("compress", [Message("assistant", "Eileen", "...")] * (2 * events + 2))
    ops = [{"op": "create_node", "id": f"c{i}", "type": "character_sheet", "fields": {"name": name}}
           for i, name in enumerate(PEOPLE)]
    rng = random.Random(7)
    for i in range(events):
        ops.append({"op": "create_node", "id": f"ev{i}", "type": "event", "title": f"Summary {i + 1}",
                    "fields": {"summary": f"{rng.choice(PEOPLE)} {rng.choice(DEEDS)} {rng.choice(PEOPLE)} "
                                          f"at {rng.choice(PLACES)}."},
                    "floor_from": 2 * i + 1, "floor_to": 2 * i + 1, "importance": float(rng.randint(1, 9))})
        ops.append({"op": "link", "source": f"c{i % len(PEOPLE)}", "target": f"ev{i}", "relation": "involved_in"})
    memory.commit("compress", ops, anchor_floor=2 * events + 1, origin="test")
    started = now()
    report = memory.compact("compress", model=FunctionModel(fold, model_name="scripted"))
    seconds = now() - started
    stats = memory.graph("compress").stats()
    levels: dict[int, int] = {}
    for node in memory.graph("compress").nodes(type="event"):
        levels[node.level] = levels.get(node.level, 0) + 1
    return {"events": events, "ok": report.ok, "seconds": round(seconds, 3), "llm_calls": report.usage.calls,
            "ms_per_batch": round(seconds * 1000 / max(1, report.usage.calls), 3), "commits": len(report.commits),
            "summaries": len(report.changes), "active_events_by_level": dict(sorted(levels.items())),
            "nodes_active": stats["nodes_active"], "nodes_archived": stats["nodes_archived"], "edges": stats["edges"]}


def consolidation(memory, nodes: int) -> dict:
    memory.create_chat("stream", "default")
    steps = nodes // 2
    memory.set_messages("stream", [Message("assistant", "Eileen", "...")] * (2 * steps + 2))
    maintainer = memory.maintainer(FunctionModel(decide, model_name="scripted"))
    memory.index  # noqa: B018 - open the index (and load the embedder) before timing
    memory.index.function.embedder.embed_documents(["warm up"])
    rng = random.Random(11)
    times, calls, gated, skipped = [], 0, 0, 0
    started = now()
    for step in range(steps):
        floor = 2 * step + 1
        name = rng.choice(PEOPLE) + ("" if rng.random() < 0.7 else f" {step}")
        memory.commit("stream", [
            {"op": "create_node", "id": f"ev{step}", "type": "event", "title": f"Summary {step + 1}",
             "fields": {"summary": f"{rng.choice(PEOPLE)} {rng.choice(DEEDS)} {rng.choice(PEOPLE)} at "
                                   f"{rng.choice(PLACES)}."}},
            {"op": "create_node", "id": f"ch{step}", "type": "character_sheet",
             "fields": {"name": name, "goal": f"reach {rng.choice(PLACES)}"}},
        ], anchor_floor=floor, origin="extract", note=f"seq {step + 1}")
        t = now()
        report = asyncio.run(maintainer.consolidate("stream", node_ids=[f"ev{step}", f"ch{step}"], anchor=floor))
        times.append(now() - t)
        calls += report.usage.calls
        gated += not report.skipped
        skipped += sum(c["action"] == "skip" for c in report.changes)
        if (step + 1) % 50 == 0:
            progress(f"consolidation: {step + 1}/{steps} steps")
    total = now() - started
    stats = memory.graph("stream").stats()
    return {"nodes": 2 * steps, "steps": steps, "seconds": round(total, 3), "llm_calls": calls,
            "gate_opened": gated, "skipped_nodes": skipped, "per_step": latency_summary(times),
            "nodes_active": stats["nodes_active"], "nodes_archived": stats["nodes_archived"]}


def main() -> None:
    def extra(parser):
        parser.add_argument("--events", type=int, default=1000)
        parser.add_argument("--nodes", type=int, default=500)

    args = parse_args(__doc__.splitlines()[0], extra)
    events, nodes = (100, 40) if args.quick else (args.events, args.nodes)
    with TempMemory() as tmp:
        progress(f"compression of {events} events")
        compressed = compression(tmp.memory, events)
        progress(f"consolidation of a {nodes}-node stream")
        consolidated = consolidation(tmp.memory, nodes)
    report = {"benchmark": "maintenance", "quick": args.quick, "env": environment(),
              "params": {"events": events, "nodes": nodes},
              "results": {"compression": compressed, "consolidation": consolidated}}

    def render(report: dict) -> str:
        c, s = report["results"]["compression"], report["results"]["consolidation"]
        rows = [
            (f"compress {c['events']} events", c["seconds"], c["llm_calls"], c["commits"],
             f"{c['nodes_active']} active, {c['nodes_archived']} archived; by level {c['active_events_by_level']}"),
            (f"consolidate {s['nodes']} nodes", s["seconds"], s["llm_calls"], s["steps"],
             (f"gate opened {s['gate_opened']}x, {s['skipped_nodes']} skipped; per step p50 {s['per_step']['p50_ms']} "
             f"ms, p95 {s['per_step']['p95_ms']} ms")),
        ]
        return table(["run", "seconds", "LLM calls", "commits/steps", "graph"], rows)

    emit(args, report, render)


if __name__ == "__main__":
    main()
