"""Curator runs with a scripted model (no LLM time): tool-call overhead on a 10k-node graph, and compaction of
1,000 leaf events to the top level.

Part 1 builds a chat of 10,000 nodes (1,000 character sheets, 500 places, 8,500 events; 17,000 edges) and makes
`--runs` curator runs of a typical observe/act session (schema, newest events, brief, find by name, keyword
search, links, expand, timeline, compaction candidates, then create/edit/link), each committed. It reports the
time to open a run's workspace (the private copy of the graph), each tool's mean ms, the mean ms per tool call
and the whole run. Part 2 creates 1,000 leaf events and lets a scripted curator fold them depth by depth
(`--groups-per-call` FOLD groups per memory_compact_nodes call, at most 16 model requests per run, one commit per
run) until nothing is offered; it reports the runs (commits), the nodes per level and the time."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

from _common import TempMemory, emit, environment, latency_summary, ms, now, parse_args, progress, table
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from curator.extract.curator_agent import Curator
from curator.store.messages import Message
from curator.tools import Workspace


def build_graph(memory, chat: str, nodes: int) -> None:
    characters, places = nodes // 10, nodes // 20
    events = nodes - characters - places
    ops: list[dict] = []

    def flush(floor: int) -> None:
        if ops:
            memory.commit(chat, ops, anchor_floor=floor, origin="test")
            ops.clear()

    for i in range(characters):
        ops.append({"op": "create_node", "id": f"c{i}", "type": "character_sheet", "floor_from": 0,
                    "fields": {"name": f"Character {i}", "aliases": f"the {i}th", "goal": f"reach gate {i % 50}"}})
    for i in range(places):
        ops.append({"op": "create_node", "id": f"p{i}", "type": "location_state", "floor_from": 0,
                    "fields": {"name": f"Place {i}", "danger": "low" if i % 3 else "high"}})
    flush(0)
    for i in range(events):
        floor = 2 * i + 1
        ops += [
            {
                "op": "create_node",
                "id": f"e{i}",
                "type": "event",
                "title": f"Summary {i + 1}",
                "floor_from": floor,
                "fields": {
                    "summary": f"Character {i % characters} meets Character "
                    f"{(i * 7) % characters} at Place {i % places} and trades a map {i}."
                },
            },
            {"op": "link", "source": f"c{i % characters}", "target": f"e{i}", "relation": "involved_in"},
            {"op": "link", "source": f"e{i}", "target": f"p{i % places}", "relation": "occurred_at"},
        ]
        if len(ops) >= 600:
            flush(floor)
    flush(2 * events)


def session_steps(run: int) -> list:
    """A typical curator session: observe, check names, write, look at compaction."""
    name = f"Character {17 + run}"
    return [
        [("memory_schema", {}), ("memory_list_candidates", {"types": ["event"], "limit": 5})],
        lambda r: [("memory_node_brief", {"node_id": r["memory_list_candidates"]["nodes"][0]["id"]}),
                   ("memory_find_by_name", {"name": name}), ("memory_find_by_name", {"name": "Place 3"})],
        [("memory_keyword_search", {"query": "trades a map at Place 3", "k": 5}),
         ("memory_edge_summary", {"node_id": f"c{17 + run}"}), ("memory_expand_seeds", {"seed_ids": [f"c{17 + run}"]}),
         ("memory_timeline", {"floor_from": 100, "floor_to": 140})],
        [("create_event", {"summary": f"{name} signs the treaty at Place 3 (run {run})."}),
         ("edit_character_sheet", {"node_id": f"c{17 + run}", "set_fields": {"goal": "keep the treaty"}})],
        lambda r: [("memory_link_upsert", {"links": [
            {"source": f"c{17 + run}", "target": r["create_event"]["id"], "relation": "involved_in"},
            {"source": r["create_event"]["id"], "target": "p3", "relation": "occurred_at"}]}),
            ("memory_compaction_candidates", {"type": "event", "depth": 0})],
        "Recorded the treaty.",
    ]


class Scripted:
    def __init__(self, steps: list):
        self.steps = steps

    def __call__(self, messages, info) -> ModelResponse:
        results = {p.tool_name: p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart)}
        step = self.steps.pop(0) if self.steps else "done"
        step = step(results) if callable(step) else step
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(n, a) for n, a in step])


class Compactor:
    """Folds every offered group, `per_call` groups per call, depth by depth; ends a run one request before the
    cap (the run commits) and says when nothing is left."""

    def __init__(self, per_call: int, cap: int):
        self.per_call, self.cap = per_call, cap
        self.depth, self.requests, self.finished = 0, 0, False
        self.top_folded = -1  # the highest depth folded so far: the levels above it hold no nodes yet

    def new_run(self) -> None:
        self.requests = 0

    def __call__(self, messages, info) -> ModelResponse:
        self.requests += 1
        results = {p.tool_name: p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart)}
        found = results.get("memory_compaction_candidates")
        if self.requests >= self.cap:
            return ModelResponse(parts=[TextPart("cap reached; continuing next run")])
        if found is None:
            return self._candidates()
        if found["groups"]:
            groups = [{"decision": "FOLD", "node_ids": g["node_ids"],
                       "summary": " / ".join(n["text"][:40] for n in g["nodes"])[:190]}
                      for g in found["groups"]]
            self.top_folded = max(self.top_folded, self.depth)
            return ModelResponse(parts=[ToolCallPart("memory_compact_nodes", {"type": "event", "groups": groups})])
        if self.depth > self.top_folded or "top depth" in found["why"]:
            self.finished = True
            return ModelResponse(parts=[TextPart("nothing left to fold")])
        self.depth += 1
        return self._candidates()

    def _candidates(self) -> ModelResponse:
        args = {"type": "event", "depth": self.depth, "limit": self.per_call}
        return ModelResponse(parts=[ToolCallPart("memory_compaction_candidates", args)])


def tool_overhead(args) -> dict:
    nodes = 1000 if args.quick else args.nodes
    runs = 2 if args.quick else args.runs
    with TempMemory() as tmp:
        memory = tmp.memory
        memory.create_chat("big", "default")
        started = now()
        build_graph(memory, "big", nodes)
        build_s = now() - started
        replies = 2 * nodes
        memory.set_messages("big", [Message("user" if i % 2 == 0 else "assistant", "x", f"turn {i}")
                                    for i in range(replies)])
        progress(f"built {nodes} nodes in {build_s:.1f}s")
        opens, per_tool, per_call, run_ms = [], defaultdict(list), [], []
        for run in range(runs):
            t = now()
            Workspace.open(memory.store, "big", anchor=replies - 1, seq=run + 1, active_types=["event"]).close()
            opens.append(now() - t)
            curator = Curator(memory.store, memory.settings, model=FunctionModel(Scripted(session_steps(run))))
            t = now()
            result = asyncio.run(curator.curate("big", floor=replies - 1 - 2 * (runs - run - 1)))
            run_ms.append(now() - t)
            assert result.ok and all(c.ok for c in result.tool_calls), result.to_dict()
            for call in result.tool_calls:
                per_tool[call.name].append(call.ms / 1000)
                per_call.append(call.ms / 1000)
        stats = memory.graph("big").stats()
    calls_per_run = len(per_call) // runs
    return {"nodes": stats["nodes_active"] + stats["nodes_archived"], "edges": stats["edges"],
            "build_s": round(build_s, 2), "runs": runs, "tool_calls_per_run": calls_per_run,
            "workspace_open": latency_summary(opens), "per_call": latency_summary(per_call),
            "per_tool_mean_ms": {k: ms(sum(v) / len(v)) for k, v in sorted(per_tool.items())},
            "run": latency_summary(run_ms),
            "run_ms_per_call": ms(sum(run_ms) / runs / calls_per_run)}


def compaction(args) -> dict:
    leaves = 100 if args.quick else args.leaves
    cap = 16
    with TempMemory() as tmp:
        memory = tmp.memory
        memory.create_chat("long", "default")
        memory.set_messages("long", [Message("user" if i % 2 == 0 else "assistant", "x", f"turn {i}")
                                     for i in range(2 * leaves)])
        ops = [{"op": "create_node", "id": f"c{i}", "type": "character_sheet", "fields": {"name": f"Hero {i}"}}
               for i in range(20)]
        for i in range(leaves):
            ops += [
                {
                    "op": "create_node",
                    "id": f"e{i}",
                    "type": "event",
                    "title": f"Summary {i + 1}",
                    "floor_from": 2 * i + 1,
                    "importance": 9 if i % 97 == 0 else 4,
                    "fields": {"summary": f"Day {i}: Hero {i % 20} crosses ford {i} and pays a toll of {i % 9} coins."},
                },
                {"op": "link", "source": f"c{i % 20}", "target": f"e{i}", "relation": "involved_in"},
            ]
        memory.commit("long", ops, anchor_floor=2 * leaves - 1, origin="test")
        script = Compactor(args.groups_per_call, cap)
        curator = Curator(memory.store, memory.settings, model=FunctionModel(script))
        commits, run_times, requests, calls = [], [], 0, 0
        started = now()
        while not script.finished and len(commits) < 200:
            script.new_run()
            t = now()
            result = asyncio.run(curator.curate("long", floor=2 * leaves - 1, max_requests=cap))
            run_times.append(now() - t)
            assert result.ok, result.reason
            commits.append(result.commit.id)
            requests += result.usage.calls
            calls += len(result.tool_calls)
        total = now() - started
        graph = memory.graph("long")
        levels = Counter(
            (n.level, "archived" if n.archived else "active") for n in graph.nodes(type="event", archived=None)
        )
        top = max(level for level, state in levels if state == "active")
    per_level = [{"level": level, "active": levels.get((level, "active"), 0),
                  "archived": levels.get((level, "archived"), 0)} for level in range(top + 1)]
    return {"leaves": leaves, "groups_per_call": args.groups_per_call, "commits": len(commits),
            "model_requests": requests, "tool_calls": calls, "seconds": round(total, 3),
            "run": latency_summary(run_times), "levels": per_level, "top_level": top,
            "active_events": sum(r["active"] for r in per_level)}


def main() -> None:
    def extra(p):
        p.add_argument("--nodes", type=int, default=10_000)
        p.add_argument("--runs", type=int, default=5)
        p.add_argument("--leaves", type=int, default=1000)
        p.add_argument("--groups-per-call", type=int, default=30)

    args = parse_args(__doc__.splitlines()[0], extra)
    results = {"tools": tool_overhead(args), "compaction": compaction(args)}
    report = {"benchmark": "curator_tools", "quick": args.quick, "env": environment(),
              "params": {"nodes": args.nodes, "runs": args.runs, "leaves": args.leaves,
                         "groups_per_call": args.groups_per_call}, "results": results}

    def render(report: dict) -> str:
        t, c = report["results"]["tools"], report["results"]["compaction"]
        head = (f"Part 1: {t['nodes']:,} nodes, {t['edges']:,} edges (built in {t['build_s']} s); {t['runs']} runs of "
                f"{t['tool_calls_per_run']} tool calls")
        tail = (f"Part 2: {c['leaves']} leaf events folded to level {c['top_level']} in {c['commits']} curator runs "
                f"(commits), {c['model_requests']} model requests, {c['tool_calls']} tool calls, {c['seconds']} s "
                f"(run p50 {c['run']['p50_ms']} ms)")
        lines = [
            head,
            table(
                ["", "p50 ms", "mean ms", "max ms"],
                [
                    (name, t[name]["p50_ms"], t[name]["mean_ms"], t[name]["max_ms"])
                    for name in ("workspace_open", "per_call", "run")
                ],
            ),
            f"whole run per tool call: {t['run_ms_per_call']} ms",
            "",
            table(["tool", "mean ms"], list(t["per_tool_mean_ms"].items())),
            "",
            tail,
            table(["level", "active", "archived"], [(r["level"], r["active"], r["archived"]) for r in c["levels"]]),
        ]
        return "\n".join(lines)

    emit(args, report, render)


if __name__ == "__main__":
    main()
