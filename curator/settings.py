"""Settings: model profiles per task and extraction settings, from `<data>/config.yaml`, the environment and
per-chat overrides. API keys are never part of settings: a profile names the environment variable that
holds its key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, ValidationError

from curator.vectors.profile import EmbeddingProfile  # not the embedders (numpy): settings load quickly
from curator.errors import CuratorError, NoModelProfile
from curator.maintenance_settings import MaintenanceSettings, PlannerSettings

CONFIG_FILENAME = "config.yaml"
CHAT_MODEL_KEY = "CURATOR_CHAT_API_KEY"  # the key a chat's own model is sent, unless it names an allowed other
Task = Literal["extract", "curate", "recall", "rewrite", "summarize", "maintain", "plan"]
TASKS: tuple[Task, ...] = ("extract", "curate", "recall", "rewrite", "summarize", "maintain", "plan")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelProfile(_Strict):
    """One model endpoint. OpenAI-compatible servers (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, LM Studio)
    use provider `openai` with their `base_url`; Cohere uses provider `cohere`."""

    provider: Literal["openai", "cohere"] = "openai"
    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"  # the variable that holds the key; the key itself is never stored
    temperature: float | None = Field(default=0.2, ge=0, le=2)
    max_tokens: int | None = Field(default=2048, ge=1)
    context_tokens: int = Field(default=32_000, ge=2048)  # the model's context: a prompt's floors are cut to fit it
    timeout: float = Field(default=60.0, gt=0)  # seconds per request
    rpm: int = Field(default=0, ge=0)  # requests per minute, 0 = no limit
    max_attempts: int = Field(default=4, ge=1, le=20)  # per request, counting the first
    max_total_seconds: float = Field(default=180.0, gt=0)  # for one request with all its retries
    output_mode: Literal["tool", "json"] = "tool"  # json: for local servers without tool calling

    def api_key(self) -> str:
        key = os.environ.get(self.api_key_env, "")
        if not key and self.base_url is None:
            raise CuratorError(f"no API key: ${self.api_key_env} is not set",
                               f"Export {self.api_key_env}=... or point the profile at a local server (base_url).")
        return key or "not-needed"  # local servers accept any key


def writers_of(channel: str) -> tuple[str, ...]:
    """The writers an `extraction.channel` runs, in order (`curator/extract/channel.py`)."""
    return {"extractor": ("extractor",), "curator": ("curator",), "both": ("extractor", "curator")}.get(channel, ())


class ExtractionSettings(_Strict):
    extract_every: int = Field(default=1, ge=1, description="extract every N assistant replies")
    context_turns: int = Field(default=2, ge=0, description="earlier turns shown to the extractor as context")
    language: str = Field(default="auto", description='the language memory is written in ("auto": the chat\'s)')
    output_retries: int = Field(default=2, ge=0, description="invalid output goes back to the model this many times")
    max_known_entities: int = Field(default=200, ge=0, description="known entities listed in the extraction prompt")
    # Who writes memory after a reply: the built-in extractor, the memory_curator agent, or both (the curator
    # then runs second and sees what the extractor wrote).
    channel: Literal["extractor", "curator", "both", "off"] = Field(
        default="extractor", description="who writes memory after each reply: the extractor, the curator agent, "
        "both (the curator second) or nobody")
    curator_max_requests: int = Field(default=16, ge=1, le=100, description="model requests per curator run at most")
    upstream_fallback: bool = Field(default=True, description="with no extraction model configured, the proxy's "
                                    "upstream model (the one the front end asks for) extracts")


class RerankProfile(_Strict):
    """A cross-encoder rerank service: Cohere's rerank API, or a TEI/Jina-style HTTP endpoint."""

    provider: Literal["cohere", "http"] = "cohere"
    model: str = "rerank-v3.5"
    url: str | None = None  # for provider http: POST {query, texts} -> [{index, score}]
    api_key_env: str = "CO_API_KEY"
    timeout: float = Field(default=20.0, gt=0)


class RecallSettings(_Strict):
    mode: Literal["hybrid", "rag", "llm"] = Field(
        default="hybrid", description="hybrid: BM25 + vectors, no LLM call; rag: vector top-K (optional rewrite "
        "and rerank); llm: the model picks (falls back to hybrid)")
    top_k: int = Field(default=20, ge=1, le=500, description="vector candidates")
    max_results: int = Field(default=15, ge=1, le=200, description="nodes in the recalled block at most")
    budget_tokens: int = Field(default=1500, ge=50, description="tokens of the injection, both blocks together")
    # The cap of an always-inject type whose schema sets no `max_per_type` (0): its highest summaries first, then
    # the newest; the rest competes in recall. 0 = no cap (the persistent share of the budget still applies).
    max_per_type: int = Field(default=8, ge=0, description="always-injected nodes per type when the schema sets "
                              "no cap (0: no cap); the rest competes in recall")
    # The recall query from the recent turns (curator/recall/query.py): weights of the message answered, the reply
    # before it and the user message before that (ST-BME's 0.7 / 0.2 / 0.1); 0 leaves a turn out.
    turn_weights: tuple[NonNegativeFloat, NonNegativeFloat, NonNegativeFloat] = Field(
        default=(0.7, 0.2, 0.1), description="query weights of the message answered, the reply before it and "
        "the user message before that")
    exclude_recent_floors: int = Field(default=0, ge=0, description="leave out what the last N floors made (the "
                                       "model still sees them verbatim)")
    expand: bool = Field(default=True, description="hybrid: one-hop graph expansion")
    rewrite: bool = Field(default=False, description="rag: one LLM call turns the recent turns into a search "
                          "sentence")
    rerank: RerankProfile | None = Field(default=None, description="rag: a cross-encoder rerank service (falls "
                                         "back to vector order)")
    llm_rerank: bool = Field(default=False, description="hybrid: the LLM picks at most 8 of the best 30 (falls "
                             "back on any failure)")
    position: str = Field(default="at_depth", description="where the injection goes (proxy: at_depth)")
    depth: int = Field(default=9999, description="messages from the end at which the injection goes")
    role: Literal["system", "user", "assistant"] = Field(default="system", description="the injection's role")
    history_floors: int = Field(default=0, ge=0, description="proxy: forward only the last K floors plus memory "
                                "(0: all)")
    speaker: str | None = Field(default=None, description="who speaks next (a character's name); default: the "
                                "newest assistant message's name (in a group chat: none, see knowledge)")
    knowledge: Literal["auto", "label", "hide"] = Field(
        default="auto", description="memories only others know (and others' points of view), for the speaker: "
        "shown apart and labelled (label), left out (hide); auto: left out in group chats (two or more characters "
        "reply), labelled otherwise")


class HistorySettings(_Strict):
    """The trash of the commit log (curator/store/trash.py) and the guards before reverting memory."""

    keep_days: float = Field(default=30.0, ge=0)  # reverted batches older than this are dropped (0 = no limit)
    keep_batches: int = Field(default=200, ge=0)  # ... and those beyond the newest N of a chat (0 = no limit)
    # a rollback or sync reverting more commits than this asks first on a terminal (CLI) or needs
    # `allow_rollback: true` (HTTP sync)
    ask_above: int = Field(default=3, ge=0)


class Settings(_Strict):
    profiles: dict[str, ModelProfile] = {}
    tasks: dict[Task, str] = {}  # task -> profile name; a task without one uses "default"
    extraction: ExtractionSettings = ExtractionSettings()
    recall: RecallSettings = RecallSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    history: HistorySettings = HistorySettings()
    planner: PlannerSettings = PlannerSettings()
    embedding: EmbeddingProfile = EmbeddingProfile()
    vectors_url: str | None = None  # a Chroma server (http://host:port); default: embedded, under the data dir
    store: str | None = None  # a PostgreSQL URL for the store (read by curator.store.location); default: SQLite
    # The key variables a chat's own model (named by a front end, `model` in its settings) may use. A front end
    # names a URL; it must not be able to send any key this machine holds there. `serve --upstream-key-env` adds
    # its variable (the proxy's chats extract with their upstream model).
    chat_model_keys: tuple[str, ...] = (CHAT_MODEL_KEY,)

    def profile_for(self, task: Task) -> ModelProfile:
        name = self.tasks.get(task, "default")
        if name not in self.profiles:
            raise NoModelProfile(name, task)
        return self.profiles[name]

    def for_chat(self, chat_settings: dict[str, Any]) -> Settings:
        """These settings with a chat's own overrides applied (`curator/api/chat_settings.py`): its extraction,
        recall and maintenance sections, the model profile it names per task, and its own model (`model`: the one
        its front end names, e.g. the SillyTavern extension or the proxy's upstream) as the `default` profile when
        the configuration has none."""
        update: dict[str, Any] = {}
        own_model = chat_settings.get("model")
        if own_model and "default" not in self.profiles:
            update["profiles"] = {**self.profiles, "default": self._chat_model(own_model)}
        if chat_settings.get("tasks"):
            update["tasks"] = {**self.tasks, **{k: v for k, v in chat_settings["tasks"].items() if v}}
        for name, model in (("extraction", ExtractionSettings), ("maintenance", MaintenanceSettings),
                            ("recall", RecallSettings), ("planner", PlannerSettings)):
            overrides = chat_settings.get(name) or {}
            if not overrides:
                continue
            try:
                update[name] = model.model_validate(_deep_merge(getattr(self, name).model_dump(), overrides))
            except ValidationError as exc:
                raise CuratorError(f"invalid {name} settings for this chat: {exc.errors()[0]['msg']}") from None
        return self.model_copy(update=update) if update else self


    def _chat_model(self, own: dict[str, Any]) -> ModelProfile:
        """A chat's own model as a profile: its key variable must be one `chat_model_keys` allows."""
        if not isinstance(own, dict):
            raise CuratorError(f"invalid model for this chat: {own!r} is not {{base_url, model, api_key_env}}")
        key_env = own.get("api_key_env") or CHAT_MODEL_KEY
        if key_env not in self.chat_model_keys:
            raise CuratorError(f"this chat's model names the key variable {key_env!r}, which the service does not "
                               "send to models a front end names",
                               f"Use {CHAT_MODEL_KEY}, or list the variable under `chat_model_keys` in config.yaml.")
        try:
            return ModelProfile.model_validate({**own, "api_key_env": key_env})
        except ValidationError as exc:
            err = exc.errors()[0]
            raise CuratorError(f"invalid model for this chat: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        merged[key] = _deep_merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) \
            else value
    return merged


def load_settings(data_dir: Path) -> Settings:
    """Settings from `<data_dir>/config.yaml` (optional), then a `default` profile from CURATOR_MODEL /
    CURATOR_BASE_URL / CURATOR_API_KEY when the file defines none."""
    path = data_dir / CONFIG_FILENAME
    data: dict[str, Any] = {}
    if path.exists():
        import yaml  # here, not at import: most data directories have no config.yaml

        from curator.textfile import load_yaml

        try:
            data = load_yaml(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise CuratorError(f"{path}: not valid YAML ({exc})") from None
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise CuratorError(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if "default" not in settings.profiles and os.environ.get("CURATOR_MODEL"):
        profile = ModelProfile(model=os.environ["CURATOR_MODEL"], base_url=os.environ.get("CURATOR_BASE_URL") or None,
                               api_key_env="CURATOR_API_KEY")
        settings = settings.model_copy(update={"profiles": {**settings.profiles, "default": profile}})
    return settings
