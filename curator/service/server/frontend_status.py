"""Whether a chat's extraction can run, and with which model, in words a front end shows its user as they are.

A front end (SillyTavern's extension) asks with every open and event, so a chat whose memory is not being written
says so where the user is, not only in the service's log: no model configured or named, a model that keeps
failing (wrong URL, key, a server that is down), or extraction turned off for the chat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from curator.errors import CuratorError
from curator.llm.usage import extraction_failures

if TYPE_CHECKING:
    from curator.settings import Task
    from curator.service.server.state import Service

_TASKS: dict[str, tuple[Task, ...]] = {"extractor": ("extract",), "curator": ("curate",), "both": ("extract", "curate"),
                                       "off": ()}
NO_MODEL_HINT = ("Configure one for the service (config.yaml `profiles`, or CURATOR_MODEL / CURATOR_BASE_URL), or "
                 "let the front end name one: in SillyTavern, Extensions > Memory Curator > Extraction model "
                 "(SillyTavern's own connection, when it is OpenAI-compatible, or a base URL and model).")


def extraction_status(service: Service, chat_id: str) -> dict[str, Any]:
    """{state: ok | off | no_model | failing | retrying, message, hint, model, channel, failed_steps}."""
    memory = service.memory
    chat = memory.chat(chat_id)
    status: dict[str, Any] = {"state": "ok", "message": "", "hint": "", "model": None, "channel": None,
                              "failed_steps": 0}
    try:
        settings = memory.settings.for_chat(chat.settings)
    except CuratorError as exc:
        return {**status, "state": "no_model", "message": str(exc), "hint": exc.hint or NO_MODEL_HINT}
    channel = status["channel"] = settings.extraction.channel
    if channel == "off":
        return {**status, "state": "off", "message": "extraction is off for this chat (channel: off): nothing new "
                "is remembered", "hint": "Turn it on in the chat's memory settings."}
    for task in _TASKS[channel]:
        given = getattr(service.models, task, None)
        if given is not None:
            status["model"] = {"model": getattr(given, "model_name", "given"), "source": "service"}
            continue
        try:
            profile = settings.profile_for(task)
        except CuratorError as exc:
            return {**status, "state": "no_model", "message": f"this chat's memory is not being written: {exc}",
                    "hint": NO_MODEL_HINT}
        own = "default" not in memory.settings.profiles and settings.tasks.get(task, "default") == "default"
        status["model"] = {"model": profile.model, "base_url": profile.base_url, "source": "chat" if own else "config"}
    failures = extraction_failures(memory.store, chat_id)
    status["failed_steps"] = len(failures)
    job = next((j for j in service.jobs.list(chat_id, 5) if j["kind"] in ("extract", "rebuild")), None)
    if job is not None and job["state"] in ("queued", "running"):
        if failures:
            status.update(state="retrying", message=f"extraction of floor {failures[-1]['floor']} failed before "
                          f"({failures[-1]['reason']}); it is being tried again")
        return status
    if failures:
        last = failures[-1]
        status.update(state="failing", message=f"extraction of floor {last['floor']} failed "
                      f"({last['attempts']} attempt(s)): {last['reason']}",
                      hint="Check the extraction model (its URL, key and name); the floor is tried again with "
                           "the next reply, or from the memory panel (Operations > Extract now).")
    elif job is not None and job["state"] == "failed":
        status.update(state="failing", message=f"the last extraction job failed: {job.get('error')}",
                      hint="Check the extraction model; the job runs again with the next reply.")
    return status


def model_update(service: Service, chat_id: str, model: dict[str, Any]) -> bool:
    """Keep the model the front end names in the chat's settings (`model`); True when it changed."""
    chat = service.memory.chat(chat_id)
    if chat.settings.get("model") == model:
        return False
    service.memory.settings.for_chat({"model": model})  # a key variable it may not use: refused, nothing stored
    service.memory.store.set_settings(chat_id, {**chat.settings, "model": model})
    return True
