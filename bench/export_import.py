"""Export / import of a large graph: 10k nodes and ~10k edges, built in commits of 100 nodes.

Each build commit creates 100 nodes (10 character sheets, 5 places, 85 events of which 5 are level-1
summaries with 2 archived children each, some events in a character's point of view) and ~100 edges
(`involved_in` character -> event, `occurred_at` event -> place, between nodes of this and earlier commits).
Then it times `export_graph`, `exchange.dumps` + writing the file (the CLI's `curator export`),
`read_graph_file` (read, JSON parse, validate, reference checks) with a breakdown of its steps and its
growth on subsets of the graph, and `import_graph` into a new chat, and checks the round trip gives the same
nodes and edges. The read and import run in a child process so that a read running past --read-timeout
can be stopped; the table then says so and the import is timed on the file validated without the
reference checks.

    python bench/export_import.py [--quick] [--json] [--nodes N] [--read-timeout S]
"""

from __future__ import annotations

import json
import math
import multiprocessing
import random

from _common import TempMemory, emit, environment, ms, now, parse_args, progress, table

from curator.store import exchange

SOURCE_CHAT, TARGET_CHAT = "bench-src", "bench-copy"
NODES_PER_COMMIT = 100


def commit_ops(batch: int, rng: random.Random, characters: list[str], places: list[str]) -> list[dict]:
    floor = batch * 2 + 1
    nodes, links = [], []
    for i in range(10):
        node_id = f"ch{batch}_{i}"
        characters.append(node_id)
        nodes.append({"op": "create_node", "id": node_id, "type": "character_sheet",
                      "fields": {"name": f"Character {batch}-{i}", "aliases": f"C{batch}.{i}, 旅人{batch}号{i}",
                                 "identity": "a courier of the northern road", "traits": "patient; stubborn",
                                 "goal": "deliver the sealed letter", "inventory": "letter, lantern, 12 coins",
                                 "language_sample": "“Not before the bell, friend.”"},
                      "importance": round(rng.uniform(3, 9), 1)})
    for i in range(5):
        node_id = f"pl{batch}_{i}"
        places.append(node_id)
        nodes.append({"op": "create_node", "id": node_id, "type": "location_state",
                      "fields": {"name": f"Place {batch}-{i}", "controller": "the river guild",
                                 "danger": "moderate after dark", "resources": "fish, rope, rumours"}})
    events = []
    for s in range(5):  # a level-1 summary, its two archived children, then 14 more leaf events
        summary = f"sum{batch}_{s}"
        events.append(summary)
        nodes.append({"op": "create_node", "id": summary, "type": "event", "title": f"Summary {batch}.{s}",
                      "level": 1, "floor_from": floor, "floor_to": floor + 1,
                      "fields": {"summary": "Merged: the courier crossed the ford; the debt to the guild stands."}})
        for c in range(16):
            node_id = f"ev{batch}_{s}_{c}"
            events.append(node_id)
            child = c < 2
            pov = rng.random() < 0.2
            nodes.append({
                "op": "create_node", "id": node_id, "type": "event", "title": f"Summary {batch}.{s}.{c}",
                "fields": {"summary": f"Floor {floor}: 1. the courier paid {rng.randint(1, 50)} coins at the ford. "
                                      "2. the ferryman named his price. Irreversible: the letter's seal cracked."},
                "parent": summary if child else None, "archived": child,
                "importance": round(rng.uniform(1, 10), 1),
                "scope": {"layer": "pov", "owner": rng.choice(characters)} if pov else None,
                "story_time": {"label": f"day {batch}", "segment": "evening"} if rng.random() < 0.5 else None,
            })
    for event in events:  # 85 involved_in + 15 occurred_at = 100 edges
        links.append({"op": "link", "source": rng.choice(characters), "target": event, "relation": "involved_in",
                      "strength": round(rng.uniform(0.2, 1.0), 2)})
    for event in rng.sample(events, 15):
        links.append({"op": "link", "source": event, "target": rng.choice(places), "relation": "occurred_at",
                      "valid_from": floor})
    return [{k: v for k, v in op.items() if v is not None} for op in nodes] + links


def _content(export: dict) -> tuple[list, list]:
    """Nodes and edges of an export, for an exact comparison (the chat id and export time differ)."""
    return export["nodes"], export["edges"]


def _read_and_import(conn, data_dir: str, path: str, chat: str) -> None:
    """Child process: time read_graph_file, report, then time import_graph into `chat` and report."""
    import time

    from curator.store import exchange as ex
    from curator.store.store import Store

    try:
        t0 = time.perf_counter()
        graph, schema, source = ex.read_graph_file(path)
        conn.send(("read", time.perf_counter() - t0))
        with Store(data_dir) as store:
            t0 = time.perf_counter()
            record = ex.import_graph(store, chat, graph, schema, source=source)
            conn.send(("import", time.perf_counter() - t0, len(record.ops)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which prints it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def read_then_import(tmp, path, timeout: float, res: dict) -> None:
    """read_graph_file + import_graph, in a child process so that a read running past `timeout` seconds can be
    stopped (it has not touched the store yet). Then the import is timed here on the same file, parsed and
    validated without the reference checks, and the table says the read timed out."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_read_and_import, args=(sender, str(tmp.path), str(path), TARGET_CHAT), daemon=True)
    proc.start()
    sender.close()
    res["read_timeout_s"] = timeout or None
    res["read_timed_out"] = False
    try:
        if not receiver.poll(timeout or None):
            res["read_timed_out"] = True
            progress(f"export_import: read_graph_file still running after {timeout:.0f} s; stopping it")
            proc.terminate()
        else:
            message = receiver.recv()
            if message[0] == "error":
                raise RuntimeError(f"read_graph_file failed in the child process: {message[1]}")
            res["read_graph_file_ms"] = ms(message[1])
            progress("export_import: import_graph ...")
            message = receiver.recv()
            if message[0] == "error":
                raise RuntimeError(f"import_graph failed in the child process: {message[1]}")
            res["import_graph_ms"], res["import_ops"] = ms(message[1]), message[2]
    finally:
        proc.join()
    if res["read_timed_out"]:
        from curator.schemas import schema_from_data

        res["read_graph_file_ms"] = None
        graph = exchange.GraphFile.model_validate(json.loads(path.read_text(encoding="utf-8")))
        schema = schema_from_data(graph.schema_, str(path))
        progress("export_import: import_graph (file validated without the reference checks) ...")
        t0 = now()
        record = exchange.import_graph(tmp.memory.store, TARGET_CHAT, graph, schema, source=str(path))
        res["import_graph_ms"], res["import_ops"] = ms(now() - t0), len(record.ops)


def read_scaling(data: dict, sizes: list[int]) -> list[dict]:
    """`exchange.parse_graph` (what read_graph_file runs after reading the bytes) on the first n nodes of the
    export and the edges between them: how the parse + validate time grows with the graph."""
    rows = []
    for n in sizes:
        nodes = [dict(node) for node in data["nodes"][:n]]
        ids = {node["id"] for node in nodes}
        for node in nodes:
            if node["parent"] not in ids:
                node["parent"] = None
            node["children"] = [c for c in node["children"] if c in ids]
        edges = [e for e in data["edges"] if e["source"] in ids and e["target"] in ids]
        text = exchange.dumps({**data, "nodes": nodes, "edges": edges})
        t0 = now()
        exchange.parse_graph(text, "subset")
        rows.append({"nodes": len(nodes), "edges": len(edges), "mb": round(len(text.encode()) / 1e6, 3),
                     "parse_graph_ms": ms(now() - t0)})
    return rows


def run(args) -> dict:
    target_nodes = args.nodes or (500 if args.quick else 10_000)
    batches = max(1, target_nodes // NODES_PER_COMMIT)
    rng = random.Random(args.seed)
    characters: list[str] = []
    places: list[str] = []
    res: dict = {}
    with TempMemory() as tmp:
        memory, store = tmp.memory, tmp.memory.store
        memory.create_chat(SOURCE_CHAT, "default")
        progress(f"export_import: building {batches * NODES_PER_COMMIT:,} nodes in {batches} commits ...")
        t0 = now()
        for batch in range(batches):
            store.commit(SOURCE_CHAT, commit_ops(batch, rng, characters, places), anchor_floor=batch * 2 + 1,
                         origin="extract")
        res["build_s"] = round(now() - t0, 3)
        res["build_commits"] = batches
        src_stats = memory.graph(SOURCE_CHAT).stats()

        progress("export_import: export ...")
        t0 = now()
        data = exchange.export_graph(store, SOURCE_CHAT)
        res["export_graph_ms"] = ms(now() - t0)
        path = tmp.path / "graph.json"
        t0 = now()
        text = exchange.dumps(data)
        res["dumps_ms"] = ms(now() - t0)
        t0 = now()
        path.write_text(text, encoding="utf-8")
        res["write_ms"] = ms(now() - t0)
        res["file_mb"] = round(path.stat().st_size / 1e6, 3)
        res["export_total_ms"] = round(res["export_graph_ms"] + res["dumps_ms"] + res["write_ms"], 3)

        progress("export_import: read_graph_file ...")
        read_then_import(tmp, path, args.read_timeout, res)
        res["read_breakdown_ms"] = breakdown(path, res["read_graph_file_ms"])
        scaling_sizes = [n for n in ((125, 250) if args.quick else (1000, 2000)) if n < len(data["nodes"])]
        progress(f"export_import: parse_graph on subsets of {', '.join(map(str, scaling_sizes))} nodes ...")
        res["read_scaling"] = read_scaling(data, scaling_sizes)
        if res["read_graph_file_ms"] is not None:
            res["read_scaling"].append({"nodes": len(data["nodes"]), "edges": len(data["edges"]),
                                        "mb": res["file_mb"], "parse_graph_ms": res["read_graph_file_ms"],
                                        "note": "read_graph_file, whole file"})
        res["read_growth_exponent"] = growth_exponent(res["read_scaling"])

        dst_stats = memory.graph(TARGET_CHAT).stats()
        same_content = _content(exchange.export_graph(store, TARGET_CHAT)) == _content(data)

    res["source"], res["imported"] = _counts(src_stats), _counts(dst_stats)
    res["file_nodes"], res["file_edges"] = len(data["nodes"]), len(data["edges"])
    res["same_counts"] = res["source"] == res["imported"]
    res["same_content"] = same_content
    return {
        "benchmark": "export_import",
        "quick": args.quick,
        "env": environment(),
        "params": {"nodes": batches * NODES_PER_COMMIT, "nodes_per_commit": NODES_PER_COMMIT, "seed": args.seed,
                   "read_timeout_s": args.read_timeout},
        "results": res,
    }


def _counts(stats: dict) -> dict:
    return {"nodes": stats["nodes_active"] + stats["nodes_archived"], "nodes_active": stats["nodes_active"],
            "nodes_archived": stats["nodes_archived"], "edges": stats["edges"]}


def growth_exponent(rows: list[dict]) -> float | None:
    """k in time ~ nodes**k, from the first and last point (1 = linear, 2 = quadratic)."""
    if len(rows) < 2 or not rows[0]["parse_graph_ms"]:
        return None
    a, b = rows[0], rows[-1]
    return round(math.log(b["parse_graph_ms"] / a["parse_graph_ms"]) / math.log(b["nodes"] / a["nodes"]), 2)


def breakdown(path, total_ms: float | None) -> dict:
    """Where read_graph_file's time goes: its cheap steps timed one by one (as `exchange.parse_graph` runs
    them); what is left of the whole read is the schema reference checks, which are not run a second time."""
    from curator.schemas import schema_from_data

    out = {}
    t0 = now()
    text = path.read_bytes().decode("utf-8-sig")
    out["read_decode"] = ms(now() - t0)
    t0 = now()
    data = json.loads(text)
    out["json_loads"] = ms(now() - t0)
    t0 = now()
    graph = exchange.GraphFile.model_validate(data)
    out["model_validate"] = ms(now() - t0)
    t0 = now()
    schema_from_data(graph.schema_, "bench (schema)")
    out["schema"] = ms(now() - t0)
    if total_ms is not None:
        out["rest (reference checks)"] = round(max(0.0, total_ms - sum(out.values())), 3)
    return out


def render(report: dict) -> str:
    r = report["results"]
    if r["read_timed_out"]:
        read = (f"> {r['read_timeout_s']:,.0f} s", "TIMED OUT (see note)")
    else:
        read = (f"{r['read_graph_file_ms']:,.1f} ms", "")
    rows = [
        ("build (commits of 100 nodes)", f"{r['build_s']:.2f} s", f"{r['build_commits']} commits"),
        ("export_graph", f"{r['export_graph_ms']:,.1f} ms", ""),
        ("exchange.dumps (indent=2)", f"{r['dumps_ms']:,.1f} ms", ""),
        ("write file", f"{r['write_ms']:,.1f} ms", f"{r['file_mb']:.2f} MB"),
        ("export total", f"{r['export_total_ms']:,.1f} ms", ""),
        ("read_graph_file (parse + validate)", *read),
        *((f"  of which {k}", f"{v:,.1f} ms", "") for k, v in r["read_breakdown_ms"].items()),
        *((f"  parse_graph, first {x['nodes']:,} nodes", f"{x['parse_graph_ms']:,.1f} ms",
           f"{x['edges']:,} edges, {x['mb']:.2f} MB") for x in r["read_scaling"] if "note" not in x),
        ("  growth exponent (time ~ nodes^k)", r["read_growth_exponent"], "1 = linear, 2 = quadratic"),
        ("import_graph into a new chat", f"{r['import_graph_ms']:,.1f} ms", f"{r['import_ops']:,} ops, 1 commit"),
        ("nodes: source / file / imported",
         f"{r['source']['nodes']:,} / {r['file_nodes']:,} / {r['imported']['nodes']:,}",
         f"archived {r['source']['nodes_archived']:,} / {r['imported']['nodes_archived']:,}"),
        ("edges: source / file / imported",
         f"{r['source']['edges']:,} / {r['file_edges']:,} / {r['imported']['edges']:,}", ""),
        ("round trip same counts", r["same_counts"], ""),
        ("round trip same nodes+edges content", r["same_content"], ""),
    ]
    out = table([f"export_import ({report['params']['nodes']:,} nodes)", "value", ""], rows)
    if r["read_timed_out"]:
        out += (f"\nNOTE: read_graph_file ran past --read-timeout {r['read_timeout_s']:,.0f} s and was stopped; "
                "the import was timed on the same file validated without the reference checks (json + model + schema).")
    return out


def main() -> None:
    def extra(parser):
        parser.add_argument("--nodes", type=int, default=None,
                            help="nodes to build, in commits of 100 (default 10000, --quick 500)")
        parser.add_argument("--read-timeout", type=float, default=180.0,
                            help="seconds read_graph_file may run before it is stopped (default 180; 0 = no limit)")

    args = parse_args(__doc__.splitlines()[0], extra)
    emit(args, run(args), render)


if __name__ == "__main__":
    main()
