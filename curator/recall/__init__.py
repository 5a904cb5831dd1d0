"""From a query to the injection: hybrid/rag/llm recall, scoring, rerank, rewrite, packing, World Info."""
