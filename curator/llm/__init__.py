"""Model access (OpenAI-compatible and Cohere), token counts and the per-chat usage log."""
