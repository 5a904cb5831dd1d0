"""The library from async code: `AsyncMemory` awaited inside a running loop, and the synchronous `Memory` called from
inside one (a FastAPI handler, a pydantic-ai tool, a Jupyter cell), where `asyncio.run` would refuse."""

from __future__ import annotations

import asyncio
import inspect
import threading
from types import SimpleNamespace

import curator
from curator import AsyncMemory, Memory
from curator.testing.scripted import graph_signature, scripted_chat, scripted_model

EVENT = {"op": "create_node", "id": "n_e", "type": "character_sheet", "fields": {"name": "Eileen"}}


def test_the_two_faces_have_the_same_operations():
    def operations(cls: type) -> dict[str, list[str]]:
        return {name: list(inspect.signature(value).parameters) for name, value in vars(cls).items()
                if inspect.isfunction(value) and not name.startswith("_")}

    sync, aio = operations(Memory), operations(AsyncMemory)
    # what only one face has: the sync face's own state accessors and closing; the async face's closing
    assert set(sync) - set(aio) == {"close", "maintainer", "channel_writer"}
    assert set(aio) - set(sync) == {"aclose"}
    assert {name: params for name, params in sync.items() if name in aio} == \
        {name: params for name, params in aio.items() if name in sync}
    assert all(inspect.iscoroutinefunction(getattr(AsyncMemory, name)) for name in aio)
    assert Memory.extract.__doc__ and Memory.extract.__doc__ == AsyncMemory.extract.__doc__


def test_async_memory_inside_a_running_loop(tmp_path):
    messages = scripted_chat(6)

    async def main() -> tuple[dict, set[int], int]:  # the graph, the threads the store's work ran on, the loop's
        loop_thread = threading.get_ident()
        async with AsyncMemory(tmp_path) as memory:
            seen: set[int] = set()
            original = memory._core.commit

            def commit(*args, **kwargs):  # where the store's work runs: never on the loop's thread
                seen.add(threading.get_ident())
                return original(*args, **kwargs)

            memory._core.commit = commit  # type: ignore[method-assign]
            await memory.create_chat("c", "default")
            await memory.commit("c", [EVENT], anchor_floor=0)
            await memory.set_messages("c", messages)
            results = await memory.extract("c", model=scripted_model())  # the model's calls on this loop
            assert [r.ok for r in results] == [True] * 3
            injection = await memory.recall("c", "Eileen went to the bridge")
            assert injection.text
            rolled = await memory.rollback("c", floor=3)
            assert rolled.reverted
            graph = await memory.graph("c")  # a view: its reads are quick queries of the store
            return graph_signature(SimpleNamespace(graph=lambda chat_id: graph), "c"), seen, loop_thread

    signature, seen, loop_thread = asyncio.run(main())
    assert seen and loop_thread not in seen, "the store's work ran on the event loop's thread"
    # the same operations through the sync face give the same graph
    with curator.open(tmp_path / "sync") as memory:
        memory.create_chat("c", "default")
        memory.commit("c", [EVENT], anchor_floor=0)
        memory.set_messages("c", messages)
        memory.extract("c", model=scripted_model())
        memory.rollback("c", floor=3)
        assert graph_signature(memory, "c") == signature


def test_sync_memory_called_inside_a_running_loop(tmp_path):
    """What a FastAPI handler or a notebook cell does: plain calls, a loop running in the thread."""

    async def handler() -> dict:
        asyncio.get_running_loop()  # a loop runs here: `asyncio.run` would raise
        with curator.open(tmp_path) as memory:
            memory.create_chat("c", "default")
            memory.set_messages("c", scripted_chat(6))
            results = memory.extract("c", model=scripted_model())
            assert [r.ok for r in results] == [True] * 3
            report = memory.sync("c", scripted_chat(10), extract=True, model=scripted_model())
            assert report.due == []
            assert memory.forget("c", dry_run=True).ok
            return graph_signature(memory, "c")

    inside = asyncio.run(handler())
    with curator.open(tmp_path / "outside") as memory:
        memory.create_chat("c", "default")
        memory.set_messages("c", scripted_chat(6))
        memory.extract("c", model=scripted_model())
        memory.sync("c", scripted_chat(10), extract=True, model=scripted_model())
        assert graph_signature(memory, "c") == inside


def test_memory_and_its_async_face_share_one_state(tmp_path):
    with curator.open(tmp_path) as memory:
        memory.create_chat("c", "default")

        async def main() -> list[str]:
            await memory.aio.commit("c", [EVENT], anchor_floor=0)
            return await memory.aio.chats()

        assert asyncio.run(main()) == ["c"]
        assert [n.id for n in memory.graph("c").nodes()] == ["n_e"]
