"""The OpenAI chat model, keeping the tool schemas it transformed.

Before each request pydantic-ai rewrites every tool's JSON schema for OpenAI (its `json_schema_transformer`: two
deep copies of the schema and a walk over it), about 0.5 ms CPU for the extractor's schema, though an agent sends
the same tool definitions request after request. Here the transformed definitions are kept per model, keyed by
the definitions' whole content (a JSON dump, ~10x cheaper than the transform), so a definition that changes in any
field is transformed again; the transform only ever replaces the function tools, output tools and output object,
and depends on nothing else.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from typing import Any

from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel

MAX_KEPT = 64  # distinct tool sets kept per model (a chat's schema, per cadence: a handful)


def _content(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return repr(value)


def fingerprint(params: ModelRequestParameters) -> str:
    """What the transform reads: the tool definitions and the output object, every field of them."""
    return json.dumps([params.function_tools, params.output_tools, params.output_object], default=_content,
                      ensure_ascii=False)


class SchemaCachingChatModel(OpenAIChatModel):
    """`OpenAIChatModel` whose `customize_request_parameters` reuses its earlier answer for the same tools."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # fingerprint -> (function tools, output tools, output object) as the transform left them
        self._customized: dict[str, tuple[list[Any], list[Any], Any]] = {}
        self.schema_transforms = 0  # how many times the transform ran (tests)

    def customize_request_parameters(self, model_request_parameters: ModelRequestParameters) -> ModelRequestParameters:
        if not self.profile.get("json_schema_transformer"):
            return super().customize_request_parameters(model_request_parameters)
        key = fingerprint(model_request_parameters)
        kept = self._customized.get(key)
        if kept is None:
            result = super().customize_request_parameters(model_request_parameters)
            self.schema_transforms += 1
            if len(self._customized) >= MAX_KEPT:
                self._customized.clear()
            self._customized[key] = (result.function_tools, result.output_tools, result.output_object)
            return result
        function_tools, output_tools, output_object = kept
        # fresh lists, so nothing downstream can change the kept ones through them
        return replace(model_request_parameters, function_tools=list(function_tools), output_tools=list(output_tools),
                       output_object=output_object)
