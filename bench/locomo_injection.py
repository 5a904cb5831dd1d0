"""LoCoMo at injection level, on the default preset and default settings: each conversation of
../shared/data/locomo_dev.json becomes a chat (its turns are the floors, see `recall_locomo.py`), each observation an
`event` of the default preset anchored at its turns' floors (a character sheet per speaker, linked to their events),
as extraction would have written them. Each question of categories 1-4 is asked after the last floor, as the next
user message (the recall also gets the recent turns, unless --query-only), and the score is the share of the
question's evidence turns covered by the nodes in the final injection (persistent and recalled blocks) under the
default token budget: not a ranked list, what the model would actually be shown."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table
from recall_locomo import DATA, observations, questions, turns

from curator.store.messages import Message


def main() -> None:
    def extra(parser):
        parser.add_argument("--query-only", action="store_true", help="recall from the question alone")
        parser.add_argument("--data", type=Path, default=DATA, help=f"the LoCoMo file (default {DATA})")

    args = parse_args(__doc__.splitlines()[0], extra)
    if not args.data.exists():
        print(f"skipped: {args.data} is absent")
        return
    convs = json.loads(args.data.read_text(encoding="utf-8"))
    if args.quick:
        convs = convs[:1]
    rows, latency, per_conv = [], [], {}
    with TempMemory() as tmp:
        memory = tmp.memory
        takes_messages = "messages" in inspect.signature(memory.recall).parameters
        for conv in convs:
            name = conv.get("sample_id", f"conv-{len(per_conv)}")
            items = observations(conv)
            qs = questions(conv)[:30] if args.quick else questions(conv)
            messages, floor_of = turns(conv)
            speakers = sorted({item["speaker"] for item in items})
            memory.create_chat(name, "default")
            memory.set_messages(name, messages)
            covers: dict[str, set[str]] = {}
            ops = [{"op": "create_node", "id": f"p{n}", "type": "character_sheet", "fields": {"name": s}}
                   for n, s in enumerate(speakers)]
            for i, item in enumerate(items):
                spots = sorted(floor_of[d] for d in item["dia_ids"] if d in floor_of) or [0]
                covers[f"o{i}"] = set(item["dia_ids"])
                ops.append({"op": "create_node", "id": f"o{i}", "type": "event", "title": f"Summary {i + 1}",
                            "fields": {"summary": f"{item['date']}: {item['text']}"},
                            "floor_from": spots[0], "floor_to": spots[-1], "story_time": {"label": item["date"]}})
                ops.append({"op": "link", "source": f"p{speakers.index(item['speaker'])}", "target": f"o{i}",
                            "relation": "involved_in"})
            memory.commit(name, ops, 0, "import")
            progress(f"{name}: {len(items)} observations, {len(qs)} questions; indexing")
            memory.rebuild_vectors(name)
            scores = []
            for q in qs:
                started = now()
                if takes_messages and not args.query_only:
                    injection = memory.recall(name, q["question"],
                                              messages=[*messages, Message("user", "", q["question"])])
                else:
                    injection = memory.recall(name, q["question"])
                latency.append(now() - started)
                shown = set().union(*(covers.get(c.node.id, set()) for c in (*injection.persistent,
                                                                              *injection.recalled)))
                wanted = set(q["evidence"])
                scores.append(len(wanted & shown) / len(wanted))
                rows.append({"tokens": injection.tokens, "budget": injection.budget_tokens,
                             "persistent": len(injection.persistent), "recalled": len(injection.recalled)})
            per_conv[name] = round(sum(scores) / len(scores), 4)
            progress(f"{name}: evidence covered by the injection {per_conv[name]}")
    all_scores = sum(per_conv.values()) / len(per_conv)
    report = {"benchmark": "locomo_injection", "quick": args.quick, "env": environment(),
              "params": {"conversations": list(per_conv), "questions": len(rows), "query_only": args.query_only,
                         "recall_takes_messages": takes_messages},
              "results": {"evidence_covered": {"all": round(all_scores, 4), **per_conv},
                          "tokens_mean": round(sum(r["tokens"] for r in rows) / len(rows), 1),
                          "within_budget": sum(r["tokens"] <= r["budget"] for r in rows),
                          "persistent_mean": round(sum(r["persistent"] for r in rows) / len(rows), 1),
                          "recalled_mean": round(sum(r["recalled"] for r in rows) / len(rows), 1),
                          "latency": latency_summary(latency)}}

    def render(r: dict) -> str:
        res = r["results"]
        lines = [(conv, score) for conv, score in res["evidence_covered"].items()]
        return (table(["conversation", "evidence covered by the injection"], lines)
                + f"\n{r['params']['questions']} questions; tokens mean {res['tokens_mean']}, within budget "
                  f"{res['within_budget']}/{r['params']['questions']}; persistent {res['persistent_mean']}, "
                  f"recalled {res['recalled_mean']} nodes on average; recall p50 {res['latency']['p50_ms']} ms"
                + f"\nparams: {r['params']}")

    emit(args, report, render)


if __name__ == "__main__":
    main()
