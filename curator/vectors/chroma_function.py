"""Chroma's handle on our embedders, registered under one name so that a reopened collection can rebuild it."""

from __future__ import annotations

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function
from typing import Any, Literal

from curator.vectors.embeddings import Embedder, LazyEmbedder
from curator.vectors.profile import EmbeddingProfile


@register_embedding_function
class CuratorEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma's handle on our embedders. Registered, so a reopened collection can rebuild it from its config
    (the profile; never a key). Chroma's own default function would download a model and is never used."""

    def __init__(self, profile: EmbeddingProfile | dict[str, Any], shared: LazyEmbedder | None = None) -> None:
        self.profile = profile if isinstance(profile, EmbeddingProfile) else EmbeddingProfile(**profile)
        self._shared = shared or LazyEmbedder(self.profile)  # the index's, so the model loads once

    @property
    def embedder(self) -> Embedder:
        return self._shared.embedder

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.embedder.embed_documents(list(input)))

    def embed_query(self, input: Documents) -> Embeddings:
        return list(self.embedder.embed_queries(list(input)))

    @staticmethod
    def name() -> str:
        return "memory_curator"

    def get_config(self) -> dict[str, Any]:
        return self.profile.model_dump()

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> CuratorEmbeddingFunction:
        return CuratorEmbeddingFunction(EmbeddingProfile(**config))

    def default_space(self) -> Literal["cosine"]:
        return "cosine"

    def supported_spaces(self) -> list[Literal["cosine", "l2", "ip"]]:
        return ["cosine"]
