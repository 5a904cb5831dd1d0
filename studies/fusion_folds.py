"""Recall's fusion weights on LoCoMo dev, chosen with held-out folds (issue 31). Not shipped; a study.

The chats of both corpora are built once (`bench/recall_locomo.py`'s harness, the configured or `--model` embedder,
kept in `--keep DIR`); each question's channel scores (vector and BM25 matches of the nodes and of the events'
sources) are computed once and kept, so that a weight set costs only the fusion and the scoring steps (a few
seconds for all 786 questions on both corpora). Weights (the embedder's `dense_weight` and `fusion`, read by
`Recaller._embedder_settings`): dense, lexical, source, mention, date, neighbour. Search: coordinate ascent over a
grid per weight, from the embedder's shipped values, maximising the mean of hybrid R@10 over the two corpora.

Folds: leave one conversation out (5 folds): the weights are chosen on four conversations and scored on the fifth;
the held-out figure is the mean over the folds' held-out questions. Also: chosen on the tune conversations
(26, 41, 43), scored on the held-out two (47, 49), as the bench README's other rounds do. Each search starts from
the weights shipped before issue 31 (NEUTRAL), not from the tuned ones.

Run: python studies/fusion_folds.py --keep DIR [--model NAME] [--data PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import recall_locomo as rl  # noqa: E402

import curator  # noqa: E402
from curator.recall import engine  # noqa: E402

GRID = {"dense": [0.2, 0.3, 0.4, 0.5, 0.7, 1.0],
        "lexical": [0.1, 0.2, 0.3, 0.4],
        "source": [1.0, 1.2, 1.4, 1.6],
        "mention": [1.0, 1.5, 2.0],
        "date": [1.0, 1.5, 2.0],
        "neighbour": [0.2, 0.3, 0.4]}
NEUTRAL = {"dense": 1.0, "lexical": 0.3, "source": 1.0, "mention": 1.0, "date": 2.0, "neighbour": 0.3}
EMBEDDER = []  # the index's embedder, whose weights `_set` changes (instance attributes over the class's)


def _set(params: dict) -> None:
    embedder = EMBEDDER[0]
    embedder.dense_weight = params["dense"]
    embedder.fusion = {k: v for k, v in params.items() if k != "dense"}


def _cache_channels():
    """Keep each (chat, query) channel's scores after the first recall: the weights change, the matches do not."""
    dense, lexical = engine.Recaller._dense_scores, engine.Recaller._lexical_scores
    kept_dense, kept_lexical = {}, {}

    def cached_dense(self, chat_id, query, k, source_query=None, context=False):
        key = (chat_id, query, k, source_query, context)
        if key not in kept_dense:
            kept_dense[key] = dense(self, chat_id, query, k, source_query, context)
        return kept_dense[key]

    def cached_lexical(self, chat_id, version, graph, query, source_query, pool):
        key = (chat_id, version, query, source_query)
        if key not in kept_lexical:
            kept_lexical[key] = lexical(self, chat_id, version, graph, query, source_query, pool)
        return kept_lexical[key]

    engine.Recaller._dense_scores, engine.Recaller._lexical_scores = cached_dense, cached_lexical


def evaluate(memory, convs: list[dict], covers: dict, params: dict) -> dict[str, float]:
    """Hybrid R@10 per corpus over the conversations' questions, and their mean ("score"), under `params`."""
    _set(params)
    out = {}
    for corpus in rl.CORPORA:
        rows = [rl.score_chosen(rl.ranked(memory, rl.chat_name(c, corpus), q["question"], "hybrid"),
                                covers[(c["sample_id"], corpus)], q["evidence"])
                for c in convs for q in rl.questions(c)]
        out[corpus] = sum(r["R@10"] for r in rows) / len(rows)
    out["score"] = (out["observations"] + out["turns"]) / 2
    return out


def ascend(memory, convs, covers, start: dict, rounds: int = 2) -> tuple[dict, dict]:
    best, best_fig = dict(start), evaluate(memory, convs, covers, start)
    for _ in range(rounds):
        moved = False
        for key, values in GRID.items():
            for value in values:
                if value == best[key]:
                    continue
                trial = {**best, key: value}
                fig = evaluate(memory, convs, covers, trial)
                if fig["score"] > best_fig["score"] + 1e-9:
                    best, best_fig, moved = trial, fig, True
        if not moved:
            break
    return best, best_fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args()
    data = args.data or rl.data_path()
    convs = json.loads(data.read_text(encoding="utf-8"))
    memory = curator.open(args.keep)
    if args.model:
        from curator.vectors.embeddings import EmbeddingProfile

        memory.settings = memory.settings.model_copy(update={"embedding": EmbeddingProfile(model=args.model)})
    schema = rl.write_schema(args.keep)
    covers = {(c["sample_id"], corpus): rl.build_chat(memory, c, corpus, schema) for c in convs for corpus in rl.CORPORA}
    embedder = memory.index.function.embedder
    EMBEDDER.append(embedder)
    from curator.recall.engine import Recaller

    _, shipped = Recaller(memory.store, memory.settings, memory.index)._embedder_settings()
    _cache_channels()
    start = dict(NEUTRAL)  # the folds start from the weights shipped before issue 31, not from the tuned ones
    report = {"model": memory.settings.embedding.model, "shipped": shipped,
              "shipped_all": evaluate(memory, convs, covers, shipped), "folds": []}
    print(json.dumps({"shipped": report["shipped_all"]}), flush=True)
    held_rows = {corpus: [] for corpus in rl.CORPORA}
    for out in convs:
        train = [c for c in convs if c is not out]
        chosen, fig = ascend(memory, train, covers, start)
        held = evaluate(memory, [out], covers, chosen)
        n = len(rl.questions(out))
        for corpus in rl.CORPORA:
            held_rows[corpus].append((held[corpus], n))
        report["folds"].append({"held_out": out["sample_id"], "chosen": chosen, "train": fig, "held": held})
        print(json.dumps(report["folds"][-1]), flush=True)
    report["held_out_mean"] = {corpus: sum(v * n for v, n in rows) / sum(n for _, n in rows)
                               for corpus, rows in held_rows.items()}
    tune = [c for c in convs if c["sample_id"] in rl.TUNE]
    held_out = [c for c in convs if c["sample_id"] in rl.HELD_OUT]
    chosen, fig = ascend(memory, tune, covers, start)
    report["tune_split"] = {"chosen": chosen, "tune": fig, "held_out": evaluate(memory, held_out, covers, chosen),
                            "all": evaluate(memory, convs, covers, chosen)}
    print(json.dumps({k: report[k] for k in ("held_out_mean", "tune_split")}), flush=True)
    memory.close()


if __name__ == "__main__":
    main()
