"""Cross-encoder rerank (Cohere's rerank API, or a TEI/Jina-style HTTP endpoint). Any failure returns None, and
recall keeps its own order: rerank may improve a recall, never break one."""

from __future__ import annotations

import logging
import os

import httpx

from curator.errors import MissingExtra
from curator.settings import RerankProfile

log = logging.getLogger(__name__)


def rerank(profile: RerankProfile, query: str, documents: list[str]) -> list[tuple[int, float]] | None:
    """(index into `documents`, score), best first; None when the reranker fails."""
    try:
        if profile.provider == "cohere":
            return _cohere(profile, query, documents)
        return _http(profile, query, documents)
    except Exception as exc:  # noqa: BLE001 - any failure falls back to the vector order
        log.warning("rerank failed, keeping the vector order: %s: %s", type(exc).__name__, exc)
        return None


def _cohere(profile: RerankProfile, query: str, documents: list[str]) -> list[tuple[int, float]]:
    try:
        import cohere
    except ImportError as exc:
        raise MissingExtra("cohere", "Cohere rerank") from exc

    client = cohere.ClientV2(api_key=os.environ.get(profile.api_key_env, ""), timeout=profile.timeout,
                             base_url=profile.url or os.getenv("CO_API_URL"))  # its own default
    response = client.rerank(model=profile.model, query=query, documents=documents, top_n=len(documents))
    return [(r.index, r.relevance_score) for r in response.results]


def _http(profile: RerankProfile, query: str, documents: list[str]) -> list[tuple[int, float]]:
    if not profile.url:
        raise ValueError("an http rerank profile needs a url")
    headers = {"authorization": f"Bearer {key}"} if (key := os.environ.get(profile.api_key_env)) else {}
    response = httpx.post(profile.url, json={"query": query, "texts": documents, "documents": documents,
                                             "model": profile.model}, headers=headers, timeout=profile.timeout)
    response.raise_for_status()
    data = response.json()
    rows = data.get("results", data) if isinstance(data, dict) else data
    order = [(int(r["index"]), float(r.get("score", r.get("relevance_score", 0.0)))) for r in rows]
    if sorted(i for i, _ in order) != sorted({i for i, _ in order}) or any(i >= len(documents) for i, _ in order):
        raise ValueError("rerank answer has bad indexes")
    return sorted(order, key=lambda r: -r[1])
