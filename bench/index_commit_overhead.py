"""Commits and rollbacks with the vector index open at 10k nodes, with nothing (or next to nothing) to embed: what
the store and the index's sync add to each (issue 15: <= 5 ms + the changed nodes' embedding).

The chat (half events, each with its message, half character sheets) is built through the index with a stub
embedder (a hash of the text as its vector), and the timed operations use it too, so the figures are the commit,
the sync's bookkeeping and its Chroma calls, never a model. Cases, each timed --turns times (CPU and wall):
- link: a commit of one link (no node changes what is embedded: no Chroma write);
- move: a commit that moves one character's floors (a metadata update);
- reply: a new event at a new floor and a character's floors moved (one embedding each of the event, its message
  and the event's source);
- rollback: undoing that reply (the event vanishes from two collections, the character moves back);
- kept reply: the same reply, kept (the next turn is at the next floor), so the staged writes gather and every
  FLUSH_ROWS of them go to Chroma in the reply's sync: its mean is the cost per reply with the flushes spread over
  them, its max a reply that flushed;
- flush: writing what is left staged at the end to Chroma (`VectorIndex.flush`), and how many rows it wrote.
Each case's mean is printed beside its p50: the flushes are in the means."""

from __future__ import annotations

from time import process_time

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table
from ingest_overhead import StubEmbedder

from curator.store.messages import Message

CHAT = "bench"


def build(memory, size: int) -> None:
    memory.create_chat(CHAT, "default")
    index = memory.index
    index.function._embedder = StubEmbedder(index.profile)
    events = size // 2
    memory.store.set_messages(CHAT, [Message("assistant", "Mira", f"Floor {f}: Mira walks the road past stone {f}.")
                                     for f in range(events)])
    for start in range(0, size, 1000):
        ops = []
        for i in range(start, min(size, start + 1000)):
            if i % 2 == 0:
                ops.append({"op": "create_node", "id": f"e{i // 2}", "type": "event", "title": f"Summary {i // 2}",
                            "fields": {"summary": f"Mira passed stone {i // 2}."},
                            "floor_from": i // 2, "floor_to": i // 2})
            else:
                ops.append({"op": "create_node", "id": f"c{i // 2}", "type": "character_sheet",
                            "fields": {"name": f"Walker {i // 2}", "identity": "a traveller"},
                            "floor_from": i // 2, "floor_to": i // 2})
        memory.commit(CHAT, ops, events - 1, "manual")
        progress(f"built {min(size, start + 1000)}/{size} nodes")


def timed(samples: dict, name: str, action) -> None:
    wall, cpu = now(), process_time()
    action()
    samples.setdefault(name, []).append(now() - wall)
    samples.setdefault(name + "_cpu", []).append(process_time() - cpu)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--size", type=int, default=10000),
        p.add_argument("--turns", type=int, default=20)))
    size, turns = (2000, 5) if args.quick else (args.size, args.turns)
    samples: dict[str, list[float]] = {}
    with TempMemory() as tmp:
        memory = tmp.memory
        build(memory, size)
        events = size // 2
        for turn in range(turns):
            floor = events + turn
            character = f"c{turn}"
            timed(
                samples,
                "link",
                lambda: memory.commit(
                    CHAT,
                    [{"op": "link", "source": character, "target": f"e{turn}", "relation": "involved_in"}],
                    floor - 1,
                    "manual",
                ),
            )
            timed(samples, "move", lambda: memory.commit(CHAT, [
                {"op": "update_node", "id": f"c{turn + 1}", "floor_to": floor - 1}], floor - 1, "manual"))
            memory.store.set_messages_from(CHAT, floor, [Message("assistant", "Mira", f"Turn {turn}: Mira rests.")])
            timed(samples, "reply", lambda: memory.commit(CHAT, [
                {"op": "create_node", "id": f"live{turn}", "type": "event", "title": f"Summary L{turn}",
                 "fields": {"summary": f"Mira rested at turn {turn}."}, "floor_from": floor, "floor_to": floor},
                {"op": "update_node", "id": character, "floor_to": floor}], floor, "manual"))
            timed(samples, "rollback", lambda: memory.rollback(CHAT, floor))
        for turn in range(turns):
            floor = events + turn
            memory.store.set_messages_from(CHAT, floor, [Message("assistant", "Mira", f"Turn {turn}: Mira rests.")])
            timed(samples, "kept reply", lambda: memory.commit(CHAT, [
                {"op": "create_node", "id": f"kept{turn}", "type": "event", "title": f"Summary K{turn}",
                 "fields": {"summary": f"Mira rested at turn {turn}."}, "floor_from": floor, "floor_to": floor},
                {"op": "update_node", "id": f"c{turn}", "floor_to": floor}], floor, "manual"))
        staged = memory.index.pending.count(CHAT)
        timed(samples, "flush", lambda: memory.index.flush(CHAT))
        stats = memory.graph(CHAT).stats()
    report = {"benchmark": "index_commit_overhead", "quick": args.quick, "env": environment(),
              "params": {"size": size, "turns": turns, "staged_at_flush": staged},
              "results": {**{name: latency_summary(values) for name, values in samples.items()},
                          "nodes_active": stats["nodes_active"]}}

    def render(report: dict) -> str:
        r = report["results"]
        rows = [(name, r[name + "_cpu"]["p50_ms"], r[name + "_cpu"]["mean_ms"], r[name]["p50_ms"], r[name]["mean_ms"],
                 r[name + "_cpu"]["max_ms"]) for name in ("link", "move", "reply", "rollback", "kept reply", "flush")]
        return (table(["with the index open", "CPU p50 ms", "CPU mean ms", "wall p50 ms", "wall mean ms", "CPU max ms"],
                      rows)
                + f"\n{r['nodes_active']} active nodes, {report['params']['turns']} turns, stub embedder; the flush "
                  f"wrote {report['params']['staged_at_flush']} staged rows")

    emit(args, report, render)


if __name__ == "__main__":
    main()
