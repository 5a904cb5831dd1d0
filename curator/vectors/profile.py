"""Which embedder a vector index uses: a profile, read by the settings without loading any embedding code
(`curator/vectors/embeddings.py` makes the embedders)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_LOCAL_MODEL = "e5-joined"


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
