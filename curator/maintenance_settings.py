"""Maintenance settings: thresholds, cadences and on/off switches of consolidation, compression, summaries,
forgetting and reflection. Defaults follow the original system (seed 000); per-type compression windows live in
the schema (`compression:` of a type), everything else here. Kept apart from `settings.py` so the maintenance
package can import it without pulling in the rest of the engine."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from typing import Literal


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConsolidationSettings(_Strict):
    """Mem0-style dedupe/merge of each extraction's new nodes against their vector neighbours."""

    enabled: bool = Field(default=True, description="dedupe / merge each step's new nodes (with auto)")
    # vector top-1 similarity that triggers the gate; None: the embedder's own (`duplicate_similarity`: 0.85 for e5,
    # whose unrelated texts already sit near 0.8; 0.6 for the static vectors, whose paraphrases reach 0.74-0.92)
    threshold: float | None = Field(default=None, ge=0, le=1, description="similarity that opens the gate "
                                    "(empty: the embedder's own)")
    min_new_nodes: int = Field(default=2, ge=1, description="a step with this many new nodes opens the gate")
    neighbours: int = Field(default=5, ge=1, le=50, description="neighbours shown to the model per new node")
    evolution_strength: float = Field(default=0.7, ge=0, le=1, description="strength of the links evolution adds")


class CompressionSettings(_Strict):
    """Scheduling of the built-in hierarchical compression (the windows are per type, in the schema)."""

    auto: bool = Field(default=True, description="scheduled compression (with auto)")
    every: int = Field(default=10, ge=1, le=500, description="extractions between scheduled runs")
    max_chars: int = Field(default=800, ge=50, description="a summary's text at most (all fields together)")
    concurrency: int = Field(default=4, ge=1, le=32, description="batches summarized at once")


class SummarySettings(_Strict):
    """Small summaries every few extractions, rolled up into ever coarser ones."""

    enabled: bool = Field(default=True, description="small synopses and their roll-ups (with auto)")
    type: str = Field(default="synopsis", description="the schema type that holds them (a schema without it has "
                      "no summaries)")
    small_every: int = Field(default=3, ge=1, le=100, description="extractions per small synopsis")
    small_chars: tuple[int, int] = (80, 220)
    rollup_fan_in: int = Field(default=3, ge=2, le=10)
    rollup_chars: tuple[int, int] = (120, 260)


class ForgettingSettings(_Strict):
    """The sleep cycle: archive (never delete) what has little retention value left."""

    enabled: bool = Field(default=False, description="archive what has little retention value left (with auto)")
    every: int = Field(default=10, ge=1, description="extractions between scheduled cycles")
    threshold: float = Field(default=0.5, ge=0, description="retention below this is archived")
    exempt_types: tuple[str, ...] = ("synopsis", "rule", "thread")
    exempt_importance: float = Field(default=8.0, ge=0, le=10)  # this important or more: never forgotten
    min_age_hours: float = Field(default=1.0, ge=0)
    # wall_clock punishes a chat that is merely paused; floors measures age in story progress instead,
    # `floors_per_hour` floors counting as one hour.
    age: Literal["wall_clock", "floors"] = "wall_clock"
    floors_per_hour: float = Field(default=10.0, gt=0)


class ReflectionSettings(_Strict):
    """Every few extractions the model may write a reflection: a long-term pattern, linked to its evidence."""

    enabled: bool = Field(default=False, description="the model may write a reflection (with auto)")
    every: int = Field(default=10, ge=1, description="extractions between reflections")
    type: str = "reflection"
    window: int = Field(default=30, ge=3, le=200)  # recent nodes shown to the model


class PlannerSettings(_Strict):
    """The plot planner (ST-BME's): from the open threads, the characters' goals and the recent events, a model
    proposes the next few beats of the story, shown in the panel and (by default, once on) injected as a short
    block after the memory. Off by default: one model call (task `plan`) every `every` replies."""

    enabled: bool = Field(default=False, description="propose the next beats every few replies (one model call)")
    every: int = Field(default=5, ge=1, le=100, description="replies between plans")
    beats: int = Field(default=3, ge=1, le=6, description="beats a plan proposes at most")
    inject: bool = Field(default=True, description="put the newest plan after the memory in the injection")
    recent_events: int = Field(default=8, ge=1, le=50, description="recent events the planner reads")


class MaintenanceSettings(_Strict):
    # Run the scheduled jobs after each extraction step, as the original does: consolidation and small synopses on,
    # compression every 10 steps, forgetting and reflection off. Their calls are logged under the `maintain` task
    # (`curator usage`) and capped per step (`max_calls_per_step`); a chat or config.yaml can turn any of them off.
    auto: bool = Field(default=True, description="run the scheduled passes after each extraction step")
    max_calls_per_step: int = Field(default=6, ge=0, le=100, description="model requests the scheduled passes may "
                                    "make after one extraction step, all together (0: no cap)")
    output_retries: int = Field(default=2, ge=0, description="invalid answers go back to the model this many times")
    consolidation: ConsolidationSettings = ConsolidationSettings()
    compression: CompressionSettings = CompressionSettings()
    summaries: SummarySettings = SummarySettings()
    forgetting: ForgettingSettings = ForgettingSettings()
    reflection: ReflectionSettings = ReflectionSettings()
