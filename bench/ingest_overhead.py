"""Ingest overhead per reply, model time excluded: a 1,000-floor chat replayed against a fake OpenAI-compatible
endpoint on loopback that answers at once (one event and a character update per reply).

"step" is the whole extraction step (prompt building, the HTTP round trip, validation, planning, the commit and
the logs); "model" is the time inside the model request (the loopback round trip, our client and retry layer);
"overhead" = step - model is what memory-curator itself adds per reply; "embedding" is the part of it spent in
the embedder, "step_cpu" the CPU time of the whole step (the fake endpoint runs in this process). With `--index`
the vector index is open, as in the service: each commit is followed by its sync, which embeds the new and changed
nodes and the messages of their sources (each message once). `--model NAME` picks the embedder: a local model
(`use-m3`, ...) or `stub` (a hash of the text as its vector, no model: what is left is the index's own overhead);
`--profile FILE` writes a cProfile of the ingest."""

from __future__ import annotations

import cProfile
import hashlib
import json
from time import process_time

import numpy as np

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table

from curator.store.messages import Message
from curator.settings import ModelProfile, Settings
from curator.vectors.embeddings import EmbeddingProfile
from curator.testing import FakeOpenAI, completion

NAMES = ["Eileen", "Rowan", "Mira", "Brannoch", "Silas Marrow"]


def responder(body: dict) -> dict:
    count = len(body["messages"])
    name = NAMES[hash(json.dumps(body["messages"][-1])[-40:]) % len(NAMES)]
    args = {"event": [{"summary": f"Step with {count} messages: {name} acts.", "ref": "e"}],
            "character_sheet": [{"name": name, "goal": f"goal {count}"}],
            "links": [{"source": name, "relation": "involved_in", "target": "e"}]}
    return completion(body, tool_args=args)


class StubEmbedder:
    """A vector from the text's hash (384 dimensions, normalized): costs next to nothing, so a profile shows what
    the index itself adds per reply."""

    def __init__(self, profile: EmbeddingProfile):
        self.profile = profile

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        rows = [np.random.default_rng(int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little"))
                .standard_normal(384) for t in texts]
        matrix = np.asarray(rows, np.float32).reshape(len(texts), 384)
        return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)

    embed_queries = embed_documents


def chat(floors: int) -> list[Message]:
    lines = []
    for i in range(floors // 2):
        lines.append(Message("user", "Rowan", f"Turn {i}: Rowan asks about the road, the bridge and the toll."))
        lines.append(Message("assistant", "Eileen", f"Turn {i}: Eileen answers at length. " * 6))
    return lines


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--floors", type=int, default=1000),
        p.add_argument("--index", action="store_true", help="open the vector index first (each commit embeds)"),
        p.add_argument("--model", default=None, help="embedder: a local model name, or `stub` (default: the default)"),
        p.add_argument("--profile", default=None, help="write a cProfile of the ingest to this file")))
    floors = 100 if args.quick else args.floors
    steps: list[float] = []
    model: list[float] = []
    with FakeOpenAI(responder) as fake, TempMemory() as tmp:
        memory = tmp.memory
        memory.settings = Settings(profiles={"default": ModelProfile(model="fake", base_url=fake.base_url,
                                                                      api_key_env="BENCH_UNUSED_KEY")},
                                    **({"embedding": EmbeddingProfile(model=args.model)}
                                       if args.model and args.model != "stub" else {}))
        memory.create_chat("bench", "default")
        embedding = {"seconds": 0.0, "texts": 0}  # inside the embedder, this step (the index open)
        if args.index:
            if args.model == "stub":
                memory.index.function._embedder = StubEmbedder(memory.index.profile)
            embedder = memory.index.function.embedder
            embedder.embed_queries(["warm up"])  # load the model before timing
            documents = embedder.embed_documents

            def timed(texts):
                started = now()
                try:
                    return documents(texts)
                finally:
                    embedding["seconds"] += now() - started
                    embedding["texts"] += len(texts)

            embedder.embed_documents = timed
        memory.set_messages("bench", chat(floors))
        path = tmp.path / "chat.jsonl"
        path.write_text("\n".join(json.dumps({"role": m.role, "name": m.name, "content": m.text})
                                  for m in memory.store.messages("bench")), encoding="utf-8")
        last = [now(), process_time()]
        embed: list[float] = []
        cpu: list[float] = []
        texts: list[int] = []

        def on_step(result, done, due):
            t = now()
            steps.append(t - last[0])
            cpu.append(process_time() - last[1])
            model.append(result.usage.latency_ms / 1000)
            embed.append(embedding["seconds"])
            texts.append(embedding["texts"])
            embedding.update(seconds=0.0, texts=0)
            last[0], last[1] = t, process_time()
            if done % 100 == 0:
                progress(f"{done}/{due} replies")

        profiler = cProfile.Profile(process_time) if args.profile else None  # CPU time (all threads)
        started = now()
        if profiler:
            profiler.enable()
        report_ = memory.ingest("bench", path, on_step=on_step)
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)
        total = now() - started
        stats = memory.graph("bench").stats()
    overhead = [s - m for s, m in zip(steps, model)]
    rest = [o - e for o, e in zip(overhead, embed)]
    report = {
        "benchmark": "ingest_overhead",
        "quick": args.quick,
        "env": environment(),
        "params": {"floors": floors, "index": args.index, "model": args.model or "default"},
        "results": {
            "replies": len(steps),
            "failed": report_.failed is not None,
            "seconds": round(total, 3),
            "replies_per_s": round(len(steps) / total, 2),
            "step": latency_summary(steps),
            "model": latency_summary(model),
            "overhead": latency_summary(overhead),
            "embedding": latency_summary(embed),
            "overhead_without_embedding": latency_summary(rest),
            "step_cpu": latency_summary(cpu),
            "texts_embedded_per_reply": sorted(texts)[len(texts) // 2] if texts else 0,
            "nodes_active": stats["nodes_active"],
            "edges": stats["edges"],
            "commits": stats["commits"],
        },
    }

    def render(report: dict) -> str:
        r = {**report["results"], "floors": report["params"]["floors"]}
        rows = [(name, r[name]["p50_ms"], r[name]["p95_ms"], r[name]["max_ms"])
                for name in ("step", "model", "overhead", "embedding", "overhead_without_embedding", "step_cpu")]
        return (
            table(["per reply", "p50 ms", "p95 ms", "max ms"], rows)
            + f"\n{r['replies']} replies of a {r['floors']}-floor chat in {r['seconds']} s"
            + f" = {r['replies_per_s']} replies/s;"
            + f" graph: {r['nodes_active']} active nodes, {r['edges']} edges, {r['commits']} commits;"
            + f" vector index {'open' if report['params']['index'] else 'closed'}, embedder {report['params']['model']}"
            + (f" ({r['texts_embedded_per_reply']} texts embedded per reply, p50)" if report["params"]["index"] else "")
        )

    emit(args, report, render)


if __name__ == "__main__":
    main()
