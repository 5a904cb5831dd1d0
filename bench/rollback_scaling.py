"""Rollback scaling: how long rolling back the last 100 floors takes in chats of 1k, 10k and 100k commits.

Each chat is built through the public commit API, one commit per floor (floors 0..N-1), each commit a few
ops (create an event, link a character to it, link it to a place, update a character; now and then a new
character or an archived event). Then `store.rollback(chat, floor=N-100)` is timed, five times in a row
(each time the chat's last 100 floors, while
it has that many), and the graph is checked against the node count expected at that
floor. A build that runs past --build-budget seconds stops early and the table says so, with the rate.

    python bench/rollback_scaling.py [--quick] [--json] [--sizes 1000,10000,100000] [--depth 100]
"""

from __future__ import annotations

import random
import statistics

from _common import TempMemory, dir_size_mb, emit, environment, ms, now, parse_args, progress, table

CHAT = "bench"
RUNS = 5  # consecutive rollbacks of `depth` floors each (a single one is noisy: WAL checkpoints)


def seed_ops() -> list[dict]:
    ops = [{"op": "create_node", "id": f"pl{i}", "type": "location_state",
            "fields": {"name": f"Place {i}", "controller": "the guild"}} for i in range(5)]
    ops += [{"op": "create_node", "id": f"ch{i}", "type": "character_sheet",
             "fields": {"name": f"Character {i}", "aliases": f"C{i}", "goal": "survive"}} for i in range(5)]
    return ops


class Builder:
    """Ops for floor f >= 1: an event linked to a character and a place, plus a character update; every 10th
    floor a new character, every 5th floor an older event archived. Remembers how many nodes each floor made."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.characters = [f"ch{i}" for i in range(5)]
        self.active_events: list[str] = []
        self.nodes_made = [10]  # per floor; floor 0 is the seed commit

    def ops(self, floor: int) -> list[dict]:
        rng = self.rng
        event = f"ev{floor}"
        ops = [{"op": "create_node", "id": event, "type": "event", "title": f"Summary {floor}",
                "fields": {"summary": f"Floor {floor}: someone kept a promise; the bridge burned."}}]
        made = 1
        if floor % 10 == 0:
            character = f"ch{len(self.characters)}"
            self.characters.append(character)
            ops.append({"op": "create_node", "id": character, "type": "character_sheet",
                        "fields": {"name": f"Character {len(self.characters)}", "goal": "find the map"}})
            made += 1
        ops.append({"op": "link", "source": rng.choice(self.characters), "target": event, "relation": "involved_in"})
        ops.append({"op": "link", "source": event, "target": f"pl{rng.randrange(5)}", "relation": "occurred_at"})
        ops.append({"op": "update_node", "id": rng.choice(self.characters),
                    "set_fields": {"goal": f"goal as of floor {floor}"}})
        if floor % 5 == 0 and len(self.active_events) > 10:
            ops.append({"op": "archive_node", "id": self.active_events.pop(rng.randrange(len(self.active_events) - 5))})
        self.active_events.append(event)
        self.nodes_made.append(made)
        return ops


def measure(size: int, depth: int, budget: float, seed: int) -> dict:
    builder = Builder(seed)
    with TempMemory() as tmp:
        memory, store = tmp.memory, tmp.memory.store
        memory.create_chat(CHAT, "default")
        start = now()
        store.commit(CHAT, seed_ops(), anchor_floor=0, origin="manual")
        built, truncated = 1, False
        ops_total = 10
        tick, tick_start, last_rate = max(1000, size // 10), now(), None
        while built < size:
            ops = builder.ops(built)
            ops_total += len(ops)
            store.commit(CHAT, ops, anchor_floor=built, origin="extract")
            built += 1
            if built % tick == 0:
                last_rate = tick / (now() - tick_start)
                tick_start = now()
                progress(f"rollback_scaling: {size:,}: built {built:,} commits in {now() - start:.1f} s "
                         f"(last {tick:,} at {last_rate:,.0f} commits/s)")
            if now() - start > budget and built < size:
                truncated = True
                progress(f"rollback_scaling: {size:,}: build budget of {budget:.0f} s spent after {built:,} commits; "
                         "measuring rollback at that size")
                break
        build_s = now() - start
        db_mb = dir_size_mb(tmp.path)
        runs, reverted, replayed = [], [], []
        top = built
        for _ in range(RUNS):
            if runs and top - depth < 1:
                break  # a small chat has no further full `depth` floors above the seed commit
            floor = max(1, top - depth)
            t0 = now()
            result = store.rollback(CHAT, floor=floor)
            runs.append(now() - t0)
            reverted.append(len(result.reverted))
            replayed.append(len(result.reapplied) + len(result.dropped))
            top = floor
        # Nothing left to revert: the fixed cost of a rollback call on a chat this size.
        t0 = now()
        store.rollback(CHAT, floor=built + 1000)
        noop_s = now() - t0
        stats = memory.graph(CHAT).stats()
        expected_nodes = sum(builder.nodes_made[:top])
    return {
        "size": size,
        "built_commits": built,
        "truncated": truncated,
        "build_s": round(build_s, 3),
        "build_commits_per_s": round(built / build_s, 1),
        "build_rate_last_tick_commits_per_s": round(last_rate, 1) if last_rate else None,
        "ops": ops_total,
        "data_dir_mb": db_mb,
        "rollback_ms": ms(runs[0]),
        "rollback_ms_runs": [ms(r) for r in runs],
        "rollback_ms_median": ms(statistics.median(runs)),
        "rollback_ms_min": ms(min(runs)),
        "reverted_per_run": reverted,
        "replayed_per_run": replayed,
        "noop_rollback_ms": ms(noop_s),
        "commits_after": stats["commits"],
        "nodes_after": stats["nodes_active"] + stats["nodes_archived"],
        "nodes_expected": expected_nodes,
    }


def run(args) -> dict:
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    else:
        sizes = [200, 1000, 2000] if args.quick else [1000, 10_000, 100_000]
    rows = []
    for size in sizes:
        progress(f"rollback_scaling: building a chat of {size:,} commits ...")
        rows.append(measure(size, args.depth, args.build_budget, args.seed))
    base = rows[0]["rollback_ms_median"] or float("nan")
    for row in rows:
        row["ratio_to_smallest"] = round(row["rollback_ms_median"] / base, 2)
    return {
        "benchmark": "rollback_scaling",
        "quick": args.quick,
        "env": environment(),
        "params": {"sizes": sizes, "depth_floors": args.depth, "runs": RUNS, "build_budget_s": args.build_budget,
                   "seed": args.seed},
        "results": {"sizes": rows},
    }


def render(report: dict) -> str:
    depth = report["params"]["depth_floors"]
    rows = []
    for r in report["results"]["sizes"]:
        size = f"{r['built_commits']:,}" + (f" of {r['size']:,} (budget hit)" if r["truncated"] else "")
        rows.append((size, r["build_s"], r["build_commits_per_s"], r["data_dir_mb"], r["rollback_ms"],
                     r["rollback_ms_median"], r["rollback_ms_min"], r["ratio_to_smallest"], r["noop_rollback_ms"],
                     "/".join(map(str, r["reverted_per_run"])), f"{r['nodes_after']:,}/{r['nodes_expected']:,}"))
    head = ["commits in chat", "build s", "build c/s", "MB", f"rollback {depth} ms (1st)", f"median of {RUNS}",
            "min", "median x smallest", "no-op ms", "reverted per run", "nodes after/expected"]
    out = table(head, rows)
    if any(r["truncated"] for r in report["results"]["sizes"]):
        out += (f"\nNOTE: a build stopped at the {report['params']['build_budget_s']:.0f} s budget; "
                "see 'build c/s' for the rate reached.")
    return out


def main() -> None:
    def extra(parser):
        parser.add_argument("--sizes", default=None, help="comma-separated chat sizes in commits "
                            "(default 1000,10000,100000; --quick 200,1000,2000)")
        parser.add_argument("--depth", type=int, default=100, help="floors rolled back per run (default 100)")
        parser.add_argument("--build-budget", type=float, default=240.0,
                            help="seconds allowed to build one chat before stopping early (default 240)")

    args = parse_args(__doc__.splitlines()[0], extra)
    emit(args, run(args), render)


if __name__ == "__main__":
    main()
