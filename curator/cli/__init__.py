"""The `curator` command: one sub-command per library operation."""
