"""LoCoMo at injection level, on the default preset and default settings: each conversation of
../shared/data/locomo_dev.json becomes a chat (its turns are the floors, see `recall_locomo.py`), each observation an
`event` of the default preset anchored at its turns' floors (a character sheet per speaker, linked to their events),
as extraction would have written them. Each question of categories 1-4 is asked after the last floor, as the next
user message (the recall also gets the recent turns, unless --query-only), and the score is the share of the
question's evidence turns covered by the nodes in the final injection (persistent and recalled blocks) under the
default token budget: not a ranked list, what the model would actually be shown. Also reported: the recalled block
alone (without the persistent block), and each as a mean over questions as well as over conversations. `--mode rag`
asks in that mode instead of the default."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table
from recall_locomo import data_path, exact_search, observations, questions, turns

from curator.store.messages import Message


def build_chat(memory, conv: dict) -> dict[str, set[str]]:
    """The conversation as a chat of the default preset, indexed; returns what each node covers (id -> dia ids)."""
    name = conv.get("sample_id", "conv")
    items = observations(conv)
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
    memory.rebuild_vectors(name)
    exact_search(memory, name)
    return covers


def ask(memory, conv: dict, covers: dict, question: dict, query_only: bool = False, mode: str | None = None) -> dict:
    """One question asked after the last floor: the share of its evidence the injection covers (both blocks, and
    the recalled block alone), with the injection's size."""
    name = conv.get("sample_id", "conv")
    takes_messages = "messages" in inspect.signature(memory.recall).parameters
    if takes_messages and not query_only:
        messages, _ = turns(conv)
        injection = memory.recall(name, question["question"], mode=mode,
                                  messages=[*messages, Message("user", "", question["question"])])
    else:
        injection = memory.recall(name, question["question"], mode=mode)
    wanted = set(question["evidence"])

    def share(chosen) -> float:
        return len(wanted & set().union(*(covers.get(c.node.id, set()) for c in chosen))) / len(wanted)

    return {"both": share([*injection.persistent, *injection.recalled]), "recalled": share(injection.recalled),
            "tokens": injection.tokens, "budget": injection.budget_tokens,
            "persistent": len(injection.persistent), "recalled_nodes": len(injection.recalled)}


def summarise(per_conv: dict[str, list[dict]]) -> dict:
    """Means over conversations (each conversation's mean, averaged) and over questions, for both blocks and for
    the recalled block alone."""
    rows = [r for conv in per_conv.values() for r in conv]
    out = {}
    for key in ("both", "recalled"):
        by_conv = {c: round(sum(r[key] for r in v) / len(v), 4) for c, v in per_conv.items()}
        out[key] = {"over_conversations": round(sum(by_conv.values()) / len(by_conv), 4),
                    "over_questions": round(sum(r[key] for r in rows) / len(rows), 4), **by_conv}
    return out


def main() -> None:
    def extra(parser):
        parser.add_argument("--query-only", action="store_true", help="recall from the question alone")
        parser.add_argument("--mode", choices=("hybrid", "rag"), default=None, help="the recall mode (default: hybrid)")
        parser.add_argument("--data", type=Path, default=None,
                            help="the LoCoMo file (default $CURATOR_LOCOMO_DEV or ../shared/data/locomo_dev.json)")

    args = parse_args(__doc__.splitlines()[0], extra)
    args.data = args.data or data_path()
    if not args.data.exists():
        print(f"skipped: {args.data} is absent")
        return
    convs = json.loads(args.data.read_text(encoding="utf-8"))
    if args.quick:
        convs = convs[:1]
    latency, per_conv = [], {}
    with TempMemory() as tmp:
        memory = tmp.memory
        for conv in convs:
            name = conv.get("sample_id", f"conv-{len(per_conv)}")
            qs = questions(conv)[:30] if args.quick else questions(conv)
            covers = build_chat(memory, conv)
            progress(f"{name}: {len(qs)} questions")
            rows = []
            for q in qs:
                started = now()
                rows.append(ask(memory, conv, covers, q, args.query_only, args.mode))
                latency.append(now() - started)
            per_conv[name] = rows
            progress(f"{name}: evidence covered by the injection {sum(r['both'] for r in rows) / len(rows):.4f}")
    rows = [r for conv in per_conv.values() for r in conv]
    covered = summarise(per_conv)
    report = {"benchmark": "locomo_injection", "quick": args.quick, "env": environment(),
              "params": {"conversations": list(per_conv), "questions": len(rows), "query_only": args.query_only,
                         "mode": args.mode or "default"},
              "results": {"evidence_covered": {"all": covered["both"]["over_conversations"],
                                               **{c: covered["both"][c] for c in per_conv}},
                          "by_block": covered,
                          "tokens_mean": round(sum(r["tokens"] for r in rows) / len(rows), 1),
                          "within_budget": sum(r["tokens"] <= r["budget"] for r in rows),
                          "persistent_mean": round(sum(r["persistent"] for r in rows) / len(rows), 1),
                          "recalled_mean": round(sum(r["recalled_nodes"] for r in rows) / len(rows), 1),
                          "latency": latency_summary(latency)}}

    def render(r: dict) -> str:
        res = r["results"]
        keys = ["over_conversations", "over_questions", *r["params"]["conversations"]]
        lines = [(key, res["by_block"]["both"][key], res["by_block"]["recalled"][key]) for key in keys]
        return (table(["conversation", "evidence in the injection", "in the recalled block alone"], lines)
                + f"\n{r['params']['questions']} questions; tokens mean {res['tokens_mean']}, within budget "
                  f"{res['within_budget']}/{r['params']['questions']}; persistent {res['persistent_mean']}, "
                  f"recalled {res['recalled_mean']} nodes on average; recall p50 {res['latency']['p50_ms']} ms"
                + f"\nparams: {r['params']}")

    emit(args, report, render)


if __name__ == "__main__":
    main()
