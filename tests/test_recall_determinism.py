"""The same chat and query give the same injection in every process. Equal scores used to go in the order of a map
that followed a set's, which Python orders by each process's string hashes: asked "Who are Mira and Eileen?", both
nodes go first at the same score, and which came first changed from one process to the next (a CLI recall against
the service's; a provider's prompt cache, which a changed injection defeats)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, sys, tempfile
import curator
from curator.paths import example_file
with curator.open(tempfile.mkdtemp()) as memory:
    memory.import_("road", example_file("lantern_road.graph.json"))
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    injection = memory.recall("road", sys.argv[1])
    print(json.dumps({"ids": [c.node.id for c in injection.recalled], "text": injection.text}))
"""
QUERY = "Who are Mira and Eileen?"


def test_the_injection_is_the_same_whatever_the_hash_seed(tmp_path):
    seen = []
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "CURATOR_CACHE_DIR": str(tmp_path / "cache")}
        proc = subprocess.run([sys.executable, "-c", SCRIPT, QUERY], capture_output=True, text=True, env=env,
                              timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr
        seen.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert len(seen[0]["ids"]) >= 3
    assert all(s == seen[0] for s in seen[1:]), [s["ids"] for s in seen]
