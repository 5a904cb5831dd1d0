"""Extraction prompt size per type, before and after the story fields (story time, scene, flashback, region, point
of view, known_by), for the bundled presets. "Before" is the same type with `story` switched off (what the
extractor sent until now); "after" is the preset as shipped. For each type: the tokens of its part of the user
prompt and of its item in the output tool's JSON schema. The system prompt does not depend on the schema: its
digest is printed for both, to show it is byte-stable.

    python bench/extract_prompt_size.py [--json]
"""

from __future__ import annotations

import hashlib
import json

from _common import emit, environment, parse_args, table

from curator.extract.extractor import _describe_type, system_prompt
from curator.extract.output_model import item_model
from curator.llm.tokens import count_tokens
from curator.schemas import load_preset
from curator.settings import Settings
from curator.store.story_time import KNOWS


def sizes(schema, name: str, story: bool) -> dict:
    spec = schema.types[name].model_copy(update={"story": story})
    patched = schema.model_copy(update={"types": {**schema.types, name: spec}})
    prompt = _describe_type(patched, name)
    tool = json.dumps(item_model(spec, schema.relation(KNOWS) is not None).model_json_schema(), ensure_ascii=False)
    return {"prompt": count_tokens(prompt), "tool": count_tokens(tool)}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    rows = []
    for preset in ("default", "bme"):
        schema = load_preset(preset)
        for name, spec in schema.types.items():
            before, after = sizes(schema, name, False), sizes(schema, name, spec.story)
            rows.append({"preset": preset, "type": name, "story": spec.story, "before": before, "after": after})
    digest = hashlib.sha256(system_prompt(Settings()).encode()).hexdigest()[:16]
    report = {"benchmark": "extract_prompt_size", "quick": args.quick, "env": environment(), "params": {},
              "results": {"types": rows, "system_prompt": {"tokens": count_tokens(system_prompt(Settings())),
                                                          "sha256_16": digest}}}

    def render(r: dict) -> str:
        lines = [(f"{t['preset']}/{t['type']}", "on" if t["story"] else "off", t["before"]["prompt"],
                  t["after"]["prompt"], t["before"]["tool"], t["after"]["tool"],
                  t["after"]["prompt"] + t["after"]["tool"] - t["before"]["prompt"] - t["before"]["tool"])
                 for t in r["results"]["types"]]
        sp = r["results"]["system_prompt"]
        return table(["type", "story", "prompt before", "prompt after", "tool before", "tool after", "added"],
                     lines) + f"\nsystem prompt: {sp['tokens']} tokens, sha256 {sp['sha256_16']} (schema-independent)"

    emit(args, report, render)


if __name__ == "__main__":
    main()
