"""One model-access layer (curator/llm/access.py): a profile's rate limit holds for every task and thread that uses
it, and every LLM call, recall's included, is in the store's usage log (`curator usage`)."""

from __future__ import annotations

import asyncio
import threading

from curator.llm.access import Models, TaskModel, limiter_for
from curator.llm.models import RateLimiter
from curator.llm.records import LLMTrace
from curator.paths import example_file
from curator.settings import ModelProfile, Settings
from curator.testing import FakeOpenAI, completion

TASKS = ("extract", "curate", "maintain", "summarize", "recall", "rewrite")


def test_every_task_on_a_profile_waits_on_its_one_limiter():
    shared = ModelProfile(model="m", base_url="http://127.0.0.1:9/v1", rpm=30)
    other = shared.model_copy(update={"model": "other"})
    settings = Settings(profiles={"default": shared, "own": other}, tasks={"rewrite": "own"})

    async def limiters() -> dict[str, RateLimiter]:  # models are made inside a loop (one per profile and loop)
        return {task: TaskModel(settings, task).metered(LLMTrace()).limiter for task in TASKS}

    found = asyncio.run(limiters())
    assert {id(found[t]) for t in TASKS if t != "rewrite"} == {id(limiter_for(shared))}
    assert found["rewrite"] is limiter_for(other) and found["rewrite"] is not found["extract"]
    assert asyncio.run(limiters())["curate"] is found["curate"]  # another loop, the same limit


def test_the_limiter_spaces_requests_across_threads_and_loops():
    clock, waits, guard = [0.0], [], threading.Lock()

    async def sleep(seconds: float) -> None:
        with guard:
            waits.append(round(seconds, 6))

    limiter = RateLimiter(rpm=60, clock=lambda: clock[0], sleep=sleep)
    threads = [threading.Thread(target=lambda: asyncio.run(_twice(limiter))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(waits) == [1.0, 2.0, 3.0, 4.0, 5.0]  # six requests, one slot a second, none shared


async def _twice(limiter: RateLimiter) -> None:
    await limiter.wait()
    await limiter.wait()


def test_models_carry_the_overrides_of_each_task():
    scripted = object()
    models = Models(curate=scripted).with_task("extract", None)  # type: ignore[arg-type]
    assert models.given() and models.curate is scripted and models.extract is None
    assert not Models().given() and Models().with_task("maintain", scripted).maintain is scripted  # type: ignore


def test_recall_llm_calls_are_in_the_usage_log(memory):
    memory.import_("road", example_file("lantern_road.graph.json"))
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))

    def answer(body: dict) -> dict:
        if body.get("tools"):  # the rerank's pick
            return completion(body, tool_args={"ids": ["n_eileen"]})
        return completion(body, content="Eileen owes the traveller for the salve")  # the query rewrite

    with FakeOpenAI(answer) as fake:
        memory.settings = Settings(profiles={"default": ModelProfile(model="fake", base_url=fake.base_url)})
        rag = memory.recall("road", "Do you remember the salve?", mode="rag", rewrite=True)
        hybrid = memory.recall("road", "Do you remember the salve?", llm_rerank=True)
    assert rag.usage.calls == 1 and hybrid.usage.calls == 1
    assert [c.node.id for c in hybrid.recalled] == ["n_eileen"]
    usage = memory.usage("road")["usage"]
    assert usage["rewrite"]["calls"] == 1 and usage["recall"]["calls"] == 1 and usage["total"]["calls"] == 2
    assert usage["rewrite"]["input_tokens"] > 0
