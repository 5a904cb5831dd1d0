"""Retrieval quality of memory-curator's recall on LoCoMo (the dev split in ../shared/data/locomo_dev.json).

Each conversation becomes a chat per corpus: its turns are the chat's messages (one floor each), and each memory item
becomes an event node of a small custom schema, with the floors of the turns it came from and the session date as its
story time (with `--story-time normalised`, placed by the extractor's story clock, as the extractor writes it). Two
corpora (`--corpus`): `observations` (each of LoCoMo's observations an item, covering the turns it cites: what an
extractor writes) and `turns` (each turn an item covering itself: raw messages kept as memories). Each speaker is a
person node linked to their items. Each question of categories 1-4 with evidence is recalled; evidence recall@k is
the share of the question's evidence turns (dia_ids) covered by the top-k recalled nodes, and `person@10` the share
of the top-10 held by person nodes (`any_person@10`: the share of questions with one there). Reported for `hybrid`
(the default, no LLM), `rag` (vector
top-K, no rewrite, no rerank) and two baselines run in the same script: plain BM25 over the same documents, and a
plain Chroma query with the same embedder. Figures are given for all five conversations, for the three used to
tune (conv-26, conv-41, conv-43) and for the two held out (conv-47, conv-49). `--long-messages end|start` asks each
question inside a message of 40-80 words, as role-play users write (two turns of its conversation, then or before
the question)."""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
from pathlib import Path

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table

import curator
from curator.recall.lexical import BM25
from curator.store.messages import Message
from curator.store.story_time import StoryClock

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json"
TUNE, HELD_OUT = ("conv-26", "conv-41", "conv-43"), ("conv-47", "conv-49")
CORPORA = ("observations", "turns")
ITEM_TYPE = {"observations": "observation", "turns": "turn"}
SCHEMA = """
name: locomo
relations: [{name: related}, {name: follows}, {name: involved_in}]
types:
  person:
    identity: entity
    primary_key: [name]
    title_field: name
    fields:
      - {name: name, required: true, embedded: true}
  observation:
    identity: event
    bucket: episodic
    fields:
      - {name: text, required: true, embedded: true}
      - {name: speaker, embedded: true}
      - {name: date, embedded: true}
      - {name: dia_ids}
  turn:
    identity: event
    bucket: episodic
    fields:
      - {name: text, required: true, embedded: true}
      - {name: speaker, embedded: true}
      - {name: date, embedded: true}
      - {name: dia_ids}
"""
KS = (5, 10, 20)


def data_path(default: Path = DATA) -> Path:
    """The dev file: $CURATOR_LOCOMO_DEV when set, else ../shared/data/locomo_dev.json beside the checkout."""
    import os

    return Path(os.environ["CURATOR_LOCOMO_DEV"]) if os.environ.get("CURATOR_LOCOMO_DEV") else default


def _sessions(talk: dict) -> list[str]:
    return sorted((k for k in talk if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))


def _turn_text(turn: dict) -> str:
    text = turn.get("text", "")
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def turns(conv: dict) -> tuple[list[Message], dict[str, int]]:
    """The conversation's turns as chat messages, and each turn's floor by dia id."""
    talk = conv["conversation"]
    messages, floors = [], {}
    for key in _sessions(talk):
        for turn in talk[key]:
            floors[turn.get("dia_id", "")] = len(messages)
            role = "user" if turn.get("speaker") == talk.get("speaker_a") else "assistant"
            messages.append(Message(role, turn.get("speaker", ""), _turn_text(turn),
                                    sent_at=talk.get(f"{key}_date_time")))
    return messages, floors


def observations(conv: dict) -> list[dict]:
    dates = {k.replace("_date_time", ""): v for k, v in conv["conversation"].items() if k.endswith("_date_time")}
    items = []
    for key, per_speaker in conv["observation"].items():
        session = key.replace("_observation", "")
        for speaker, facts in per_speaker.items():
            for fact in facts:
                text, ids = fact[0], fact[1] if len(fact) > 1 else []
                ids = ids if isinstance(ids, list) else re.findall(r"D\d+:\d+", str(ids))
                items.append({"text": text, "speaker": speaker, "date": dates.get(session, ""), "session": session,
                              "dia_ids": sorted({i.strip() for i in ids if i})})
    return items


def turn_items(conv: dict) -> list[dict]:
    """Each turn as a memory item covering itself (raw messages kept as memories), its text the "name: text" line
    the chat shows."""
    talk = conv["conversation"]
    return [
        {
            "text": f"{turn.get('speaker', '')}: {_turn_text(turn)}",
            "speaker": turn.get("speaker", ""),
            "date": talk.get(f"{key}_date_time", ""),
            "session": key,
            "dia_ids": [turn["dia_id"]] if turn.get("dia_id") else [],
        }
        for key in _sessions(talk)
        for turn in talk[key]
    ]


def corpus_items(conv: dict, corpus: str) -> list[dict]:
    return observations(conv) if corpus == "observations" else turn_items(conv)


def questions(conv: dict) -> list[dict]:
    return [q for q in conv["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]


def chat_name(conv: dict, corpus: str) -> str:
    name = conv.get("sample_id", "conv")
    return name if corpus == "observations" else f"{name}-{corpus}"


def build_chat(memory, conv: dict, corpus: str, schema_path: Path, story_time: str = "direct",
               link_sessions: bool = False) -> dict[str, list[str]]:
    """The conversation as a chat of `corpus` items (see the module's docstring), indexed; returns what each node
    covers (node id -> dia ids; person nodes cover none)."""
    name = chat_name(conv, corpus)
    items = corpus_items(conv, corpus)
    messages, floor_of = turns(conv)
    covers = {f"o{i}": item["dia_ids"] for i, item in enumerate(items)}
    speakers = sorted({item["speaker"] for item in items})
    covers.update({f"p{n}": [] for n in range(len(speakers))})
    if name in memory.chats():
        exact_search(memory, name)
        return covers
    memory.create_chat(name, schema_path)
    memory.set_messages(name, messages)
    ops = []
    clock = StoryClock()  # the normaliser the extractor uses (curator/store/story_time.py)
    for i, item in enumerate(items):
        when = ({"label": item["date"]} if story_time != "normalised"
                else clock.place(item["date"], scene=item["session"]))
        spots = sorted(floor_of[d] for d in item["dia_ids"] if d in floor_of) or [0]
        ops.append({"op": "create_node", "id": f"o{i}", "type": ITEM_TYPE[corpus], "title": item["text"][:80],
                    "fields": {"text": item["text"], "speaker": item["speaker"], "date": item["date"],
                               "dia_ids": ",".join(item["dia_ids"])},
                    "floor_from": spots[0], "floor_to": spots[-1], "story_time": when})
    ops += [{"op": "create_node", "id": f"p{n}", "type": "person", "fields": {"name": s}}
            for n, s in enumerate(speakers)]
    ops += [{"op": "link", "source": f"p{speakers.index(item['speaker'])}", "target": f"o{i}",
             "relation": "involved_in"} for i, item in enumerate(items)]  # as the extractor links characters
    if link_sessions:
        ops += [{"op": "link", "source": f"o{i}", "target": f"o{i + 1}", "relation": "follows", "strength": 0.2}
                for i in range(len(items) - 1) if items[i]["session"] == items[i + 1]["session"]]
    memory.commit(name, ops, 0, "import")
    memory.rebuild_vectors(name)
    exact_search(memory, name)
    return covers


def exact_search(memory, chat: str) -> None:
    """From here on the chat is searched in its in-memory copies (`vectors/mirror.py`: exact, as a chat searched
    often is), not in Chroma's approximate index first and the copies from whenever their background load ends:
    the same ranking every run."""
    from curator.vectors.mirror import MIRROR_AFTER

    for _ in range(MIRROR_AFTER):
        memory.index.query(chat, "a question", 1)
        memory.index.query_sources(chat, "a question", 1)
    memory.index.mirrors.wait()


def write_schema(folder: Path) -> Path:
    path = Path(folder) / "locomo.yaml"
    path.write_text(SCHEMA, encoding="utf-8")
    return path


def ranked(memory, chat: str, question: str, mode: str) -> list:
    """The recalled nodes, best first (20 at most), under the settings this bench has always used."""
    return memory.recall(chat, question, mode=mode, max_results=20, top_k=50, budget_tokens=100_000).recalled


def _long_messages(qs: list[dict], said: list[str], where: str) -> list[dict]:
    """Each question asked beside two turns of the first speaker (chosen by the question's text, so every run asks
    the same): a message of 40-80 words, as a role-play user's, whose last (or first) sentence is the question."""
    out = []
    for q in qs:
        chatter = random.Random(q["question"]).sample(said, 2)
        parts = [*chatter, q["question"]] if where == "end" else [q["question"], *chatter]
        out.append({**q, "asked": " ".join(parts)})
    return out


def score(ranked_ids: list[list[str]], evidence: list[str], persons: list[bool] | None = None) -> dict:
    wanted = set(evidence)
    out = {}
    for k in KS:
        covered = set().union(*ranked_ids[:k]) if ranked_ids[:k] else set()
        out[f"R@{k}"] = len(wanted & covered) / len(wanted)
    first = next((i for i, ids in enumerate(ranked_ids, 1) if wanted & set(ids)), None)
    out["MRR"] = 1 / first if first else 0.0
    if persons is not None:
        out["person@10"] = sum(persons[:10]) / 10  # the share of the top-10 slots held by person nodes
        out["any_person@10"] = float(any(persons[:10]))  # questions with a person node in their top-10
    return out


def score_chosen(chosen: list, covers: dict, evidence: list[str]) -> dict:
    return score([covers[c.node.id] for c in chosen], evidence, [c.node.type == "person" for c in chosen])


def mean(rows: list[dict]) -> dict:
    return {m: round(sum(r[m] for r in rows) / len(rows), 4) for m in rows[0]} if rows else {}


@contextlib.contextmanager
def _fusion(weights: tuple[float, float, float], embedder):
    """Recall's dense, lexical and source weights set to `weights` for the block (the embedder's own afterwards)."""
    embedder.dense_weight = weights[0]  # instance attributes over the class's (`Recaller._embedder_settings`)
    embedder.fusion = {**(getattr(type(embedder), "fusion", None) or {}), "lexical": weights[1], "source": weights[2]}
    try:
        yield
    finally:
        del embedder.dense_weight, embedder.fusion


def _recall_all(memory, chats: dict[str, tuple[str, dict, list[dict]]], qs: list[dict], latency: dict,
                methods: tuple) -> dict[str, dict[str, list[dict]]]:
    """Every question on every corpus's chat (corpus -> (chat, covers, items)), each method; a question is asked
    of all the chats in a row, so its query vectors are embedded once."""
    embedder = memory.index.function.embedder
    bm25 = {corpus: BM25([item["text"] for item in items]) for corpus, (_, _, items) in chats.items()}
    rows: dict[str, dict[str, list[dict]]] = {corpus: {m: [] for m in methods} for corpus in chats}
    for q in qs:
        question = q.get("asked", q["question"])
        vector = None
        for corpus, (name, covers, _) in chats.items():
            out = rows[corpus]
            for method in methods:
                if method.startswith("hybrid["):  # the same recall under other fusion weights (--fusion)
                    weights = tuple(float(w) for w in method[7:-1].split(","))
                    started = now()
                    with _fusion(weights, embedder):
                        chosen = ranked(memory, name, question, "hybrid")
                    latency[method].append(now() - started)
                    out[method].append(score_chosen(chosen, covers, q["evidence"]))
            for mode in ("hybrid", "rag"):
                started = now()
                chosen = ranked(memory, name, question, mode)
                latency[mode].append(now() - started)
                out[mode].append(score_chosen(chosen, covers, q["evidence"]))
            started = now()
            hits = bm25[corpus].top(question, 20)
            latency["bm25"].append(now() - started)
            out["bm25"].append(score([covers[f"o{i}"] for i, _ in hits], q["evidence"]))
            started = now()
            vector = embedder.embed_queries([question])[0] if vector is None else vector
            result = memory.index._collection(name).query(query_embeddings=[vector], n_results=20,
                                                          include=["distances"])
            latency["chroma"].append(now() - started)
            out["chroma"].append(score([covers[i] for i in result["ids"][0]], q["evidence"]))
    for corpus, out in rows.items():
        progress(f"{chats[corpus][0]}: hybrid R@10 {mean(out['hybrid'])['R@10']}, rag {mean(out['rag'])['R@10']}, "
                 f"chroma {mean(out['chroma'])['R@10']}")
    return rows


def main() -> None:
    def extra(parser):
        parser.add_argument("--corpus", choices=(*CORPORA, "both"), default="both",
                            help="observations (LoCoMo's observations as memories), turns (each turn a memory), "
                                 "or both (default)")
        parser.add_argument("--link-sessions", action="store_true",
                            help="link consecutive items of a session (follows)")
        parser.add_argument("--data", type=Path, default=None,
                            help=f"the LoCoMo dev file (default $CURATOR_LOCOMO_DEV or {DATA})")
        parser.add_argument("--keep", type=Path, help="keep the built chats in this data directory and reuse them")
        parser.add_argument("--story-time", choices=("direct", "normalised"), default="direct",
                            help="direct: the session date is set as the story-time label; normalised: it goes "
                                 "through the extractor's story clock (label, sortable segment, session as scene)")
        parser.add_argument("--conv", action="append", help="only these conversations (repeatable)")
        parser.add_argument("--fusion", action="append", default=[], metavar="D,L,S",
                            help="also recall (hybrid) with these dense, lexical and source weights (repeatable); "
                                 "reported as method hybrid[D,L,S] beside the shipped weights")
        parser.add_argument("--model", default=None, help="local embedding model (default: the configured one)")
        parser.add_argument("--long-messages", choices=("end", "start"),
                            help="ask each question inside a longer message, as role-play users write: two turns "
                                 "of its conversation's first speaker, the question at the end (or the start)")
        parser.add_argument("--source-query-vector", action=argparse.BooleanOptionalAction, default=None,
                            help="embed the query a second time without the speakers' names for the sources "
                                 "(default: as the embedder says, recall.engine.SOURCE_QUERY_VECTOR = None)")

    args = parse_args(__doc__.splitlines()[0], extra)
    args.data = args.data or data_path()
    if not args.data.exists():
        print(f"skipped: {args.data} is absent")
        return
    convs = json.loads(args.data.read_text(encoding="utf-8"))
    if args.conv:
        convs = [c for c in convs if c.get("sample_id") in args.conv]
    from curator.recall import engine

    if args.source_query_vector is not None:
        engine.SOURCE_QUERY_VECTOR = args.source_query_vector
    args.source_query_vector = engine.SOURCE_QUERY_VECTOR
    if args.quick:
        convs = convs[:1]
    corpora = CORPORA if args.corpus == "both" else (args.corpus,)
    methods = ("hybrid", "rag", "bm25", "chroma") + tuple(f"hybrid[{w}]" for w in args.fusion)
    per_conv: dict[str, dict[str, dict[str, list[dict]]]] = {}
    latency: dict[str, list[float]] = {m: [] for m in methods}
    with TempMemory() as tmp:
        memory = curator.open(args.keep) if args.keep else tmp.memory
        if args.model:
            from curator.vectors.embeddings import EmbeddingProfile

            memory.settings = memory.settings.model_copy(update={"embedding": EmbeddingProfile(model=args.model)})
        schema_path = write_schema(tmp.path)
        for conv in convs:
            name = conv.get("sample_id", f"conv-{len(per_conv)}")
            qs = questions(conv)[:20] if args.quick else questions(conv)
            if args.long_messages:
                messages, _ = turns(conv)
                qs = _long_messages(qs, [m.text for m in messages if m.role == "user"], args.long_messages)
            started = now()
            chats = {}
            for corpus in corpora:
                covers = build_chat(memory, conv, corpus, schema_path, args.story_time, args.link_sessions)
                chats[corpus] = (chat_name(conv, corpus), covers, corpus_items(conv, corpus))
            progress(f"{name}: {len(qs)} questions; built and indexed in {now() - started:.1f}s")
            per_conv[name] = _recall_all(memory, chats, qs, latency, methods)
        if args.keep:
            memory.close()
    groups = {"all": list(per_conv), "tune": [c for c in per_conv if c in TUNE],
              "held_out": [c for c in per_conv if c in HELD_OUT]}
    results = {corpus: {group: {m: mean([r for c in names for r in per_conv[c][corpus][m]]) for m in methods}
                        for group, names in groups.items() if names} for corpus in corpora}
    report = {"benchmark": "recall_locomo", "quick": args.quick, "env": environment(),
              "params": {"conversations": list(per_conv), "corpora": list(corpora),
                         "link_sessions": args.link_sessions, "story_time": args.story_time,
                         "source_query_vector": args.source_query_vector, "long_messages": args.long_messages,
                         "embedding": args.model or memory.settings.embedding.model,
                         "questions": sum(len(v[corpora[0]]["hybrid"]) for v in per_conv.values())},
              "results": {"metrics": results, "per_conversation": {
                  corpus: {c: {m: mean(per_conv[c][corpus][m])["R@10"] for m in ("hybrid", "rag")} for c in per_conv}
                  for corpus in corpora},
                  "latency": {m: latency_summary(v) for m, v in latency.items() if v}}}

    def render(r: dict) -> str:
        lines = []
        for corpus, by_group in r["results"]["metrics"].items():
            for group, by_method in by_group.items():
                for method, metrics in by_method.items():
                    lines.append((f"{corpus} {group}: {method}", metrics["R@5"], metrics["R@10"], metrics["R@20"],
                                  metrics["MRR"], metrics.get("person@10", "-"), metrics.get("any_person@10", "-"),
                                  r["results"]["latency"][method]["p50_ms"]))
        return (
            table(["corpus split: method", "R@5", "R@10", "R@20", "MRR", "person@10", "any person", "p50 ms"], lines)
            + f"\n{r['params']['questions']} questions; link_sessions={r['params']['link_sessions']}; "
            f"story_time={r['params']['story_time']}; "
            f"source_query_vector={r['params']['source_query_vector']}; embedding={r['params']['embedding']}"
            + (
                f"; long messages (question at the {r['params']['long_messages']})"
                if r["params"]["long_messages"]
                else ""
            )
        )

    emit(args, report, render)


if __name__ == "__main__":
    main()
