"""The in-memory copies' search (`curator/vectors/mirror.py`) on e5 vectors: how many of the exact k nearest it finds
and what a search costs, next to an exact search over every float and an int8 pass over every row, in one run.

The rows are LoCoMo dev's turns ("name: text") and observations embedded by the default embedder, and mixes of two
of them (0.6 / 0.4, a little noise) up to `--rows`: a chat's collection of 10k e5 vectors, shaped as real ones are
(a large common part, topics). The queries are the dev questions, embedded as queries. Each method is asked for
k = 200 (recall's node search) and k = 100 (its source search); CPU ms per search is the mean over the questions.
Before each search the CPU's caches are filled with other data, as the query's e5 pass leaves them in a recall
(`--warm-cache`: not, the copy stays cached between searches, which flatters the methods that read more).

    python bench/mirror_search.py [--quick] [--json] [--rows 10000] [--questions 300]
"""

from __future__ import annotations

import json
from time import process_time

import numpy as np
from _common import emit, environment, parse_args, progress, table
from recall_locomo import data_path

from curator.vectors.embeddings import make_embedder
from curator.vectors.mirror import OVERSAMPLE, Copy, _best, _products
from curator.vectors.profile import EmbeddingProfile


def texts_and_questions(limit: int | None) -> tuple[list[str], list[str]]:
    texts, questions = [], []
    for conv in json.loads(data_path().read_text(encoding="utf-8")):
        for key, turns in conv["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                texts += [f"{t['speaker']}: {t['text']}" for t in turns]
        for by_speaker in conv["observation"].values():
            for items in by_speaker.values():
                texts += [item[0] if isinstance(item, list) else str(item) for item in items]
        questions += [q["question"] for q in conv["qa"]]
    return texts[:limit], questions


def exact(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    return _best(_products(matrix, query, np.empty(len(matrix), np.float32)), k)


def int8_pass(copy: Copy, query: np.ndarray, k: int) -> np.ndarray:
    """The first pass a copy of up to PROJECTED_ROWS rows makes: int8 over every row, then the floats of the best."""
    rough = _products(copy.codes, query, np.empty(len(copy.codes), np.float32)) * copy.scales
    rows = _best(rough, OVERSAMPLE * k)
    return rows[_best(_products(copy.matrix[rows], query, np.empty(len(rows), np.float32)), k)]


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], lambda p: (
        p.add_argument("--rows", type=int, default=10_000, help="rows in the copy (default 10000)"),
        p.add_argument("--questions", type=int, default=300, help="questions asked (default 300)"),
        p.add_argument("--warm-cache", action="store_true", help="keep the copy in the caches between searches")))
    rows, asked = (5_000, 40) if args.quick else (args.rows, args.questions)
    texts, questions = texts_and_questions(1_500 if args.quick else None)
    progress(f"embedding {len(texts)} texts and {min(asked, len(questions))} questions")
    embedder = make_embedder(EmbeddingProfile())
    base = embedder.embed_documents(texts)
    queries = embedder.embed_queries(questions[:asked])
    rng = np.random.default_rng(args.seed)
    first, second = rng.integers(0, len(base), rows - len(base)), rng.integers(0, len(base), rows - len(base))
    mixes = 0.6 * base[first] + 0.4 * base[second] + 0.01 * rng.normal(size=(len(first), base.shape[1]))
    vectors = np.vstack([base, mixes]).astype(np.float32)
    copy = Copy([f"n{i}" for i in range(len(vectors))], vectors)
    methods = {"exact (every float)": lambda q, k: exact(copy.matrix, q, k),
               "int8 over every row": lambda q, k: int8_pass(copy, q, k),
               "shipped (projection)": lambda q, k: np.array([int(i[1:]) for i, _ in copy.search(q, k, frozenset())])}
    scratch = np.ones(64 << 17)  # 64 MB, past the CPU's last cache
    results = []
    for k in (200, 100):
        truth = [set(exact(copy.matrix, q, k).tolist()) for q in queries]
        for name, search in methods.items():
            search(queries[0], k)  # warm
            found, spent = [], 0.0
            for query in queries:
                if not args.warm_cache:
                    float(scratch.sum())  # the caches hold other data now
                started = process_time()
                found.append(search(query, k))
                spent += process_time() - started
            cpu_ms = spent / len(queries) * 1000
            overlap = float(np.mean([len(set(f.tolist()) & t) / k for f, t in zip(found, truth)]))
            results.append({"k": k, "method": name, "cpu_ms": round(cpu_ms, 3), "found_of_exact": round(overlap, 4)})
    report = {"benchmark": "mirror_search", "quick": args.quick, "env": environment(),
              "params": {"rows": len(vectors), "dims": int(vectors.shape[1]), "questions": len(queries),
                         "caches": "warm" if args.warm_cache else "filled with other data before each search"},
              "results": {"searches": results}}

    def render(r: dict) -> str:
        p = r["params"]
        return (f"{p['rows']:,} rows of {p['dims']} dimensions, {p['questions']} questions, caches {p['caches']}\n"
                + table(["k", "method", "CPU ms a search", "share of the exact k found"],
                        [[x["k"], x["method"], x["cpu_ms"], x["found_of_exact"]] for x in r["results"]["searches"]]))

    emit(args, report, render)


if __name__ == "__main__":
    main()
