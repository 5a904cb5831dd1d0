"""From chat messages to ops: chat files, the built-in extractor, the memory_curator agent, ingest."""
