"""The library: `Memory` (and its async twin), the one object every front end talks to."""
