"""LLM access: models built from profiles, with retries in one layer (tenacity, in the HTTP transport, honouring
Retry-After; the SDK's own retries are off), a requests-per-minute limit, and a record of every call."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx2
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.models.wrapper import WrapperModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from curator.errors import MissingExtra
from curator.llm.records import CallRecord, LLMTrace, Usage  # noqa: F401 - LLMTrace and Usage re-exported
from curator.llm.tls import shared_ssl_context
from curator.settings import ModelProfile

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
Sleep = Callable[[float], Awaitable[None]]


# ---- retries: one layer, in the HTTP transport ------------------------------------------------------------
def retry_after_seconds(headers: httpx2.Headers) -> float | None:
    """The server's requested wait, from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if value := headers.get("retry-after-ms"):
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())


class RetryingTransport(httpx2.AsyncBaseTransport):
    """Retries 408/409/429/5xx answers and timeouts/network errors with tenacity, waiting what Retry-After asks
    (capped) or backing off exponentially, within a number of attempts and a total time. When retries run out
    on an error answer, that answer is returned, so the SDK reports the real status and body."""

    def __init__(self, max_attempts: int = 4, max_total_seconds: float = 180.0, max_wait: float = 60.0,
                 wrapped: httpx2.AsyncBaseTransport | None = None, sleep: Sleep = asyncio.sleep) -> None:
        if wrapped is None:  # one SSL context per process: making one costs ~17 ms CPU (see curator/llm/tls.py)
            wrapped = httpx2.AsyncHTTPTransport(verify=shared_ssl_context())
        self.wrapped = wrapped
        self.max_attempts, self.max_total_seconds, self.max_wait = max_attempts, max_total_seconds, max_wait
        self.sleep = sleep
        self._backoff = wait_exponential(multiplier=0.5, min=0.5, max=max_wait)

    def _wait(self, state: RetryCallState) -> float:
        outcome = state.outcome
        if outcome is not None and not outcome.failed:
            asked = retry_after_seconds(outcome.result().headers)
            if asked is not None:
                return min(asked, self.max_wait)
        return self._backoff(state)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        async def close_before_retry(state: RetryCallState) -> None:
            if state.outcome is not None and not state.outcome.failed:
                response = state.outcome.result()
                await response.aread()
                await response.aclose()

        retrying = AsyncRetrying(
            retry=retry_if_exception_type((httpx2.TimeoutException, httpx2.NetworkError))
            | retry_if_result(lambda r: r.status_code in RETRY_STATUSES),
            wait=self._wait,
            stop=stop_after_attempt(self.max_attempts) | stop_after_delay(self.max_total_seconds),
            sleep=self.sleep,
            before_sleep=close_before_retry,
            retry_error_callback=_last_answer,  # out of retries: hand back the last answer
            reraise=True,
        )
        response: httpx2.Response = await retrying(self.wrapped.handle_async_request, request)
        return response

    async def aclose(self) -> None:
        await self.wrapped.aclose()


# ---- the model ------------------------------------------------------------------------------------------
class RateLimiter:
    """At most `rpm` requests per minute (0 = unlimited), spaced evenly. Shared by every task and thread that uses
    one profile (`curator.llm.access.limiter_for`): each request reserves its slot under a thread lock, then waits
    for it on its own loop, so one limiter serves any number of threads and event loops."""

    def __init__(self, rpm: int, clock: Callable[[], float] = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.interval = 60.0 / rpm if rpm > 0 else 0.0
        self.clock, self.sleep = clock, sleep
        self._next = 0.0
        self._lock = threading.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = self.clock()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            await self.sleep(start - now)


def _last_answer(state: RetryCallState) -> httpx2.Response:
    if state.outcome is None:  # tenacity calls it after an attempt, never before
        raise RuntimeError("no attempt was made")
    response: httpx2.Response = state.outcome.result()
    return response


class MeteredModel(WrapperModel):
    """Wraps a model: waits for the rate limiter, then times and records every request, failed or not."""

    def __init__(self, wrapped: Model, task: str, sink: Callable[[CallRecord], None],
                 limiter: RateLimiter | None = None) -> None:
        super().__init__(wrapped)
        self.task, self.sink, self.limiter = task, sink, limiter or RateLimiter(0)

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        await self.limiter.wait()
        started = time.perf_counter()
        try:
            response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        except Exception as exc:
            self.sink(CallRecord(self.task, self.wrapped.model_name, latency_ms=_ms(started), ok=False,
                                 error=f"{type(exc).__name__}: {exc}"[:500]))
            raise
        usage = response.usage
        self.sink(CallRecord(self.task, self.wrapped.model_name, usage.input_tokens or 0, usage.output_tokens or 0,
                             _ms(started)))
        return response


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def build_model(profile: ModelProfile, transport: httpx2.AsyncBaseTransport | None = None,
                sleep: Sleep = asyncio.sleep) -> Model:
    """The pydantic-ai model for a profile. Only the transport retries; the SDK's own retries are off."""
    if profile.provider == "cohere":
        try:
            from cohere import AsyncClientV2
            from pydantic_ai.models.cohere import CohereModel
            from pydantic_ai.providers.cohere import CohereProvider
        except ImportError as exc:
            raise MissingExtra("cohere", "a Cohere model profile") from exc

        # The Cohere SDK speaks httpx (not httpx2) and keeps its own retry layer; ours stays out of its way.
        if profile.base_url:
            cohere_client = AsyncClientV2(api_key=profile.api_key(), base_url=profile.base_url, timeout=profile.timeout)
            return CohereModel(profile.model, provider=CohereProvider(cohere_client=cohere_client))
        return CohereModel(profile.model, provider=CohereProvider(api_key=profile.api_key()))

    from openai import AsyncOpenAI
    from pydantic_ai.providers.openai import OpenAIProvider

    from curator.llm.schema_cache import SchemaCachingChatModel

    retrying = RetryingTransport(profile.max_attempts, profile.max_total_seconds, wrapped=transport, sleep=sleep)
    http_client = httpx2.AsyncClient(transport=retrying, timeout=profile.timeout)
    client = AsyncOpenAI(base_url=profile.base_url, api_key=profile.api_key(), max_retries=0,
                         timeout=profile.timeout, http_client=http_client)
    return SchemaCachingChatModel(profile.model, provider=OpenAIProvider(openai_client=client))


def model_settings(profile: ModelProfile) -> ModelSettings:
    settings: ModelSettings = {}  # the per-request timeout lives in the client the profile builds
    if profile.temperature is not None:
        settings["temperature"] = profile.temperature
    if profile.max_tokens is not None:
        settings["max_tokens"] = profile.max_tokens
    return settings
