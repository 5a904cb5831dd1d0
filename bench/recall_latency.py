"""Recall latency at 1k, 10k and 100k nodes in one chat, and across 100 chats, next to a bare Chroma query of the
same collection in the same run (our overhead as a ratio); plus index build throughput with the local embedders.

Each event has a chat message at its floor, so recall also scores events by their source messages. The big graphs
get random unit vectors written straight into Chroma, for node documents and sources (with the hashes the index
keeps), so the run measures recall, not hours of embedding; the query itself is embedded for real by the default
embedder.
"hybrid" is the full default recall (pool, BM25, vector query, fusion, leaf lifting, expansion, packing);
"bare" is embedding the query plus `collection.query(n_results=20)`."""

from __future__ import annotations

import random

import numpy as np
from time import process_time

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table

from curator.paths import example_file
from curator.vectors.embeddings import EmbeddingProfile, make_embedder
from curator.store.messages import Message
from curator.vectors.documents import node_document, source_floors
from curator.vectors.index import SOURCES, _digest
from curator.vectors.mirror import MIRROR_AFTER
from curator.vectors.writes import node_metadata

NAMES = ["Eileen", "Rowan", "Mira", "Brannoch", "Silas", "Tamsin", "Oskar", "Liane", "Hedda", "Corin"]
PLACES = ["Saltmere", "the bridge", "Ashwood", "the waystation", "the docks", "the temple", "the market"]
VERBS = ["paid", "owed", "healed", "fought", "met", "followed", "betrayed", "thanked", "warned", "carried"]
OBJECTS = ["a salve", "a silver compass", "a sealed letter", "three crowns", "a lantern", "a map", "a debt"]


def sentence(rng: random.Random, i: int) -> str:
    return (f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(NAMES)} at {rng.choice(PLACES)} "
            f"and left {rng.choice(OBJECTS)} (scene {i}).")


def write_nodes(memory, chat: str, size: int, rng: random.Random, per_commit: int = 1000) -> None:
    """A new chat of `size` nodes (a tenth people, a tenth places, the rest events, `per_commit` to a commit) and a
    message per node, with no vectors."""
    memory.create_chat(chat, "default")
    ops, floor = [], 0
    for i in range(size):
        if i % 10 == 0:
            ops.append({"op": "create_node", "id": f"c{i}", "type": "character_sheet",
                        "fields": {"name": f"{rng.choice(NAMES)} {i}", "goal": sentence(rng, i)}})
        elif i % 10 == 1:
            ops.append({"op": "create_node", "id": f"l{i}", "type": "location_state",
                        "fields": {"name": f"{rng.choice(PLACES)} {i}", "danger": sentence(rng, i)}})
        else:
            ops.append({"op": "create_node", "id": f"e{i}", "type": "event", "title": f"Summary {i}",
                        "fields": {"summary": sentence(rng, i)}, "floor_from": i, "floor_to": i})
        if len(ops) == per_commit:
            memory.commit(chat, ops, floor, "test")
            floor += 1
            ops = []
    if ops:
        memory.commit(chat, ops, floor, "test")
    memory.set_messages(chat, [Message("assistant", rng.choice(NAMES), sentence(rng, i)) for i in range(size)])


def build_chat(memory, chat: str, size: int, rng: random.Random, dims: tuple[int, int]) -> float:
    """`size` nodes (people, places, events; a fifth of the events folded into summaries), indexed with
    random vectors (`dims`: of the nodes' space and of the sources'). Returns the seconds it took."""
    started = now()
    hooks, memory.store.on_change[:] = list(memory.store.on_change), []  # no live sync: vectors are written below
    write_nodes(memory, chat, size, rng)
    index = memory.index
    schema = memory.chat(chat).schema
    nodes = memory.graph(chat).nodes(archived=None)
    lines = index.message_lines(chat)
    collections = (index._collection(chat), index._collection(chat, SOURCES))
    hashes = {}
    for start in range(0, len(nodes), 5000):
        batch = nodes[start:start + 5000]
        documents = [node_document(n, schema) for n in batch]
        sources = ["\n".join(index.messages.documents(lines, source_floors(n, lines, {"event"})).values())
                   for n in batch]  # as the index writes them (the vector: random, like the nodes')
        for collection, docs, dim in zip(collections, (documents, sources), dims):
            ids = [(n.id, d) for n, d in zip(batch, docs) if d]
            vectors = np.random.default_rng(start).normal(size=(len(ids), dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            collection.upsert(ids=[i for i, _ in ids], embeddings=list(vectors),  # as the index: no documents
                              metadatas=[node_metadata(n) for n, d in zip(batch, docs) if d])
        for node, document, source in zip(batch, documents, sources):
            hashes[node.id] = (_digest(index.profile.key, document), _digest(*node_metadata(node).values()),
                               _digest(index.profile.key, source) if source else "")
    index._save_state(chat, hashes)
    memory.store.on_change[:] = hooks
    return now() - started


def time_queries(memory, chats: list[str], queries: list[str], rng: random.Random) -> dict:
    embedder = memory.index.function.embedder
    ours, bare, cpu, bare_cpu = [], [], [], []
    loaded = len(memory.index.mirrors.loads)
    # warm: the first recall of a graph version builds its pool and BM25 index; a chat recalled as often as a live
    # one is has its vectors copied into memory (`vectors/mirror.py`, in the background; waited for here)
    for chat in chats:
        for _ in range(MIRROR_AFTER if len(chats) == 1 else 1):
            memory.recall(chat, queries[0])
    memory.index.mirrors.wait()
    recaller = getattr(getattr(memory, "_core", memory), "_recaller", None)
    if hasattr(recaller, "wait_loaded"):  # a chat recalled this often has its whole state loaded in the background
        recaller.wait_loaded()
    copies = memory.index.mirrors.loads[loaded:]
    for query in queries:
        chat = rng.choice(chats)
        memory.index._query_cache.clear()  # each recall embeds its query, as the bare query does
        started, cpu_started = now(), process_time()
        memory.recall(chat, query)
        ours.append(now() - started)
        cpu.append(process_time() - cpu_started)
        started, cpu_started = now(), process_time()
        vector = embedder.embed_queries([query])[0]
        memory.index._collection(chat).query(query_embeddings=[vector], n_results=20, include=["distances"])
        bare.append(now() - started)
        bare_cpu.append(process_time() - cpu_started)
    mine, theirs = latency_summary(ours), latency_summary(bare)
    mine_cpu, theirs_cpu = latency_summary(cpu), latency_summary(bare_cpu)
    return {
        "hybrid": mine,
        "hybrid_cpu": mine_cpu,
        "bare_chroma": theirs,
        "bare_chroma_cpu": theirs_cpu,
        "copy_load": {
            "rows": sum(c["rows"] for c in copies),
            "wall_ms": round(sum(c["wall_ms"] for c in copies), 1),
            "cpu_ms": round(sum(c["cpu_ms"] for c in copies), 1),
        },
        "ratio_cpu_p50": round(mine_cpu["p50_ms"] / theirs_cpu["p50_ms"], 2),
        "ratio_p50": round(mine["p50_ms"] / theirs["p50_ms"], 2),
        "ratio_p95": round(mine["p95_ms"] / theirs["p95_ms"], 2),
    }


def time_after_commit(memory, chat: str, size: int, queries: list[str], rng: random.Random, warm: dict,
                      turns: int) -> dict:
    """A live chat: each turn appends a message, commits what was extracted from it (a new event at that floor
    and an update of a character: both need embedding, which the commit's sync does), and then recalls. Also a
    commit that changes nothing to embed (a link). Times the commits and the first recall after each."""
    commit_ms, link_ms, recall_wall, recall_cpu = [], [], [], []
    floor = size
    for turn in range(turns):
        floor += 1
        text = sentence(rng, floor)
        memory.store.set_messages_from(chat, floor, [Message("assistant", rng.choice(NAMES), text)])
        started = now()
        memory.commit(chat, [{"op": "create_node", "id": f"live{turn}", "type": "event", "title": f"Summary L{turn}",
                              "fields": {"summary": text}, "floor_from": floor, "floor_to": floor},
                             {"op": "update_node", "id": f"c{10 * turn}", "set_fields": {"goal": sentence(rng, turn)}}],
                      floor, "test")
        commit_ms.append(now() - started)
        started = now()
        memory.commit(chat, [{"op": "link", "source": f"c{10 * turn + 10}", "target": f"live{turn}",
                              "relation": "involved_in"}], floor, "test")
        link_ms.append(now() - started)
        memory.index._query_cache.clear()
        started, cpu_started = now(), process_time()
        memory.recall(chat, rng.choice(queries))
        recall_wall.append(now() - started)
        recall_cpu.append(process_time() - cpu_started)
    wall = latency_summary(recall_wall)
    return {"recall": wall, "recall_cpu": latency_summary(recall_cpu), "commit_and_sync": latency_summary(commit_ms),
            "link_commit_and_sync": latency_summary(link_ms),
            "ratio_to_warm_p50": round(wall["p50_ms"] / warm["hybrid"]["p50_ms"], 2)}


def time_roleplay_messages(memory) -> dict:
    """Recall as a role-play chat asks it: each user message of the bundled example chat (22-72 words, split into
    sub-queries, with the turns before it), on its graph; the query vectors embedded each time."""
    chat = "lantern-road"
    memory.import_(chat, example_file("lantern_road.graph.json"))
    memory.load_chat_file(chat, example_file("lantern_road.jsonl"))
    memory.rebuild_vectors(chat)
    messages = memory.store.messages(chat)
    asked = [floor for floor, message in enumerate(messages) if message.role == "user"]
    memory.recall(chat, messages[asked[0]].text, user_floor=asked[0])  # the pool and BM25 of this graph version
    wall, cpu = [], []
    for floor in asked:
        memory.index._query_cache.clear()
        started, cpu_started = now(), process_time()
        memory.recall(chat, messages[floor].text, user_floor=floor)
        wall.append(now() - started)
        cpu.append(process_time() - cpu_started)
    words = sorted(len(messages[floor].text.split()) for floor in asked)
    return {"messages": len(asked), "words": [words[0], words[len(words) // 2], words[-1]],
            "recall": latency_summary(wall), "recall_cpu": latency_summary(cpu)}


def build_throughput(quick: bool) -> dict:
    rng = random.Random(7)
    texts = [sentence(rng, i) for i in range(100 if quick else 1000)]
    out = {}
    for model in ("e5-small-q4", "use-m3"):
        embedder = make_embedder(EmbeddingProfile(model=model))
        embedder.embed_queries(["warm up"])
        started = now()
        for start in range(0, len(texts), 64):
            embedder._documents(texts[start:start + 64])  # uncached, to time the model itself
        out[model] = round(len(texts) / (now() - started), 1)
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--sizes", help="comma-separated chat sizes (default 1000,10000,100000)"),
        p.add_argument("--turns", type=int, default=10, help="live turns timed right after a commit (default 10)"),
        p.add_argument("--no-spread", action="store_true", help="skip the 100-chats case")))
    sizes = [300, 1000] if args.quick else [1000, 10000, 100000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    spread = (10, 100) if args.quick else (100, 1000)  # chats, nodes per chat
    rng = random.Random(args.seed)
    queries = [f"What did {rng.choice(NAMES)} {rng.choice(VERBS)} at {rng.choice(PLACES)}?"
               for _ in range(20 if args.quick else 50)]
    rows, after_rows = [], []
    with TempMemory() as tmp:
        memory = tmp.memory
        embedder = memory.index.function.embedder
        dims = (embedder.embed_queries(["x"]).shape[1],) * 2  # nodes and sources share the query's space
        for size in sizes:
            progress(f"building a chat of {size} nodes")
            seconds = build_chat(memory, f"one-{size}", size, rng, dims)
            warm = time_queries(memory, [f"one-{size}"], queries, rng)
            rows.append({"case": f"1 chat x {size:,} nodes", "nodes": size, "build_s": round(seconds, 2), **warm})
            after = time_after_commit(memory, f"one-{size}", size, queries, rng, warm, 3 if args.quick else args.turns)
            after_rows.append({"case": f"1 chat x {size:,} nodes", **after})
        progress("recalling the example chat's user messages")
        roleplay = time_roleplay_messages(memory)
        chats, per_chat = spread
        if args.no_spread:
            chats = 0
        progress(f"building {chats} chats of {per_chat} nodes")
        started = now()
        names = [f"many-{i}" for i in range(chats)]
        for name in names:
            build_chat(memory, name, per_chat, rng, dims)
        if names:
                rows.append({"case": f"{chats} chats x {per_chat:,} nodes", "nodes": chats * per_chat,
                         "build_s": round(now() - started, 2), **time_queries(memory, names, queries, rng)})
    report = {"benchmark": "recall_latency", "quick": args.quick, "env": environment(),
              "params": {"sizes": sizes, "chats": spread[0], "nodes_per_chat": spread[1], "queries": len(queries)},
              "results": {"cases": rows, "after_commit": after_rows, "roleplay_messages": roleplay,
                          "index_build_nodes_per_s": build_throughput(args.quick)}}

    def render(r: dict) -> str:
        rp = r["results"]["roleplay_messages"]
        lines = [(c["case"], c["hybrid"]["p50_ms"], c["hybrid"]["p95_ms"], c["hybrid_cpu"]["p50_ms"],
                  c["bare_chroma"]["p50_ms"], c["bare_chroma"]["p95_ms"], c["bare_chroma_cpu"]["p50_ms"],
                  c["ratio_p50"], c["ratio_p95"], c["ratio_cpu_p50"])
                 for c in r["results"]["cases"]]
        after = [(c["case"], c["recall"]["p50_ms"], c["recall"]["p95_ms"], c["recall_cpu"]["p50_ms"],
                  c["ratio_to_warm_p50"], c["commit_and_sync"]["p50_ms"], c["link_commit_and_sync"]["p50_ms"])
                 for c in r["results"]["after_commit"]]
        build = ", ".join(f"{k} {v} nodes/s" for k, v in r["results"]["index_build_nodes_per_s"].items())
        copies = "; ".join(f"{c['case']}: {c['copy_load']['rows']:,} rows, {c['copy_load']['wall_ms']} ms, "
                           f"{c['copy_load']['cpu_ms']} ms of CPU" for c in r["results"]["cases"])
        return (
            table(
                [
                    "case (warm)",
                    "recall p50 ms",
                    "p95 ms",
                    "cpu p50",
                    "bare chroma p50",
                    "p95",
                    "cpu p50",
                    "ratio p50",
                    "ratio p95",
                    "ratio cpu p50",
                ],
                lines,
            )
            + f"\nvectors copied into memory in the background while warming up (none: Chroma answered): {copies}"
            + "\n\nright after a commit (live turn: a message, a commit of 2 nodes to embed, a link commit):\n"
            + table(
                ["case", "recall p50 ms", "p95 ms", "cpu p50", "x warm p50", "commit+sync p50", "link commit+sync p50"],
                after,
            )
            + "\n\nthe example chat's user messages ({messages}, {words[0]}/{words[1]}/{words[2]} words "
            "min/median/max), each recalled with its turns:\n".format(**rp)
            + table(
                ["recall p50 ms", "p95 ms", "max ms", "cpu p50", "cpu p95"],
                [
                    (
                        rp["recall"]["p50_ms"],
                        rp["recall"]["p95_ms"],
                        rp["recall"]["max_ms"],
                        rp["recall_cpu"]["p50_ms"],
                        rp["recall_cpu"]["p95_ms"],
                    )
                ],
            )
            + f"\nindex build throughput (embedding short scene sentences): {build}"
        )

    emit(args, report, render)


if __name__ == "__main__":
    main()
