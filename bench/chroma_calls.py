"""What one call of embedded Chroma costs, by collection size: a one-row upsert, delete and metadata update, and a
query at the n_results recall asks (200 nodes, 50 sources) and a bare query asks (20). The floor under every
commit and rollback with the index open: each collection a sync writes costs one call, however small the change
(bench/README.md, "Fourth round"). Random 256-dimension vectors, as the default embedder's."""

from __future__ import annotations

import tempfile
from time import process_time

import chromadb
import numpy as np

from _common import emit, environment, now, parse_args, progress, table

CALLS = 30


def _timed(action) -> tuple[float, float]:
    """(CPU ms, wall ms) per call of `action(i)`, over CALLS calls."""
    wall, cpu = now(), process_time()
    for i in range(CALLS):
        action(i)
    return (process_time() - cpu) * 1000 / CALLS, (now() - wall) * 1000 / CALLS


def measure(client, size: int, rng: np.random.Generator) -> dict:
    collection = client.create_collection(f"bench{size}", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    vectors = rng.normal(size=(size + CALLS, 256)).astype(np.float32)
    for start in range(0, size, 5000):
        end = min(size, start + 5000)
        collection.add(ids=[f"n{i}" for i in range(start, end)], embeddings=vectors[start:end],
                       metadatas=[{"type": "event", "archived": False}] * (end - start))  # as the index writes
    collection.query(query_embeddings=[vectors[0]], n_results=5)  # load the index before timing
    row = {"size": size}
    row["upsert"] = _timed(lambda i: collection.upsert(ids=[f"x{i}"], embeddings=[vectors[size + i]],
                                                       metadatas=[{"type": "event", "archived": False}]))
    row["update"] = _timed(lambda i: collection.update(ids=[f"n{i}"], metadatas=[{"type": "event", "archived": True}]))
    row["delete"] = _timed(lambda i: collection.delete(ids=[f"x{i}"]))
    for k in (20, 50, 200):
        row[f"query{k}"] = _timed(lambda i, k=k: collection.query(query_embeddings=[vectors[i]], n_results=k,
                                                                 include=["distances"]))
    return row


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument(
        "--sizes", default="1000,10000,30000", help="collection sizes, comma-separated"))
    sizes = [1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as path:
        client = chromadb.PersistentClient(path, settings=chromadb.Settings(anonymized_telemetry=False))
        for size in sizes:
            progress(f"{size} rows")
            rows.append(measure(client, size, rng))
    report = {"benchmark": "chroma_calls", "quick": args.quick, "env": environment(),
              "params": {"sizes": sizes, "calls": CALLS, "chromadb": chromadb.__version__},
              "results": {"rows": rows}}

    def render(r: dict) -> str:
        names = ("upsert", "update", "delete", "query20", "query50", "query200")
        lines = [(row["size"], *(f"{row[n][0]:.2f} / {row[n][1]:.2f}" for n in names)) for row in r["results"]["rows"]]
        return (table(["rows", "upsert 1", "update 1", "delete 1", "query k=20", "k=50", "k=200"], lines)
                + f"\nCPU ms / wall ms per call, mean of {CALLS}; chromadb {r['params']['chromadb']}, embedded")

    emit(args, report, render)


if __name__ == "__main__":
    main()
