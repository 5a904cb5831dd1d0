"""`curator demo`: the bundled example chat, its memory written floor by floor as extraction would have written it,
and at a few user turns the text the model receives, never memory from a later floor (no LLM, no network).

The example's hand-checked graph (`examples/lantern_road.graph.json`) holds the memory at the chat's end. The demo
replays it (`replay`): each node once its floors are over (a character sheet says what the whole chat says of its
character, its name too, so it enters at its last floor), a summary folding the events under it, a link once both
ends exist (and its end when it ends). Each floor's writes are one commit anchored at that floor, so the memory at
a turn holds only what the replies before it gave.
"""

import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from curator.cli import console
from curator.cli.base import JsonOpt, app, reported
from curator.cli.session import state
from curator.errors import CuratorError
from curator.paths import example_file

if TYPE_CHECKING:
    from curator.api.memory import Memory
    from curator.recall.injection import Injection
    from curator.store.messages import Message

CHAT = "lantern-road"
DEMO_TURNS = (20, 46, 58)  # user turns shown: the model's text for the reply to each
_NODE_KEYS = ("id", "type", "title", "fields", "level", "floor_from", "floor_to", "importance", "scope", "story_time")


def replay(graph: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """floor -> the ops extraction would have committed after the reply at that floor (see the module docstring)."""
    nodes = graph["nodes"]
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        if node.get("parent"):
            children[node["parent"]].append(node)
    ops: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for node in sorted(nodes, key=lambda n: (n["floor_to"], n["level"], n["id"])):
        fields = {k: node[k] for k in _NODE_KEYS if node.get(k) is not None}
        ops[node["floor_to"]].append({"op": "create_node", **fields})
        for child in children[node["id"]]:  # a summary folds the events under it
            ops[node["floor_to"]].append({"op": "update_node", "id": child["id"], "parent": node["id"]})
            if child["archived"]:
                ops[node["floor_to"]].append({"op": "archive_node", "id": child["id"]})
    made = {n["id"]: n["floor_to"] for n in nodes}
    for edge in graph["edges"]:
        start = max(made[edge["source"]], made[edge["target"]], edge.get("valid_from") or 0)
        link = {"op": "link", "source": edge["source"], "target": edge["target"], "relation": edge["relation"],
                "strength": edge["strength"], "valid_from": edge.get("valid_from")}
        if edge.get("valid_to") is not None and edge["valid_to"] <= start:
            ops[start].append({**link, "valid_to": edge["valid_to"]})
            continue
        ops[start].append(link)
        if edge.get("valid_to") is not None:  # the link ended: said when it did
            ops[edge["valid_to"]].append({**link, "valid_to": edge["valid_to"]})
    return dict(ops)


@app.command()
@reported
def demo(
    json_: JsonOpt = False,
    turns: Annotated[str, typer.Option(help="User turns to show, comma-separated floors.")] = ",".join(
        map(str, DEMO_TURNS)),
) -> None:
    """The example chat's memory, written floor by floor, and the text the model receives at a few user turns (no LLM,
    no network). Without --data it works in a temporary folder, removed at the end."""
    import tempfile

    try:
        shown = sorted({int(t) for t in turns.split(",") if t.strip()})
    except ValueError:
        raise CuratorError(f"--turns {turns!r} is not a list of floors",
                           "Give floors, e.g. --turns 20,46,58.") from None
    if state["data"]:
        _demo(Path(state["data"]), shown, json_, kept=True)
        return
    with tempfile.TemporaryDirectory(prefix="curator-demo-") as folder:  # removed however the demo ends
        _demo(Path(folder), shown, json_, kept=False)


def _demo(target: Path, shown: list[int], json_: bool, kept: bool) -> None:
    from curator.api.memory import Memory
    from curator.extract.chatfile import read_chat
    from curator.schemas import schema_from_data
    from curator.settings import load_settings

    graph = json.loads(example_file("lantern_road.graph.json").read_text(encoding="utf-8"))
    schema = schema_from_data(graph["schema"])
    messages = read_chat(example_file("lantern_road.jsonl")).messages
    ops = replay(graph)
    settings = load_settings(target)
    # Batches of 32: the bar still moves a few times, and e5 costs a third more CPU per text in batches of 8.
    settings = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"batch_size": 32})})
    with Memory(target, settings, store=state["store"]) as memory:
        if CHAT in memory.chats():
            memory.delete_chat(CHAT)
        memory.create_chat(CHAT, schema)
        written = -1  # the floors whose writes are committed

        def write_until(floor: int) -> None:  # the replies before `floor` have been answered and extracted
            nonlocal written
            memory.sync(CHAT, messages[:floor])
            for f in range(written + 1, floor):
                if ops.get(f):
                    memory.commit(CHAT, ops[f], anchor_floor=f, origin="import",
                                  note="demo: the example graph, replayed")
            written = max(written, floor - 1)

        if not json_:
            where = f"in {target}" if kept else "in a temporary folder (removed at the end; --data DIR keeps it)"
            console.out.print(f"[bold]memory-curator demo[/]: the example chat ({len(messages)} floors), its memory "
                              f"written floor by floor as extraction would have, {where}")
        embedded = False
        for floor in (f for f in shown if 0 <= f < len(messages) and not json_):
            write_until(floor)
            if not embedded:  # from here on each commit embeds its own nodes
                _embed_with_progress(memory, CHAT)
                embedded = True
            injection = memory.recall(CHAT, messages=messages[max(0, floor - 5):floor + 1], user_floor=floor)
            _print_turn(floor, messages[floor], injection)
        write_until(len(messages))
        memory.sync(CHAT, messages)
        stats = memory.graph(CHAT).stats()
        if json_:
            console.print_json({"data_dir": str(target) if kept else None, "chat": CHAT, "floors": len(messages),
                                "commits": stats["commits"], "stats": stats})
            return
        console.out.print(f"\n[bold]The memory at the end of the chat[/] (floor {len(messages) - 1}):")
        console.print_graph(CHAT, memory.graph(CHAT), (schema.name, list(schema.types)))
        if kept:
            console.out.print(f"\nTry: curator --data {target} recall --chat {CHAT} --query \"what does Eileen owe\"")
        else:
            console.out.print("\nTo keep the memory and try recall on it: curator --data ./demo demo, then "
                              f"curator --data ./demo recall --chat {CHAT} --query \"what does Eileen owe\"")


def _print_turn(floor: int, message: "Message", injection: "Injection") -> None:
    from rich.panel import Panel

    tokens = injection.to_dict()["tokens"]
    said = " ".join(message.text.split())
    console.out.print(f"\n[bold]Floor {floor}[/], {console.escape(message.name or message.role)}: "
                      f"{console.escape(said[:110])}{'…' if len(said) > 110 else ''}")
    console.out.print(f"  memory from floors 0-{floor - 1}: {len(injection.persistent)} persistent + "
                      f"{len(injection.recalled)} recalled nodes, {tokens['total']}/{tokens['budget']} tokens; "
                      "what the model receives with this turn:", highlight=False)
    console.out.print(Panel(console.escape(injection.text or "(nothing yet)"), expand=False))


def _embed_with_progress(memory: "Memory", chat_id: str) -> None:
    """Recall needs the graph's vectors: embed them first, with a bar (the local model loads on first use); each
    later commit embeds its own nodes."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    profile = memory.settings.embedding
    console.err.print(f"embedding the example's memory for recall with {profile.provider}:{profile.model} "
                      "(the model loads on first use)")
    with Progress(TextColumn("[bold]embedding"), BarColumn(), MofNCompleteColumn(), TextColumn("documents"),
                  TimeElapsedColumn(), console=console.err) as progress:
        task = progress.add_task("embed", total=None)
        report = memory.rebuild_vectors(chat_id, progress=lambda done, total: progress.update(task, completed=done,
                                                                                              total=total))
    if report.failed:
        raise CuratorError(f"embedding failed for {len(report.failed)} node(s): {next(iter(report.failed.values()))}",
                           "Check the `embedding` profile in config.yaml (`curator vectors status` shows it).")
