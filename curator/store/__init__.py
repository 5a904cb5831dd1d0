"""The commit log, its projection (the graph), the chat's messages and the graph's import/export."""
