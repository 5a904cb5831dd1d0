"""Does a long chat remember on default settings? A generated role-play (`curator.testing.scripted_story`, 640
floors by default, deterministic seed) with planted facts at known floors (items and where they are, promises,
debts, names and aliases, deaths, rules of the world) runs through the real pipeline on the default preset and the
default settings: floor by floor sync and extraction with a scripted extraction model that writes what the script
planted as a model would, and a scripted summarizer (the `summarize` model) that keeps the lines marked as
milestones, so compression runs for real, and a scripted maintainer (the `maintain` model: consolidation and small
synopses, which run by default; --no-maintenance leaves them out, as trees before issue 34 did).
At floors 100, 300 and 600 every question whose fact was planted
earlier is asked as the next user message (the recall gets the recent turns too, unless --query-only), and the
figure is the share of questions whose answer is in the final injection text under the default budget, with the
tokens used, the persistent and recalled node counts and the recall p50. Each fact is also asked as a follow-up
with no subject of its own ("Where did it end up?") after a narrator line that brings it up: only the recent turns
say what it is about (with --query-only, the follow-up line alone)."""

from __future__ import annotations

import inspect
import statistics

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table

from curator.testing.scripted_story import milestone_summarizer, story, story_extractor
from curator.store.messages import Message

CHECKPOINTS = (100, 300, 600)


def main() -> None:
    def extra(parser):
        parser.add_argument("--floors", type=int, default=640, help="messages in the chat (default 640)")
        parser.add_argument("--query-only", action="store_true",
                            help="recall from the question alone, not from the recent turns")
        parser.add_argument("--no-summarizer", action="store_true", help="no `summarize` model (no compression)")
        parser.add_argument("--no-maintenance", action="store_true",
                            help="no `maintain` model (no consolidation or synopses)")

    args = parse_args(__doc__.splitlines()[0], extra)
    floors = 160 if args.quick else args.floors
    checkpoints = (60, 150) if args.quick else tuple(c for c in CHECKPOINTS if c <= floors)
    messages, facts = story(floors, seed=args.seed)
    progress(f"{len(messages)} floors, {len(facts)} planted facts")
    extractor, summarizer = story_extractor(), (None if args.no_summarizer else milestone_summarizer())
    try:  # trees before issue 34 have no scripted maintainer (and no maintenance by default)
        from curator.testing.scripted_story import story_maintainer

        maintainer = None if args.no_maintenance else story_maintainer()
    except ImportError:
        maintainer = None
    rows, latencies, checks = [], [], []
    with TempMemory() as tmp:
        memory = tmp.memory
        memory.create_chat("long", "default")
        takes_messages = "messages" in inspect.signature(memory.recall).parameters
        extract_params = inspect.signature(memory.extract).parameters
        started = now()
        for checkpoint in checkpoints:
            memory.sync("long", messages[:checkpoint])
            kwargs = {"model": extractor}
            if summarizer is not None:  # older trees took the summarizer as a keyword of its own
                if "models" in extract_params:
                    from curator.llm.access import Models

                    kwargs["models"] = Models(summarize=summarizer, maintain=maintainer)
                else:
                    kwargs["summarize_model" if "summarize_model" in extract_params else "maintenance_model"] = \
                        summarizer
            results = memory.extract("long", **kwargs)
            failed = [r for r in results if not r.ok]
            if failed:
                raise SystemExit(f"extraction failed at floor {failed[0].floor}: {failed[0].reason}")
            asked = [f for f in facts if f.floor < checkpoint]
            hits, follow_hits, tokens, persistent, recalled, within, times = 0, 0, [], [], [], 0, []
            for fact in asked:
                question = Message("user", "Wren", fact.question)
                t0 = now()
                if takes_messages and not args.query_only:
                    injection = memory.recall("long", fact.question, messages=[*messages[:checkpoint], question])
                else:
                    injection = memory.recall("long", fact.question)
                times.append(now() - t0)
                found = fact.answer.lower() in injection.text.lower()
                hits += found
                # the same fact asked as a follow-up with no subject of its own ("Where did it end up?"), after
                # a narrator line that brings it up: only the recent turns say what "it" is
                cue = [Message("assistant", "Narrator", fact.cue), Message("user", "Wren", fact.follow_up)]
                follow = (memory.recall("long", fact.follow_up, messages=[*messages[:checkpoint - 1], *cue])
                          if takes_messages and not args.query_only else memory.recall("long", fact.follow_up))
                follow_hits += fact.answer.lower() in follow.text.lower()
                tokens.append(injection.tokens)
                within += injection.tokens <= injection.budget_tokens
                persistent.append(len(injection.persistent))
                recalled.append(len(injection.recalled))
                checks.append({"floor": checkpoint, "fact_floor": fact.floor, "kind": fact.kind, "found": found})
            latencies += times
            graph = memory.graph("long")
            rows.append({"floor": checkpoint, "questions": len(asked), "share": round(hits / max(1, len(asked)), 3),
                         "follow_up_share": round(follow_hits / max(1, len(asked)), 3),
                         "tokens_mean": round(statistics.mean(tokens), 1) if tokens else 0,
                         "tokens_max": max(tokens, default=0), "within_budget": within,
                         "persistent_mean": round(statistics.mean(persistent), 1) if persistent else 0,
                         "recalled_mean": round(statistics.mean(recalled), 1) if recalled else 0,
                         "active_nodes": len(graph.nodes()), "archived": len(graph.nodes(archived=True)),
                         "synopses": len(graph.nodes(type="synopsis", archived=None)),
                         "recall_p50_ms": latency_summary(times)["p50_ms"] if times else 0})
            progress(f"floor {checkpoint}: {hits}/{len(asked)} facts in the injection "
                     f"({now() - started:.0f}s so far)")
        usage = memory.usage("long")["usage"]
    by_kind: dict[str, list[bool]] = {}
    for c in checks:
        if c["floor"] == checkpoints[-1]:
            by_kind.setdefault(c["kind"], []).append(c["found"])
    report = {"benchmark": "long_chat", "quick": args.quick, "env": environment(),
              "params": {"floors": floors, "facts": len(facts), "seed": args.seed, "query_only": args.query_only,
                         "summarizer": summarizer is not None, "maintainer": maintainer is not None,
                         "recall_takes_messages": takes_messages},
              "results": {"checkpoints": rows,
                          "by_kind_at_last": {k: round(sum(v) / len(v), 3) for k, v in by_kind.items()},
                          "recall_latency": latency_summary(latencies) if latencies else {},
                          "usage": usage}}

    def render(r: dict) -> str:
        lines = [(row["floor"], row["questions"], row["share"], row.get("follow_up_share", ""), row["tokens_mean"],
                  row["tokens_max"],
                  f"{row['within_budget']}/{row['questions']}", row["persistent_mean"], row["recalled_mean"],
                  row["active_nodes"], row["archived"], row["recall_p50_ms"]) for row in r["results"]["checkpoints"]]
        kinds = ", ".join(f"{k} {v}" for k, v in r["results"]["by_kind_at_last"].items())
        return (table(["floor", "questions", "in injection", "follow-up", "tokens mean", "tokens max", "within budget",
                       "persistent", "recalled", "active nodes", "archived", "recall p50 ms"], lines)
                + f"\nby kind at floor {r['results']['checkpoints'][-1]['floor']}: {kinds}"
                + f"\nparams: {r['params']}")

    emit(args, report, render)


if __name__ == "__main__":
    main()
