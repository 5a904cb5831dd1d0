"""Remote embedding profiles on the wire: an OpenAI-compatible /embeddings endpoint (pytest-httpx2; the openai
client speaks httpx2) and Cohere's embed API (respx; the Cohere SDK speaks httpx)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import respx

from curator.vectors.embeddings import EmbeddingProfile, make_embedder


def test_openai_compatible_embeddings(httpx2_mock, monkeypatch):
    monkeypatch.setenv("EMB_KEY", "sk-emb")
    route = httpx2_mock.post("http://emb.test/v1/embeddings").mock(side_effect=lambda request: httpx.Response(
        200, json={"object": "list", "model": "m", "usage": {"prompt_tokens": 3, "total_tokens": 3},
                   "data": [{"object": "embedding", "index": i, "embedding": [3.0, 4.0] if i == 0 else [0.0, 2.0]}
                            for i, _ in enumerate(json.loads(request.content)["input"])]}))
    embedder = make_embedder(EmbeddingProfile(provider="openai", model="m", base_url="http://emb.test/v1",
                                              api_key_env="EMB_KEY", dimension=2))
    vectors = embedder.embed_documents(["a", "b"])
    assert np.allclose(vectors, [[0.6, 0.8], [0.0, 1.0]])  # normalized
    sent = json.loads(route.calls[0].request.content)
    assert sent["input"] == ["a", "b"] and sent["dimensions"] == 2
    assert route.calls[0].request.headers["authorization"] == "Bearer sk-emb"


def test_cohere_embeddings(monkeypatch):
    monkeypatch.setenv("CO_EMB_KEY", "co-emb")
    with respx.mock(assert_all_called=True) as router:
        route = router.post("https://api.cohere.com/v2/embed").mock(side_effect=lambda request: httpx.Response(
            200, json={"id": "e", "embeddings": {"float": [[1.0, 0.0]] * len(json.loads(request.content)["texts"])},
                       "texts": [], "meta": {}, "response_type": "embeddings_by_type"}))
        embedder = make_embedder(EmbeddingProfile(provider="cohere", model="embed-multilingual-v3.0",
                                                  api_key_env="CO_EMB_KEY"))
        assert embedder.embed_queries(["q"]).shape == (1, 2)
        embedder.embed_documents(["d1", "d2"])
    kinds = [json.loads(call.request.content)["input_type"] for call in route.calls]
    assert kinds == ["search_query", "search_document"]
