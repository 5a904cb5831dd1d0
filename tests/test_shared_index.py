"""Two service processes' worth of state over one store and one Chroma server: what decides a chat's vector index
and recall caches lives in the store (versions, the chat's creation time, the vector hashes), so a Memory that did
not write sees what another one wrote, including a chat deleted and made again, and a full vector rebuild."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import curator
from curator.store.messages import Message

HANG_GUARD = 600


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def chroma_url(tmp_path):
    exe = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    port = _free_port()
    server = subprocess.Popen([exe, "run", "--path", str(tmp_path / "chroma-server"), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HANG_GUARD
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "chroma run did not start"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=HANG_GUARD)


def event(node_id: str, summary: str, floor: int) -> dict:
    return {"op": "create_node", "id": node_id, "type": "event", "title": node_id, "fields": {"summary": summary},
            "floor_from": floor, "floor_to": floor}


def recalled(memory, chat: str, query: str, mode: str) -> list[str]:
    """What recall picks (the persistent block, recent events, is left out: the fillers fill it) and what the
    vector index alone finds first."""
    picked = [c.node.id for c in memory.recall(chat, query, mode=mode, max_results=3).recalled]
    return picked + ["vector:" + memory.index.query(chat, query, k=1)[0][0]]


def new_chat(memory, chat: str, first: dict) -> None:
    """A chat of 100 floors whose recent events are fillers, so what the test looks for is recalled, not always
    injected."""
    memory.create_chat(chat, "default")
    memory.set_messages(chat, [Message("user" if f % 2 == 0 else "assistant", "U" if f % 2 == 0 else "N",
                                       f"line {f}") for f in range(100)])
    fillers = [event(f"e_walk{f}", f"The party walked on through the grey woods, day {f}.", f)
               for f in range(60, 100, 2)]
    memory.commit(chat, [first, *fillers], anchor_floor=99)


@pytest.mark.parametrize("mode", ["rag", "hybrid"])
def test_what_one_memory_writes_the_other_recalls(tmp_path, chroma_url, mode):
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text(f"vectors_url: {chroma_url}\n")
    with curator.open(data) as writer, curator.open(data) as reader:  # two stores, two indexes, two recallers
        new_chat(writer, "c", event("e_salve", "Rowan gave Eileen his last healing salve.", 1))
        writer.index  # noqa: B018 - the writer's index follows its commits, as in the service
        writer.rebuild_vectors("c")
        assert recalled(reader, "c", "the healing salve", mode)[::3] == ["e_salve", "vector:e_salve"]  # warm

        writer.commit("c", [event("e_toll", "Captain Brannoch demanded a toll of three silver crowns.", 3)],
                      anchor_floor=99)
        found = recalled(reader, "c", "the toll of silver crowns", mode)
        assert "e_toll" in found and found[-1] == "vector:e_toll"

        # Deleted and made again by the writer: the versions start over, so only the creation time tells them apart.
        writer.delete_chat("c")
        new_chat(writer, "c", event("e_fish", "Mira caught two silver fish in the river at dawn.", 1))
        found = recalled(reader, "c", "silver fish in the river", mode)
        assert found[0] == "e_fish" and found[-1] == "vector:e_fish" and "e_salve" not in found

        writer.rebuild_vectors("c", full=True)  # drops the collections and makes them again on the server
        found = recalled(reader, "c", "silver fish in the river", mode)
        assert found[0] == "e_fish" and found[-1] == "vector:e_fish"
