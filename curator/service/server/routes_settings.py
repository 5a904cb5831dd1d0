"""Settings and prompts: a chat's own settings (typed overrides of config.yaml, merge-patched), the data directory's
settings (config.yaml), the list of every setting for forms, and the prompt templates with the user's overrides.

The SillyTavern extension's per-chat settings page and the panel both use these routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from curator.api.chat_settings import ChatSettingsPatch, GlobalSettingsPatch, fields
from curator.service.server.deps import ServiceDep, Strict

router = APIRouter(tags=["settings"])


class PromptIn(Strict):
    text: str = Field(max_length=200_000, description="the whole template; its $placeholders must be ones the "
                      "shipped template uses")


@router.get("/chats/{chat_id}/settings")
def get_chat_settings(chat_id: str, service: ServiceDep) -> dict[str, Any]:
    """The chat's own settings (`overrides`) and those it runs with (`effective`: its overrides over config.yaml)."""
    return service.memory.chat_settings(chat_id)


@router.patch("/chats/{chat_id}/settings")
def patch_chat_settings(chat_id: str, body: ChatSettingsPatch, service: ServiceDep) -> dict[str, Any]:
    """Change some of the chat's settings: a merge patch (a value sets it for this chat, null returns it to
    config.yaml's, an object merges). Validated against the result; nothing is stored when it fails."""
    with service.writer(chat_id):
        return service.memory.update_chat_settings(chat_id, body.model_dump(exclude_unset=True, mode="json"))


@router.get("/settings")
def get_settings(service: ServiceDep) -> dict[str, Any]:
    """config.yaml's own data, the settings in effect (profiles without keys: `key_set` says whether each key
    variable is set) and the profile of each task."""
    return service.memory.global_settings()


@router.patch("/settings")
def patch_settings(body: GlobalSettingsPatch, service: ServiceDep) -> dict[str, Any]:
    """Change config.yaml by a merge patch (validated first; the previous file kept as config.yaml.bak). Takes
    effect at once, in every process over the data directory; chats follow unless they set their own."""
    return service.memory.update_settings(body.model_dump(exclude_unset=True, mode="json"))


@router.get("/settings/fields")
def settings_fields() -> dict[str, Any]:
    """Every setting a chat or config.yaml may set: path, type, choices, bounds, default and description."""
    return {"fields": fields()}


@router.get("/prompts")
def list_prompts(service: ServiceDep) -> dict[str, Any]:
    """The prompt templates (and the injection's labels): which are overridden in the data directory's `prompts/`
    folder, and which overrides were written against a shipped text that has changed since."""
    prompts = service.memory.prompts
    return {"folder": str(prompts.folder), "prompts": [prompts.info(n).to_dict() for n in prompts.names()]}


@router.get("/prompts/{name}")
def get_prompt(name: str, service: ServiceDep) -> dict[str, Any]:
    """A template: the text in effect, the shipped text and the diff between them."""
    prompts = service.memory.prompts
    return {**prompts.info(name).to_dict(), "text": prompts.text(name), "shipped": prompts.shipped(name),
            "diff": prompts.diff(name)}


@router.put("/prompts/{name}")
def put_prompt(name: str, body: PromptIn, service: ServiceDep) -> dict[str, Any]:
    """Save the data directory's own version of a template (checked first: it must render with the values the
    shipped one gets). Saving the shipped text removes the override."""
    prompts = service.memory.prompts
    prompts.save(name, body.text)
    return get_prompt(name, service)


@router.delete("/prompts/{name}")
def reset_prompt(name: str, service: ServiceDep) -> dict[str, Any]:
    """Remove the data directory's version of a template: the shipped one is in effect again."""
    service.memory.prompts.reset(name)
    return get_prompt(name, service)
