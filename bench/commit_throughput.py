"""Commit throughput: 10-op commits on the default schema, one commit per floor, as in a live chat.

Each timed commit is, in this order: create an event, create a character_sheet or a second event (50/50),
update_node x3 (two character sheets, one event), link x4 (three `involved_in` character -> event, one
`occurred_at` event -> place) and archive_node x1 (an older active event). Ops are passed as plain dicts,
as an extractor's tool call would give them, so the time includes validating them.

    python bench/commit_throughput.py [--quick] [--json] [--commits N]
"""

from __future__ import annotations

import random

from _common import (
    TempMemory,
    dir_size_mb,
    emit,
    environment,
    latency_summary,
    ms,
    now,
    parse_args,
    percentile,
    progress,
    table,
)

from curator.store.ops import parse_ops

CHAT = "bench"
OPS_PER_COMMIT = 10
SEED_PLACES, SEED_CHARACTERS, SEED_EVENTS = 8, 12, 30


class Workload:
    """Generates the op lists; keeps track of which nodes exist so every op is valid."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.places: list[str] = []
        self.characters: list[str] = []
        self.events: list[str] = []  # every event, archived or not
        self.active_events: list[str] = []
        self.n = 0

    def _new_event(self, floor: int) -> dict:
        self.n += 1
        node_id = f"ev{self.n}"
        self.events.append(node_id)
        self.active_events.append(node_id)
        return {"op": "create_node", "id": node_id, "type": "event", "title": f"Summary {self.n}",
                "fields": {"summary": f"Floor {floor}: 1. someone did thing {self.n} to someone else. "
                                      "Irreversible: a promise was made at the old mill."}}

    def _new_character(self) -> dict:
        self.n += 1
        node_id = f"ch{self.n}"
        self.characters.append(node_id)
        return {"op": "create_node", "id": node_id, "type": "character_sheet",
                "fields": {"name": f"Character {self.n}", "aliases": f"the stranger {self.n}, C{self.n}",
                           "identity": "travelling merchant", "traits": "wary, generous", "goal": "reach the coast"}}

    def seed_ops(self) -> list[dict]:
        ops = []
        for i in range(SEED_PLACES):
            node_id = f"pl{i}"
            self.places.append(node_id)
            ops.append({"op": "create_node", "id": node_id, "type": "location_state",
                        "fields": {"name": f"Place {i}", "controller": "the guild", "danger": "low"}})
        ops += [self._new_character() for _ in range(SEED_CHARACTERS)]
        ops += [self._new_event(0) for _ in range(SEED_EVENTS)]
        return ops

    def commit_ops(self, floor: int) -> list[dict]:
        rng = self.rng
        ops = [self._new_event(floor)]
        event = self.events[-1]
        ops.append(self._new_character() if rng.random() < 0.5 else self._new_event(floor))
        for character in rng.sample(self.characters, 2):
            ops.append({"op": "update_node", "id": character,
                        "set_fields": {"goal": f"goal as of floor {floor}",
                                       "inventory": f"{rng.randint(1, 99)} coins"}})
        ops.append({"op": "update_node", "id": rng.choice(self.events),
                    "set_fields": {"summary": f"Revised at floor {floor}: the promise still stands."}})
        targets = [event, *rng.sample(self.active_events[:-2], 2)]
        for character, target in zip(rng.sample(self.characters, 3), targets, strict=True):
            ops.append({"op": "link", "source": character, "target": target, "relation": "involved_in",
                        "strength": round(rng.uniform(0.3, 1.0), 2)})
        ops.append({"op": "link", "source": event, "target": rng.choice(self.places), "relation": "occurred_at"})
        # Archive an older active event (never one created in this commit).
        victim = self.active_events.pop(rng.randrange(0, len(self.active_events) - 2))
        ops.append({"op": "archive_node", "id": victim})
        assert len(ops) == OPS_PER_COMMIT
        return ops


def run(args) -> dict:
    commits = args.commits or (200 if args.quick else 2000)
    warmup = 10 if args.quick else 50
    work = Workload(args.seed)
    with TempMemory() as tmp:
        memory = tmp.memory
        store = memory.store
        memory.create_chat(CHAT, "default")
        store.commit(CHAT, work.seed_ops(), anchor_floor=0, origin="manual", note="bench seed")
        floor = 0
        for _ in range(warmup):
            floor += 1
            store.commit(CHAT, work.commit_ops(floor), anchor_floor=floor, origin="extract")
        progress(f"commit_throughput: timing {commits} commits of {OPS_PER_COMMIT} ops ...")
        batches, latencies = [], []
        for _ in range(commits):
            floor += 1
            ops = work.commit_ops(floor)
            batches.append(ops)
            start = now()
            store.commit(CHAT, ops, anchor_floor=floor, origin="extract")
            latencies.append(now() - start)
        total = sum(latencies)
        # How much of a commit is op validation alone (the same dicts, parsed again outside the store).
        start = now()
        for ops in batches:
            parse_ops(ops)
        parse_per_commit = (now() - start) / len(batches)
        stats = memory.graph(CHAT).stats()
        db_mb = dir_size_mb(tmp.path)
    seg = max(1, commits // 10)
    return {
        "benchmark": "commit_throughput",
        "quick": args.quick,
        "env": environment(),
        "params": {"commits": commits, "ops_per_commit": OPS_PER_COMMIT, "warmup_commits": warmup, "seed": args.seed,
                   "seed_nodes": SEED_PLACES + SEED_CHARACTERS + SEED_EVENTS},
        "results": {
            "commits": commits,
            "ops": commits * OPS_PER_COMMIT,
            "total_s": round(total, 3),
            "commits_per_s": round(commits / total, 1),
            "ops_per_s": round(commits * OPS_PER_COMMIT / total, 1),
            "latency": latency_summary(latencies),
            "first_10pct_p50_ms": ms(percentile(latencies[:seg], 50)),
            "last_10pct_p50_ms": ms(percentile(latencies[-seg:], 50)),
            "parse_only_ms_per_commit": ms(parse_per_commit),
            "graph": {k: stats[k] for k in ("nodes_active", "nodes_archived", "edges", "commits")},
            "db_mb": db_mb,
        },
    }


def render(report: dict) -> str:
    r, lat = report["results"], report["results"]["latency"]
    rows = [
        ("commits timed", r["commits"], ""),
        ("ops", r["ops"], ""),
        ("total time", r["total_s"], "s"),
        ("throughput", r["commits_per_s"], "commits/s"),
        ("throughput", r["ops_per_s"], "ops/s"),
        ("latency p50", lat["p50_ms"], "ms/commit"),
        ("latency p95", lat["p95_ms"], "ms/commit"),
        ("latency p99", lat["p99_ms"], "ms/commit"),
        ("latency max", lat["max_ms"], "ms/commit"),
        ("p50, first 10% of commits", r["first_10pct_p50_ms"], "ms/commit"),
        ("p50, last 10% of commits", r["last_10pct_p50_ms"], "ms/commit"),
        ("op validation alone", r["parse_only_ms_per_commit"], "ms/commit"),
        ("nodes active / archived", f"{r['graph']['nodes_active']:,} / {r['graph']['nodes_archived']:,}", ""),
        ("edges", r["graph"]["edges"], ""),
        ("data dir size (db + WAL)", r["db_mb"], "MB"),
    ]
    return table(["commit_throughput (10-op commits, default schema)", "value", "unit"], rows)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument(
        "--commits", type=int, default=None, help="commits to time (default 2000, --quick 200)"))
    emit(args, run(args), render)


if __name__ == "__main__":
    main()
