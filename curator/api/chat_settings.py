"""A chat's own settings: typed overrides of the data directory's (`config.yaml`), section by section.

What a chat does not set follows `config.yaml`, so a change there reaches every chat that did not choose otherwise.
The overrides are stored with the chat (`chats.settings_json`); `Settings.for_chat` applies them. Changes are
merge patches (RFC 7396): a value sets, `null` removes the chat's override (back to the global value), a nested
object merges. Every change is validated against the result, so a chat never holds settings that fail later.

The patch models are generated from the settings models themselves (every field optional, same types, bounds and
descriptions), so the HTTP API documents them in OpenAPI and a new setting is editable everywhere at once.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from curator.api.merge_patch import merge_patch
from curator.errors import CuratorError
from curator.maintenance_settings import MaintenanceSettings, PlannerSettings
from curator.settings import TASKS, ExtractionSettings, ModelProfile, RecallSettings, Settings, Task

# The sections a chat may override, and the model of each.
SECTIONS: dict[str, type[BaseModel]] = {"extraction": ExtractionSettings, "recall": RecallSettings,
                                        "maintenance": MaintenanceSettings, "planner": PlannerSettings}
_PARTIALS: dict[type[BaseModel], type[BaseModel]] = {}


def partial(model: type[BaseModel]) -> type[BaseModel]:
    """`model` with every field optional (default None), nested settings models partial too; unknown keys refused."""
    found = _PARTIALS.get(model)
    if found is not None:
        return found
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation  # a type form: a class, a union, an Annotated[...]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            annotation = partial(annotation)
        elif info.metadata:
            annotation = Annotated[(annotation, *info.metadata)]  # bounds (ge, le, ...) kept
        fields[name] = (annotation | None, Field(default=None, description=info.description))
    found = create_model(f"{model.__name__}Patch", __config__=ConfigDict(extra="forbid", strict=True),
                         __doc__=f"Overrides of {model.__name__}: only what is given changes; null removes an "
                                 "override.", **fields)
    _PARTIALS[model] = found
    return found


ExtractionPatch = partial(ExtractionSettings)
RecallPatch = partial(RecallSettings)
MaintenancePatch = partial(MaintenanceSettings)
PlannerPatch = partial(PlannerSettings)


ModelProfilePatch = partial(ModelProfile)


class ChatSettingsPatch(BaseModel):
    """A change of a chat's own settings. Each section overrides `config.yaml`'s; `tasks` names, per task, the
    model profile (of `config.yaml`) the chat uses; `model` is the chat's own model, the one its front end names,
    used when config.yaml names none (its key variable must be one the service allows: `chat_model_keys`). Strict,
    as every request body (`service/server/deps.Strict`): `0` is no `false`, `"7"` no 7."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: ModelProfilePatch | None = None  # type: ignore[valid-type]
    extraction: ExtractionPatch | None = None  # type: ignore[valid-type]
    recall: RecallPatch | None = None  # type: ignore[valid-type]
    maintenance: MaintenancePatch | None = None  # type: ignore[valid-type]
    planner: PlannerPatch | None = None  # type: ignore[valid-type]
    tasks: dict[Task, str | None] | None = Field(default=None, description="task -> profile name (null: the "
                                                 "global choice)")


class GlobalSettingsPatch(BaseModel):
    """A change of the data directory's settings (config.yaml), as a merge patch: profiles by name (null removes
    one), the profile per task, and the defaults every chat follows unless it sets its own. The embedder, vector
    server and store are read at start: edit config.yaml and restart for those."""

    model_config = ConfigDict(extra="forbid", strict=True)
    profiles: dict[str, ModelProfilePatch | None] | None = None  # type: ignore[valid-type]
    tasks: dict[Task, str | None] | None = None
    extraction: ExtractionPatch | None = None  # type: ignore[valid-type]
    recall: RecallPatch | None = None  # type: ignore[valid-type]
    maintenance: MaintenancePatch | None = None  # type: ignore[valid-type]
    planner: PlannerPatch | None = None  # type: ignore[valid-type]


def patch_dict(patch: ChatSettingsPatch | dict[str, Any]) -> dict[str, Any]:
    """The fields a patch gives (explicit nulls kept: they remove overrides), validated."""
    if isinstance(patch, dict):
        try:
            patch = ChatSettingsPatch.model_validate(patch)
        except ValidationError as exc:
            raise _invalid(exc) from None
    return patch.model_dump(exclude_unset=True, mode="json")


def apply(settings: Settings, overrides: dict[str, Any], patch: ChatSettingsPatch | dict[str, Any] | None = None,
          replace: bool = False) -> dict[str, Any]:
    """The chat's overrides after `patch` (or replaced by it), checked against `settings` (the global ones):
    raises CuratorError naming the setting when the result would not be valid. Keys this module does not own
    (another front end's, e.g. a chat's own `model`) are kept as they are."""
    given = patch_dict(patch) if patch is not None else {}
    mine = {k: v for k, v in overrides.items() if k in (*SECTIONS, "tasks", "model")}
    others = {k: v for k, v in overrides.items() if k not in mine}
    result = merge_patch({} if replace else mine, given)
    for name in (*SECTIONS, "tasks", "model"):
        if name in result and not result[name]:
            del result[name]
    for task, profile in (result.get("tasks") or {}).items():
        if profile not in settings.profiles:
            known = ", ".join(settings.profiles) or "none"
            raise CuratorError(f"settings.tasks.{task}: no model profile {profile!r} (profiles: {known})",
                               "Name a profile of config.yaml, or add the profile first (global settings).")
    effective(settings, result)  # raises on an invalid result
    return {**others, **result}


def effective(settings: Settings, overrides: dict[str, Any]) -> dict[str, Any]:
    """The settings a chat runs with, per section (its overrides over the global ones)."""
    try:
        chat = settings.for_chat(overrides)
    except CuratorError:
        raise
    return {name: getattr(chat, name).model_dump(mode="json") for name in SECTIONS} | {
        "tasks": {task: chat.tasks.get(task, "default") for task in TASKS}}


def _invalid(exc: ValidationError) -> CuratorError:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return CuratorError(f"settings.{where}: {err['msg']}",
                        "`curator settings show` (or the panel's Settings tab) lists the settings.")


def fields() -> list[dict[str, Any]]:
    """Every setting a chat (or config.yaml) may set, flat, for forms: path, type, choices, bounds, default,
    description. Nested settings models are walked; other objects (a rerank profile) are `object`."""
    out: list[dict[str, Any]] = []
    for section, model in SECTIONS.items():
        _walk(model, section, model(), out)
    return out


def _walk(model: type[BaseModel], prefix: str, default: BaseModel, out: list[dict[str, Any]]) -> None:
    for name, info in model.model_fields.items():
        path = f"{prefix}.{name}"
        value = getattr(default, name)
        annotation: Any = info.annotation  # a type form: a class, a union, an Annotated[...]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            _walk(annotation, path, value, out)
            continue
        entry: dict[str, Any] = {"path": path, "section": prefix.split(".")[0], "type": _kind(annotation),
                                 "default": _json(value), "description": info.description or ""}
        choices = _choices(annotation)
        if choices:
            entry["choices"] = choices
        for bound in info.metadata:
            for key in ("ge", "le", "gt", "lt"):
                if getattr(bound, key, None) is not None:
                    entry[key] = getattr(bound, key)
        entry["nullable"] = type(None) in get_args(annotation)
        out.append(entry)


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return list(value) if isinstance(value, tuple) else value


def _choices(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is not None and str(get_origin(annotation)).endswith("Literal"):
        return list(get_args(annotation))
    for arg in get_args(annotation):
        found = _choices(arg)
        if found:
            return found
    return None


def _kind(annotation: Any) -> str:
    args = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    if _choices(annotation):
        return "choice"
    first = args[0] if get_origin(annotation) is not tuple else annotation
    if get_origin(first) is tuple or first is tuple:
        return "list"
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(first, "object")
