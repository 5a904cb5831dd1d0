"""Tools as data: a ToolSpec is a name, the model-facing description, a pydantic model of the arguments and the
function that runs it. Read tools come from plain functions (`from_function`); write tools are generated from
the schema (tools.write). `invoke` validates a call, runs it and records it; `agent_tools` turns specs into
pydantic-ai tools. A call that cannot be done answers an error the model can act on, never raises at it."""

from __future__ import annotations

import inspect
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_ai import RunContext, Tool

from curator.errors import OpError

from curator.tools.workspace import ToolCall, ToolError, Workspace


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args: type[BaseModel]
    run: Callable[[Workspace, BaseModel], Any]
    writes: bool = False


def from_function(function: Callable[..., Any], writes: bool = False) -> ToolSpec:
    """A spec for a plain function `f(ws, **args)`: the arguments model comes from its signature, the
    description from its docstring."""
    signature = inspect.signature(function)
    hints = typing.get_type_hints(function)
    fields: dict[str, Any] = {}
    for name, param in list(signature.parameters.items())[1:]:
        fields[name] = (hints[name], ... if param.default is inspect.Parameter.empty else param.default)
    model = create_model(f"{function.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)

    def run(ws: Workspace, args: BaseModel) -> Any:
        return function(ws, **{name: getattr(args, name) for name in fields})

    return ToolSpec(function.__name__, inspect.getdoc(function) or function.__name__, model, run, writes)


def invoke(spec: ToolSpec, ws: Workspace, raw: dict[str, Any]) -> Any:
    """Validate `raw` arguments, run the tool and record the call on the workspace. Errors come back as
    {"error": ..., "hint": ...}, so the model can correct itself."""
    started = time.perf_counter()
    try:
        args = spec.args.model_validate(raw)
        result, ok = spec.run(ws, args), True
    except ValidationError as exc:
        result, ok = {"error": describe_validation(spec, exc),
                      "hint": "Call again with the arguments the tool's schema lists."}, False
    except (ToolError, OpError) as exc:
        result, ok = {"error": str(exc)}, False
        if exc.hint:
            result["hint"] = exc.hint
    ws.calls.append(ToolCall(spec.name, raw, result, ok, (time.perf_counter() - started) * 1000))
    return result


def describe_validation(spec: ToolSpec, exc: ValidationError) -> str:
    """Every problem of a call in one line each, naming the allowed names for an unknown one."""
    problems = []
    for err in exc.errors():
        loc = [p for p in err["loc"] if not isinstance(p, int)]
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed(spec.args, loc[:-1]))
            what = "argument" if len(loc) == 1 else "field"
            problems.append(f"unknown {what} {where!r} for {spec.name}; allowed: {allowed}")
        elif err["type"] == "missing":
            problems.append(f"missing required {where!r} for {spec.name}")
        else:
            problems.append(f"{where}: {err['msg']}")
    return "; ".join(problems)


def _allowed(model: type[BaseModel], path: list[Any]) -> list[str]:
    for name in path:
        field = model.model_fields.get(name)
        nested = _model_in(field.annotation) if field else None
        if nested is None:
            return []
        model = nested
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def agent_tools(specs: list[ToolSpec]) -> list[Tool[Workspace]]:
    """pydantic-ai tools for the specs, running on the loop one at a time (the workspace is not shared)."""
    return [_agent_tool(spec) for spec in specs]


def _agent_tool(spec: ToolSpec) -> Tool[Workspace]:
    async def call(ctx: RunContext[Workspace], **kwargs: Any) -> Any:
        return invoke(spec, ctx.deps, kwargs)

    return Tool.from_schema(call, name=spec.name, description=spec.description,
                            json_schema=spec.args.model_json_schema(), takes_ctx=True, sequential=True)
