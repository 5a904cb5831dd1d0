"""Retrieval quality of memory-curator's recall on LoCoMo (the dev split in ../shared/data/locomo_dev.json).

Each observation of a conversation becomes a node of a small custom schema (one chat per conversation); each
question of categories 1-4 with evidence is recalled; evidence recall@k is the share of the question's evidence
turns (dia_ids) covered by the top-k recalled nodes. Reported for `hybrid` (the default, no LLM), `rag` (vector
top-K, no rewrite, no rerank) and two baselines run in the same script: plain BM25 over the same documents, and a
plain Chroma query with the same embedder. Figures are given for all five conversations, for the three used to
tune (conv-26, conv-41, conv-43) and for the two held out (conv-47, conv-49)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table

from curator.lexical import BM25

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json"
TUNE, HELD_OUT = ("conv-26", "conv-41", "conv-43"), ("conv-47", "conv-49")
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
"""
KS = (5, 10, 20)


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


def questions(conv: dict) -> list[dict]:
    return [q for q in conv["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]


def score(ranked: list[list[str]], evidence: list[str]) -> dict:
    wanted = set(evidence)
    out = {}
    for k in KS:
        covered = set().union(*ranked[:k]) if ranked[:k] else set()
        out[f"R@{k}"] = len(wanted & covered) / len(wanted)
    first = next((i for i, ids in enumerate(ranked, 1) if wanted & set(ids)), None)
    out["MRR"] = 1 / first if first else 0.0
    return out


def mean(rows: list[dict]) -> dict:
    return {m: round(sum(r[m] for r in rows) / len(rows), 4) for m in rows[0]} if rows else {}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument(
        "--link-sessions", action="store_true", help="link consecutive observations of a session (follows)"))
    if not DATA.exists():
        print(f"skipped: {DATA} is absent")
        return
    convs = json.loads(DATA.read_text(encoding="utf-8"))
    if args.quick:
        convs = convs[:1]
    methods = ("hybrid", "rag", "bm25", "chroma")
    per_conv: dict[str, dict[str, list[dict]]] = {}
    latency: dict[str, list[float]] = {m: [] for m in methods}
    with TempMemory() as tmp:
        memory = tmp.memory
        schema_path = tmp.path / "locomo.yaml"
        schema_path.write_text(SCHEMA, encoding="utf-8")
        for conv in convs:
            name = conv.get("sample_id", f"conv-{len(per_conv)}")
            items = observations(conv)
            qs = questions(conv)[:20] if args.quick else questions(conv)
            memory.create_chat(name, schema_path)
            ops = [{"op": "create_node", "id": f"o{i}", "type": "observation", "title": item["text"][:80],
                    "fields": {"text": item["text"], "speaker": item["speaker"], "date": item["date"],
                               "dia_ids": ",".join(item["dia_ids"])}, "floor_from": i, "floor_to": i}
                   for i, item in enumerate(items)]
            speakers = sorted({item["speaker"] for item in items})
            ops += [{"op": "create_node", "id": f"p{n}", "type": "person", "fields": {"name": s}}
                    for n, s in enumerate(speakers)]
            ops += [{"op": "link", "source": f"p{speakers.index(item['speaker'])}", "target": f"o{i}",
                     "relation": "involved_in"} for i, item in enumerate(items)]  # as the extractor links characters
            if args.link_sessions:
                ops += [{"op": "link", "source": f"o{i}", "target": f"o{i + 1}", "relation": "follows", "strength": 0.2}
                        for i in range(len(items) - 1) if items[i]["session"] == items[i + 1]["session"]]
            memory.commit(name, ops, 0, "import")
            progress(f"{name}: {len(items)} observations, {len(qs)} questions; indexing")
            started = now()
            memory.rebuild_vectors(name)
            index_s = now() - started
            covers = {f"o{i}": item["dia_ids"] for i, item in enumerate(items)}
            covers.update({f"p{n}": [] for n in range(len(speakers))})
            bm25 = BM25([item["text"] for item in items])
            collection = memory.index._collection(name)
            embedder = memory.index.function.embedder
            rows: dict[str, list[dict]] = {m: [] for m in methods}
            for q in qs:
                question = q["question"]
                for mode in ("hybrid", "rag"):
                    started = now()
                    injection = memory.recall(name, question, mode=mode, max_results=20, top_k=50,
                                              budget_tokens=100_000)
                    latency[mode].append(now() - started)
                    rows[mode].append(score([covers[c.node.id] for c in injection.recalled], q["evidence"]))
                started = now()
                hits = bm25.top(question, 20)
                latency["bm25"].append(now() - started)
                rows["bm25"].append(score([covers[f"o{i}"] for i, _ in hits], q["evidence"]))
                started = now()
                vector = embedder.embed_queries([question])[0]
                result = collection.query(query_embeddings=[vector], n_results=20, include=["distances"])
                latency["chroma"].append(now() - started)
                rows["chroma"].append(score([covers[i] for i in result["ids"][0]], q["evidence"]))
            per_conv[name] = rows
            progress(f"{name}: indexed in {index_s:.1f}s; hybrid R@10 {mean(rows['hybrid'])['R@10']}, "
                     f"chroma R@10 {mean(rows['chroma'])['R@10']}")
    groups = {"all": list(per_conv), "tune": [c for c in per_conv if c in TUNE],
              "held_out": [c for c in per_conv if c in HELD_OUT]}
    results = {group: {m: mean([r for c in names for r in per_conv[c][m]]) for m in methods}
               for group, names in groups.items() if names}
    report = {"benchmark": "recall_locomo", "quick": args.quick, "env": environment(),
              "params": {"conversations": list(per_conv), "link_sessions": args.link_sessions,
                         "questions": sum(len(v["hybrid"]) for v in per_conv.values())},
              "results": {"metrics": results, "latency": {m: latency_summary(v) for m, v in latency.items() if v}}}

    def render(r: dict) -> str:
        lines = []
        for group, by_method in r["results"]["metrics"].items():
            for method, metrics in by_method.items():
                lines.append((f"{group}: {method}", metrics["R@5"], metrics["R@10"], metrics["R@20"], metrics["MRR"],
                              r["results"]["latency"][method]["p50_ms"]))
        return table(["split: method", "R@5", "R@10", "R@20", "MRR", "p50 ms"], lines) + \
            f"\n{r['params']['questions']} questions; link_sessions={r['params']['link_sessions']}"

    emit(args, report, render)


if __name__ == "__main__":
    main()
