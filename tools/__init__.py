"""The memory_curator agent's tool surface: read-only graph queries and per-type write tools.

Each tool is a plain typed function over the store; its docstring is what the model reads.
"""
