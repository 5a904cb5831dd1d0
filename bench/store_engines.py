"""The store on SQLite vs PostgreSQL, same run, same machine: the dialect layer's per-statement cost (psycopg 3
through the store's thin layer, raw psycopg, SQLAlchemy Core), commit throughput and a rollback of 100 floors at
N commits, and recall p50 at 10k nodes.

PostgreSQL: --pg URL (or $CURATOR_BENCH_PG), else a throwaway local cluster (tests/pg_cluster.py, fsync off as in
the tests: the figures compare the engines' client-side work and round trips, not disk flushes). Each case runs in
a fresh schema. Client CPU (process_time) is printed next to wall time: the machine is shared, and the server's
own CPU is not ours to count on the client.

    python bench/store_engines.py [--quick] [--json] [--pg URL] [--commits 100000] [--nodes 10000]
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from time import process_time

from _common import TempMemory, emit, environment, ms, now, parse_args, progress, table

from curator.store.location import with_schema

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # pg_cluster.py: the tests' throwaway cluster

STATEMENTS = 3000  # per statement kind in the overhead part


def fresh_schema(server: str) -> str:
    import psycopg

    schema = f"b_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    return with_schema(server, schema)


# ---- 1. the dialect layer: client CPU per statement -------------------------------------------------------
def statement_overhead(server: str, count: int) -> list[dict]:
    """A node read by key and a node upsert (the projection's hot path), `count` times each, through: the store's
    connection (psycopg 3 + `?` rewrite + rows by name), raw psycopg, SQLAlchemy Core text() and a compiled
    Core insert; SQLite's own connection as the reference."""
    from curator.store.db import connect

    url = fresh_schema(server)
    rows = []
    select = "SELECT id, type, title, fields_json, level FROM nodes WHERE chat_id=? AND id=?"
    upsert = ("INSERT INTO nodes (chat_id, id, type, title, fields_json, level, floor_from, floor_to, importance, "
              "created_at, updated_at) VALUES (?, ?, 'event', ?, '{}', 0, 0, 0, 0.5, 'now', 'now') "
              "ON CONFLICT (chat_id, id) DO UPDATE SET title = excluded.title")

    def run(name: str, do_select, do_upsert, begin, end) -> None:
        for kind, action in (("upsert", do_upsert), ("select by key", do_select)):
            begin()
            action(0)  # warm: statement caches, prepared plans
            cpu, wall = process_time(), now()
            for i in range(count):
                action(i)
            cpu, wall = process_time() - cpu, now() - wall
            end()
            rows.append({"engine": name, "statement": kind, "us_per_stmt": round(wall / count * 1e6, 1),
                         "cpu_us_per_stmt": round(cpu / count * 1e6, 1)})

    with tempfile.TemporaryDirectory() as folder:
        lite = connect(Path(folder), url=None)
        run("sqlite3 (store connection)",
            lambda i: lite.execute(select, ("c", f"n{i}")).fetchone(),
            lambda i: lite.execute(upsert, ("c", f"n{i}", f"t{i}")),
            lambda: lite.execute("BEGIN"), lambda: lite.execute("COMMIT"))
        lite.close()

    store_conn = connect(Path("."), url=url)
    run("psycopg 3 (store layer)",
        lambda i: store_conn.execute(select, ("c", f"n{i}")).fetchone()["title"],
        lambda i: store_conn.execute(upsert, ("c", f"n{i}", f"t{i}")),
        store_conn.begin, lambda: store_conn.execute("COMMIT"))
    store_conn.close()

    import psycopg

    raw = psycopg.connect(url, autocommit=True)
    raw_select, raw_upsert = select.replace("?", "%s"), upsert.replace("?", "%s")
    run("psycopg 3 (raw, tuples)",
        lambda i: raw.execute(raw_select, ("c", f"n{i}")).fetchone()[2],
        lambda i: raw.execute(raw_upsert, ("c", f"n{i}", f"t{i}")),
        lambda: raw.execute("BEGIN"), lambda: raw.execute("COMMIT"))
    raw.close()

    try:
        import sqlalchemy as sa
        from sqlalchemy.dialects.postgresql import insert as pg_insert
    except ImportError:
        progress("SQLAlchemy is not installed: its rows are left out (pip install sqlalchemy)")
        return rows
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        text_select = sa.text(select.replace("chat_id=? AND id=?", "chat_id=:c AND id=:i"))
        text_upsert = sa.text(upsert.replace("(?, ?, 'event', ?,", "(:c, :i, 'event', :t,"))
        run("SQLAlchemy Core text()",
            lambda i: conn.execute(text_select, {"c": "c", "i": f"n{i}"}).fetchone().title,
            lambda i: conn.execute(text_upsert, {"c": "c", "i": f"n{i}", "t": f"t{i}"}),
            lambda: conn.begin(), lambda: conn.commit())
        nodes = sa.Table("nodes", sa.MetaData(), autoload_with=conn)
        conn.commit()
        core_select = sa.select(nodes.c.id, nodes.c.type, nodes.c.title, nodes.c.fields_json, nodes.c.level).where(
            nodes.c.chat_id == sa.bindparam("c"), nodes.c.id == sa.bindparam("i"))
        insert = pg_insert(nodes).values(chat_id=sa.bindparam("c"), id=sa.bindparam("i"), type="event",
                                         title=sa.bindparam("t"), fields_json="{}", level=0, floor_from=0,
                                         floor_to=0, importance=0.5, created_at="now", updated_at="now")
        core_upsert = insert.on_conflict_do_update(index_elements=["chat_id", "id"],
                                                   set_={"title": insert.excluded.title})
        run("SQLAlchemy Core constructs",
            lambda i: conn.execute(core_select, {"c": "c", "i": f"n{i}"}).fetchone().title,
            lambda i: conn.execute(core_upsert, {"c": "c", "i": f"n{i}", "t": f"t{i}"}),
            lambda: conn.begin(), lambda: conn.commit())
    engine.dispose()
    return rows


# ---- 2. commit throughput and rollback of 100 floors --------------------------------------------------------
def commit_and_rollback(store_url: str | None, commits: int, depth: int, seed: int) -> dict:
    from rollback_scaling import Builder, seed_ops

    builder = Builder(seed)
    with TempMemory(store=store_url or "sqlite") as tmp:  # explicit: not $CURATOR_STORE
        store = tmp.memory.store
        store.on_change[:] = []  # the store alone: no vector sync
        tmp.memory.create_chat("bench", "default")
        store.commit("bench", seed_ops(), anchor_floor=0, origin="manual")
        cpu, wall = process_time(), now()
        for floor in range(1, commits):
            store.commit("bench", builder.ops(floor), anchor_floor=floor, origin="extract")
            if floor % max(1, commits // 10) == 0:
                progress(f"  {store.engine}: {floor:,} commits")
        cpu, wall = process_time() - cpu, now() - wall
        runs, top = [], commits
        for _ in range(3):
            started = now()
            result = store.rollback("bench", floor=top - depth)
            runs.append(now() - started)
            assert len(result.reverted) == depth
            top -= depth
        nodes = tmp.memory.graph("bench").stats()
        expected = sum(builder.nodes_made[:top])
        assert nodes["nodes_active"] + nodes["nodes_archived"] == expected, (nodes, expected)
    return {"engine": store.engine, "commits": commits, "commits_per_s": round((commits - 1) / wall, 1),
            "cpu_ms_per_commit": round(cpu / (commits - 1) * 1000, 3),
            "rollback_ms_median": ms(statistics.median(runs)), "rollback_ms_runs": [ms(r) for r in runs]}


# ---- 3. recall p50 at 10k nodes ---------------------------------------------------------------------------------
def recall_p50(store_url: str | None, nodes: int, queries: int, seed: int) -> dict:
    from recall_latency import NAMES, PLACES, VERBS, build_chat, time_queries

    rng = random.Random(seed)
    questions = [f"What did {rng.choice(NAMES)} {rng.choice(VERBS)} at {rng.choice(PLACES)}?" for _ in range(queries)]
    with TempMemory(store=store_url or "sqlite") as tmp:
        memory = tmp.memory
        embedder = memory.index.function.embedder
        dims = (embedder.embed_queries(["x"]).shape[1],) * 2
        build_chat(memory, "one", nodes, rng, dims)
        timed = time_queries(memory, ["one"], questions, rng)
        engine = memory.store.engine
    return {"engine": engine, "nodes": nodes, "p50_ms": timed["hybrid"]["p50_ms"],
            "p95_ms": timed["hybrid"]["p95_ms"], "cpu_p50_ms": timed["hybrid_cpu"]["p50_ms"]}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--pg", default=os.environ.get("CURATOR_BENCH_PG"), help="a PostgreSQL server URL"),
        p.add_argument("--commits", type=int, help="commits in the chat (default 100000)"),
        p.add_argument("--depth", type=int, default=100, help="floors per rollback (default 100)"),
        p.add_argument("--nodes", type=int, help="nodes for the recall case (default 10000)"),
        p.add_argument("--queries", type=int, default=40, help="recall queries timed (default 40)"),
        p.add_argument("--only", help="comma-separated parts: overhead,commits,recall (default all)")))
    commits = args.commits or (300 if args.quick else 100_000)
    nodes = args.nodes or (500 if args.quick else 10_000)
    parts = set((args.only or "overhead,commits,recall").split(","))
    cluster = None
    server = args.pg
    if not server:
        from pg_cluster import start

        cluster = Path(tempfile.mkdtemp(prefix="curator-bench-pg-"))
        progress(f"starting a throwaway PostgreSQL cluster in {cluster}")
        server = start(cluster)
    try:
        results: dict = {}
        if "overhead" in parts:
            progress("per-statement overhead")
            results["overhead"] = statement_overhead(server, 300 if args.quick else STATEMENTS)
        if "commits" in parts:
            results["commits"] = []
            for url in (None, fresh_schema(server)):
                progress(f"commit throughput and rollback: {commits:,} commits on {'PostgreSQL' if url else 'SQLite'}")
                results["commits"].append(commit_and_rollback(url, commits, args.depth, args.seed))
        if "recall" in parts:
            results["recall"] = []
            for url in (None, fresh_schema(server)):
                progress(f"recall at {nodes:,} nodes on {'PostgreSQL' if url else 'SQLite'}")
                results["recall"].append(recall_p50(url, nodes, 8 if args.quick else args.queries, args.seed))
    finally:
        if cluster:
            from pg_cluster import stop

            stop(cluster)
    report = {"benchmark": "store_engines", "quick": args.quick, "env": environment(),
              "params": {"commits": commits, "depth": args.depth, "nodes": nodes}, "results": results}

    def render(r: dict) -> str:
        out = []
        res = r["results"]
        if "overhead" in res:
            base = {row["statement"]: row["cpu_us_per_stmt"] for row in res["overhead"]
                    if row["engine"] == "psycopg 3 (raw, tuples)"}
            out.append("per statement (client side; x raw = client CPU / raw psycopg's):\n" + table(
                ["engine", "statement", "wall us", "client cpu us", "x raw psycopg"],
                [(o["engine"], o["statement"], o["us_per_stmt"], o["cpu_us_per_stmt"],
                  round(o["cpu_us_per_stmt"] / base[o["statement"]], 2)) for o in res["overhead"]]))
        if "commits" in res:
            lite = res["commits"][0]
            out.append(f"\ncommits and a rollback of {r['params']['depth']} floors at {r['params']['commits']:,} "
                       "commits:\n" + table(
                           ["engine", "commits/s", "client cpu ms/commit", "rollback ms (median of 3)",
                            "x sqlite commits/s", "x sqlite rollback"],
                           [(c["engine"], c["commits_per_s"], c["cpu_ms_per_commit"], c["rollback_ms_median"],
                             round(c["commits_per_s"] / lite["commits_per_s"], 2),
                             round(c["rollback_ms_median"] / lite["rollback_ms_median"], 2)) for c in res["commits"]]))
        if "recall" in res:
            lite = res["recall"][0]
            out.append(f"\nwarm hybrid recall at {r['params']['nodes']:,} nodes:\n" + table(
                ["engine", "p50 ms", "p95 ms", "cpu p50 ms", "x sqlite p50"],
                [(c["engine"], c["p50_ms"], c["p95_ms"], c["cpu_p50_ms"], round(c["p50_ms"] / lite["p50_ms"], 2))
                 for c in res["recall"]]))
        return "\n".join(out)

    emit(args, report, render)


if __name__ == "__main__":
    main()
