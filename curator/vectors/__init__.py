"""Embedders, the per-chat Chroma index and the texts it embeds."""
