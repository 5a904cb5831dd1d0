"""A fake OpenAI-compatible chat endpoint on loopback, for tests, benchmarks and offline trials.

    with FakeOpenAI() as fake:           # answers every extraction with one event
        profile = ModelProfile(model="fake", base_url=fake.base_url)

A `responder` decides each answer: it gets the request body and returns a response body (dict), or a
`(status, headers, body)` tuple to simulate errors such as 429 with Retry-After.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Responder = Callable[[dict[str, Any]], "dict[str, Any] | tuple[int, dict[str, Any], dict[str, Any] | str]"]


def completion(
    body: dict[str, Any], *, content: str | None = None, tool_args: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An OpenAI chat.completion answering `body` with text or with a call of its first tool."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_args is not None:
        name = body["tools"][0]["function"]["name"]
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(tool_args, ensure_ascii=False)}}]
    prompt_tokens = max(1, len(json.dumps(body.get("messages", []), ensure_ascii=False)) // 4)
    completion_tokens = max(1, len(json.dumps(tool_args if tool_args is not None else content or "")) // 4)
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_args else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def one_event(body: dict[str, Any]) -> dict[str, Any]:
    """Default responder: record one event summarizing the newest reply (first 160 characters); a compression
    batch (maintenance's `answer` tool) gets the start of its children's text as its summary; consolidation keeps
    every new node; a synopsis (small or rolled up) is the start of its material, within the length asked."""
    prompt = next((m["content"] for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
    if isinstance(prompt, list):
        prompt = " ".join(p.get("text", "") for p in prompt if isinstance(p, dict))
    tools = body.get("tools") or []
    params = tools[0]["function"].get("parameters", {}) if tools else {}
    if tools and tools[0]["function"]["name"] == "answer" and "decisions" in params.get("properties", {}):
        new = re.findall(r"^NEW \[([^\]]+)\]", prompt, re.M)  # consolidation: every new node is new information
        return completion(body, tool_args={"decisions": [{"node_id": i, "action": "keep"} for i in new]})
    if tools and tools[0]["function"]["name"] == "answer" and "synops" in prompt and "text" in params.get(
            "properties", {}):
        asked = re.search(r"Length: (\d+)-(\d+)", prompt)
        assert asked is not None, "a synopsis prompt states its length"
        low, high = map(int, asked.groups())
        material = " ".join(prompt.split("characters", 1)[-1].split("\n", 1)[-1].split())
        return completion(body, tool_args={"text": (material[:high - 1].rsplit(" ", 1)[0] + ".").ljust(low, ".")})
    if tools and tools[0]["function"]["name"] == "answer" and "Fold these" in prompt:  # a compression batch
        children = " ".join(prompt.split("Nodes to fold, oldest first:", 1)[-1].split())
        return completion(body, tool_args=dict.fromkeys(params.get("required", []), children[:120] or "folded"))
    newest = prompt.split("## Newest reply", 1)[-1].split("\n", 1)[-1]
    summary = " ".join(newest.split())[:160] or "something happened"
    answer = {"event": [{"summary": summary}]}
    if body.get("tools"):
        return completion(body, tool_args=answer)
    return completion(body, content=json.dumps(answer, ensure_ascii=False))


class FakeOpenAI:
    """A threaded HTTP server on 127.0.0.1 speaking the chat-completions API."""

    def __init__(self, responder: Responder = one_event) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                fake.requests.append(body)
                fake.headers.append(dict(self.headers))
                answer = fake.responder(body)
                status, headers, payload = answer if isinstance(answer, tuple) else (200, {}, answer)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
