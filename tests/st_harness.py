"""SillyTavern 1.12.6 in the loop, for `tests/test_sillytavern.py` and `bench/proxy_overhead.py`.

`start_sillytavern` unpacks SillyTavern's source (a test fixture outside the project, see `find_source`) into a
temporary folder, gives it its npm dependencies (installed from the npm registry once, then reused from a cache
folder keyed by its package-lock), writes its config (127.0.0.1 only, a free port, a throwaway data folder, no
auto-updates or downloads) and starts `node server.js`. `Front` plays SillyTavern's web UI against its backend:
it keeps the chat, lays the prompt out as the prompt manager does (names behaviour, post-history instructions,
impersonate / quiet / continue instructions), sends it to `/api/backends/chat-completions/generate` with the
"Custom (OpenAI-compatible)" source, and cleans the reply up as the UI does (stop strings, a leading `Name:`,
`trim_spaces`). `Upstream` is the chat model behind the proxy.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2

VERSION = "1.12.6"
TARBALL = f"sillytavern-{VERSION}.tar.gz"
USER, CHAR = "Alex", "Eileen"
IMPERSONATE = (f"[Write your next reply from the point of view of {USER}, using the chat history so far as a "
               f"guideline for the writing style of {USER}. Don't write as {CHAR} or system. Don't describe "
               f"actions of {CHAR}.]")
SUMMARIZE = ("Ignore previous instructions. Summarize the most important facts and events in the story so far. "
             "If a summary already exists in your memory, use that as a base and expand with new facts. Limit the "
             "summary to 200 words or less. Your response should include nothing but the summary.")
CONTINUE = ("[Continue the following message. Do not include ANY parts of the original message. Use capitalization "
            "and punctuation as if your reply is a part of the original message: {last}]")


def find_source() -> Path | None:
    """SillyTavern's source tarball: $CURATOR_SILLYTAVERN (the tarball or its folder), else `shared/sillytavern/`
    next to the checkout or one level up."""
    here = Path(__file__).resolve().parents[1]
    given = os.environ.get("CURATOR_SILLYTAVERN")
    candidates = [Path(given)] if given else []
    candidates += [here.parent / "shared" / "sillytavern", here.parent.parent / "shared" / "sillytavern"]
    for candidate in candidates:
        path = candidate / TARBALL if candidate.is_dir() else candidate
        if path.is_file():
            return path
    return None


def missing() -> str | None:
    """Why SillyTavern cannot run here, or None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: apt-get install -y nodejs npm)"
    if find_source() is None:
        return (f"SillyTavern's source ({TARBALL}) was not found: set CURATOR_SILLYTAVERN to it, or put it in "
                "../shared/sillytavern/")
    return None


def cache_dir() -> Path:
    root = os.environ.get("CURATOR_SILLYTAVERN_CACHE") or Path.home() / ".cache" / "memory-curator"
    return Path(root) / f"sillytavern-{VERSION}-node_modules"


def _dependencies(folder: Path) -> None:
    """`folder/node_modules`: a link to the cached install when its package-lock matches, else `npm ci` into the
    cache (then linked), or into `folder` itself when the cache cannot be written. One process installs at a time
    (a lock file beside the cache): `.ci/run`'s two passes start at once, and one replacing the cache while the
    other's SillyTavern loads from it broke that one's start (a module missing) on a machine with no cache yet."""
    lock = hashlib.sha256((folder / "package-lock.json").read_bytes()).hexdigest()
    cache = cache_dir()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        guard = open(cache.with_name(cache.name + ".lock"), "w")  # noqa: SIM115 - held until the install is done
    except OSError:  # no cache here: install in place
        _npm_ci(folder)
        return
    with guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not (
            (cache / "stamp").is_file() and (cache / "stamp").read_text() == lock and (cache / "node_modules").is_dir()
        ):
            staging = cache.with_name(cache.name + f".tmp{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            for name in ("package.json", "package-lock.json"):
                shutil.copy(folder / name, staging / name)
            _npm_ci(staging)
            (staging / "stamp").write_text(lock)
            shutil.rmtree(cache, ignore_errors=True)
            staging.rename(cache)
    (folder / "node_modules").symlink_to(cache / "node_modules", target_is_directory=True)


def _npm_ci(folder: Path) -> None:
    subprocess.run(["npm", "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                   cwd=folder, check=True, timeout=900, capture_output=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SillyTavern:
    """A running SillyTavern backend on 127.0.0.1."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 240.0) -> SillyTavern:
        with tarfile.open(find_source()) as tar:
            tar.extractall(self.workdir, filter="data")
        folder = self.workdir / "sillytavern"
        _dependencies(folder)
        config = (folder / "default" / "config.yaml").read_text()
        for old, new in (
            ("dataRoot: ./data", f"dataRoot: {self.workdir / 'data'}"),
            ("port: 8000", f"port: {self.port}"),
            ("listen: false", "listen: false"),
            ("autorun: true", "autorun: false"),
            ("enableExtensionsAutoUpdate: true", "enableExtensionsAutoUpdate: false"),
            ("enableDownloadableTokenizers: true", "enableDownloadableTokenizers: false"),
            ("  disableAutoDownload: false", "  disableAutoDownload: true"),
            ("skipContentCheck: false", "skipContentCheck: true"),
        ):
            assert old in config, old
            config = config.replace(old, new, 1)
        (folder / "config.yaml").write_text(config)
        self.log = open(self.workdir / "sillytavern.log", "wb")
        self.process = subprocess.Popen(["node", "server.js"], cwd=folder, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SillyTavern exited: {self.tail()}")
            try:
                if httpx2.get(self.url + "/csrf-token", timeout=2).status_code == 200:
                    return self
            except httpx2.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"SillyTavern did not start in {timeout:.0f} s: {self.tail()}")

    def tail(self) -> str:
        return (self.workdir / "sillytavern.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if getattr(self, "log", None):
            self.log.close()

    @contextlib.contextmanager
    def session(self):
        """An HTTP session as the web UI holds one: the session cookie and the CSRF token."""
        with httpx2.Client(base_url=self.url, timeout=60) as client:
            client.headers["X-CSRF-Token"] = client.get("/csrf-token").json()["token"]
            yield client


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client that hung up (a proxy timeout test): not news
        pass


class Upstream:
    """The chat model behind the proxy, on loopback. Each generation answers with the next queued text (a list of
    texts for `n` choices); a request with an empty queue answers "...". Streams when asked (`chunk_delay` between
    chunks); `/v1/models` lists one model. Records every request's body and headers. With `tools` (a curator.testing
    responder), a request that offers tools (the memory service's extraction) is answered by it."""

    def __init__(self, delay: float = 0.0, tools=None, chunk_delay: float = 0.0):
        self.queue: list[list[str]] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.delay = delay
        self.tools = tools  # a responder (curator.testing) for requests with tools: memory's own extraction calls
        self.chunk_delay = chunk_delay  # seconds between streamed chunks (a client can stop a stream mid-way)
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(
                        200,
                        "application/json",
                        json.dumps({"object": "list", "data": [{"id": "story-model", "object": "model"}]}),
                    )
                return self._send(404, "application/json", json.dumps({"error": {"message": "not found"}}))

            def do_POST(self):
                try:
                    body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
                except ValueError:
                    body = None
                if not isinstance(body, dict):  # as an OpenAI-compatible server answers a body that is no object
                    return self._send(400, "application/json", json.dumps({"error": {"message": "not an object"}}))
                upstream.requests.append(body)
                upstream.headers.append({k.lower(): v for k, v in self.headers.items()})
                if upstream.tools is not None and body.get("tools"):
                    return self._send(200, "application/json", json.dumps(upstream.tools(body)))
                if upstream.delay:
                    time.sleep(upstream.delay)
                texts = upstream.queue.pop(0) if upstream.queue else ["..."]
                if not body.get("stream"):
                    answer = {
                        "id": "up",
                        "object": "chat.completion",
                        "created": 1,
                        "model": body.get("model"),
                        "choices": [
                            {"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": t}}
                            for i, t in enumerate(texts)
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                    return self._send(200, "application/json", json.dumps(answer))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                text = texts[0]
                for piece in [text[i:i + 9] for i in range(0, len(text), 9)] + [None]:
                    chunk = {"id": "up", "object": "chat.completion.chunk", "created": 1, "model": body.get("model"),
                             "choices": [{"index": 0, "delta": {"content": piece} if piece else {},
                                          "finish_reason": None if piece else "stop"}]}
                    try:
                        self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                    except OSError:
                        return  # the client stopped the stream
                    time.sleep(upstream.chunk_delay)
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _chunk(self, data: bytes):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _send(self, status, kind, data):
                raw = data.encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def settle(base_url: str, memory, chat: str, timeout: float = 120.0, quiet: float = 0.2,
           failed_before: int = 0) -> None:
    """Wait until the service's background work for `chat` is done: no job queued or running, no floor due for
    extraction, and the stored chat unchanged for `quiet` seconds (a reply is stored just after its response).
    More than `failed_before` failed jobs of the chat is an error."""
    from curator.extract.extractor import due_floors

    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    with httpx2.Client(base_url=base_url, timeout=30) as http:
        while time.monotonic() < deadline:
            jobs = http.get("/api/v1/jobs", params={"chat": chat}).json()["jobs"]
            assert sum(j["state"] == "failed" for j in jobs) <= failed_before, jobs
            idle = all(j["state"] not in ("queued", "running") for j in jobs)
            known = memory.store.has_chat(chat)
            state = (memory.store.messages_version(chat), len(memory.store.commits(chat))) if known else None
            if state != last:
                last, since = state, time.monotonic()
            elif idle and (not known or not due_floors(memory.store, chat, memory.settings)) \
                    and time.monotonic() - since >= quiet:
                return
            time.sleep(0.02)
    raise AssertionError(f"chat {chat!r} did not settle in {timeout:.0f} s")


def sse_text(raw: str) -> str:
    """The text of a chat.completion.chunk stream."""
    text = []
    for line in raw.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            try:
                text.append(json.loads(line[5:])["choices"][0]["delta"].get("content") or "")
            except (ValueError, KeyError, IndexError):
                pass
    return "".join(text)


class Front:
    """SillyTavern's web UI for one chat, reduced to what reaches the backend and what it keeps of a reply."""

    def __init__(self, session: httpx2.Client, custom_url: str, headers: dict | None = None):
        self.session, self.custom_url = session, custom_url
        self.include_headers = "".join(f"{k}: {v}\n" for k, v in (headers or {}).items())
        self.chat: list[dict] = []  # {"is_user", "name", "mes", "swipes"}
        self.names = "none"  # none | default | completion | content (SillyTavern's names behaviour)
        self.trim_spaces = True
        self.stops = [f"\n{USER}:"]  # names as stop strings (the default)
        self.max_history: int | None = None  # messages that fit the context
        self.last_status = 0

    # the prompt, as the prompt manager lays it out for a chat-completion source
    def prompt(self, control: str | None = None, nudge: str | None = None) -> list[dict]:
        messages = [{"role": "system", "content": f"Write {CHAR}'s next reply in a fictional chat between {CHAR} "
                                                  f"and {USER}."},
                    {"role": "system", "content": "[Start a new Chat]"},
                    {"role": "system", "name": "example_user", "content": "Where are we?"},
                    {"role": "system", "name": "example_assistant", "content": "On the old road, by the bridge."},
                    {"role": "system", "content": "[Start a new Chat]"}]
        history = self.chat if self.max_history is None else self.chat[-self.max_history:]
        for m in history:
            message = {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]}
            if self.names == "content":
                message["content"] = f"{m['name']}: {m['mes']}"
            elif self.names == "completion":
                message["name"] = m["name"]
            messages.append(message)
        if nudge:
            messages.append({"role": "system", "content": nudge})
        messages.append({"role": "system", "content": f"[Stay in character as {CHAR}; never write for {USER}.]"})
        if control:
            messages.append({"role": "system", "content": control})
        return messages

    def generate(self, messages: list[dict], stream: bool = False, n: int = 1) -> list[str]:
        body = {
            "messages": messages,
            "model": "story-model",
            "temperature": 0.9,
            "frequency_penalty": 0,
            "presence_penalty": 0,
            "top_p": 1,
            "max_tokens": 300,
            "stream": stream,
            "logit_bias": {"1234": -5},
            "stop": self.stops,
            "chat_completion_source": "custom",
            "n": n,
            "user_name": USER,
            "char_name": CHAR,
            "group_names": [],
            "custom_url": self.custom_url,
            "custom_include_body": "min_p: 0.05\nrepetition_penalty: 1.1\n",
            "custom_exclude_body": "",
            "custom_include_headers": self.include_headers,
            "top_k": 40,
            "min_p": 0.05,
            "repetition_penalty": 1.1,
            "seed": 7,
        }
        response = self.session.post("/api/backends/chat-completions/generate", json=body)
        self.last_status = response.status_code
        if stream:
            return [sse_text(response.text)]
        data = response.json()
        if "choices" not in data:
            raise AssertionError(f"SillyTavern answered {response.status_code}: {data}")
        return [c["message"]["content"] for c in data["choices"]]

    def clean(self, text: str) -> str:
        """What the UI keeps of a reply: cut at a stop string, no leading `Char:`, trimmed."""
        for stop in self.stops:
            if stop in text:
                text = text[:text.index(stop)]
        text = "\n".join(line.rstrip() for line in text.split("\n"))
        if text.lstrip().startswith(f"{CHAR}:"):
            text = text.lstrip()[len(CHAR) + 1:]
        return text.strip() if self.trim_spaces else text

    # what the user does
    def send(self, text: str, stream: bool = False) -> str:
        self.chat.append({"is_user": True, "name": USER, "mes": text, "swipes": [text]})
        return self.reply(stream)

    def reply(self, stream: bool = False) -> str:
        text = self.clean(self.generate(self.prompt(), stream)[0])
        self.chat.append({"is_user": False, "name": CHAR, "mes": text, "swipes": [text]})
        return text

    def stopped(self, text: str, after: int) -> str:
        """The user sends `text` and presses Stop once `after` characters of the streamed reply have arrived: the
        stream is cut (SillyTavern's backend aborts its request to the proxy) and the UI keeps what it showed."""
        self.chat.append({"is_user": True, "name": USER, "mes": text, "swipes": [text]})
        body = {"messages": self.prompt(), "model": "story-model", "stream": True, "stop": self.stops,
                "chat_completion_source": "custom", "custom_url": self.custom_url,
                "custom_include_headers": self.include_headers, "user_name": USER, "char_name": CHAR}
        shown = ""
        with self.session.stream("POST", "/api/backends/chat-completions/generate", json=body) as response:
            for line in response.iter_lines():
                shown += sse_text(line + "\n")
                if len(shown) >= after:
                    break
        kept = self.clean(shown)
        self.chat.append({"is_user": False, "name": CHAR, "mes": kept, "swipes": [kept]})
        return kept

    def regenerate(self, stream: bool = False) -> str:
        old = self.chat.pop()
        text = self.clean(self.generate(self.prompt(), stream)[0])
        self.chat.append({"is_user": False, "name": CHAR, "mes": text, "swipes": [*old["swipes"], text]})
        return text

    def swipe_to(self, index: int) -> None:
        self.chat[-1]["mes"] = self.chat[-1]["swipes"][index]

    def several(self, count: int, pick: int) -> list[str]:
        texts = [self.clean(t) for t in self.generate(self.prompt(), n=count)]
        self.chat.append({"is_user": False, "name": CHAR, "mes": texts[pick], "swipes": texts})
        return texts

    def impersonate(self) -> str:
        return self.clean(self.generate(self.prompt(control=IMPERSONATE))[0])  # goes to the input box

    def quiet(self, prompt: str = SUMMARIZE) -> str:
        return self.generate(self.prompt(control=prompt))[0].strip()  # goes to the extension

    def continue_(self) -> str:
        last = self.chat[-1]
        added = self.clean(self.generate(self.prompt(nudge=CONTINUE.format(last=last["mes"])))[0])
        last["mes"] = f"{last['mes']} {added}"  # the continue postfix: a space
        last["swipes"][-1] = last["mes"]
        return added
