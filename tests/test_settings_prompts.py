"""Settings and prompts (issue 34): a chat's own settings as typed merge patches over config.yaml, config.yaml
changed through the library (and by hand: every process follows it), the prompt templates overridden in the data
directory's prompts/ folder, reaching the model, surviving a reopen, compared with and reset to the shipped text.
The panel's pages are driven in a browser in test_panel_browser.py."""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient
from pydantic_ai.messages import SystemPromptPart
from pydantic_ai.models.function import FunctionModel
from typer.testing import CliRunner

import curator
from curator.cli.main import app as cli
from curator.errors import CuratorError
from curator.prompts import PromptError
from curator.service.server import create_app
from curator.testing.scripted import scripted_chat, scripted_model


def test_a_chat_follows_config_yaml_except_where_it_sets_its_own(tmp_path):
    with curator.open(tmp_path / "data") as memory:
        memory.create_chat("a")
        memory.create_chat("b")
        memory.update_chat_settings("a", {"recall": {"budget_tokens": 600, "mode": "rag"}})
        assert memory.recall_settings("a").budget_tokens == 600 and memory.recall_settings("b").budget_tokens == 1500
        memory.update_settings({"recall": {"budget_tokens": 900}})  # config.yaml: every chat that sets none follows
        assert memory.recall_settings("b").budget_tokens == 900 and memory.recall_settings("a").budget_tokens == 600
        assert "budget_tokens: 900" in (tmp_path / "data" / "config.yaml").read_text()
        memory.update_chat_settings("a", {"recall": {"budget_tokens": None}})  # null: back to config.yaml's
        assert memory.chat_settings("a")["overrides"] == {"recall": {"mode": "rag"}}
        assert memory.recall("a", "lantern").budget_tokens == 900
        for bad, why in (({"recall": {"budget_tokens": 3}}, "recall.budget_tokens"),
                         ({"recall": {"nope": 1}}, "recall.nope"),
                         ({"tasks": {"extract": "cheap"}}, "no model profile 'cheap'")):
            with pytest.raises(CuratorError, match=why):
                memory.update_chat_settings("a", bad)
        assert memory.chat_settings("a")["overrides"] == {"recall": {"mode": "rag"}}  # nothing stored
        with pytest.raises(CuratorError, match="read when the service starts"):
            memory.update_settings({"embedding": {"model": "x"}})
        with pytest.raises(CuratorError, match="keys are never stored"):
            memory.update_settings({"profiles": {"p": {"model": "m", "api_key": "sk-1"}}})
        memory.update_settings({"profiles": {"cheap": {"model": "m", "base_url": "http://127.0.0.1:9/v1"}}})
        memory.update_chat_settings("a", {"tasks": {"summarize": "cheap"}})
        assert memory.chat_settings("a")["effective"]["tasks"]["summarize"] == "cheap"
        # config.yaml edited by hand (another process, an editor): followed within a second, bad edits ignored
        path = tmp_path / "data" / "config.yaml"
        path.write_text(path.read_text().replace("budget_tokens: 900", "budget_tokens: 700"))
        os.utime(path, ns=(1, 1))
        memory._core._config_checked = 0  # the once-a-second look, without waiting a second
        assert memory.recall_settings("b").budget_tokens == 700
        path.write_text("recall: {budget_tokens: -1}\n")
        memory._core._config_checked = 0
        assert memory.recall_settings("b").budget_tokens == 700
        path.write_text("recall: {budget_tokens: 700}\n")
    runner = CliRunner()
    data = ["--data", str(tmp_path / "data")]
    assert runner.invoke(cli, [*data, "settings", "set", "recall.mode", "llm", "--chat", "b"]).exit_code == 0
    shown = runner.invoke(cli, [*data, "settings", "show", "--chat", "b", "--json"])
    assert '"mode": "llm"' in shown.output
    refused = runner.invoke(cli, [*data, "settings", "set", "extraction.extract_every", "0", "--chat", "b"])
    assert refused.exit_code == 1 and "extract_every" in refused.output


def _recording(systems: list[str]) -> FunctionModel:
    inner = scripted_model()

    def answer(messages, info):
        systems.append(next(p.content for p in messages[0].parts if isinstance(p, SystemPromptPart)))
        return inner.function(messages, info)

    return FunctionModel(answer, model_name="recording")


def test_a_prompt_of_your_own_reaches_the_model_survives_a_reopen_and_resets(tmp_path):
    data = tmp_path / "data"
    with curator.open(data) as memory:
        prompts = memory.prompts
        shipped = prompts.text("extract_system")
        with pytest.raises(PromptError, match=r"unknown placeholder\(s\) \$mood"):
            prompts.save("extract_system", "Remember everything. $mood")
        prompts.save("extract_system", "Remember what matters ($language_rule); costs $$0.")
        assert prompts.info("extract_system").overridden and "+Remember what matters" in prompts.diff("extract_system")
        memory.create_chat("c")
        memory.set_messages("c", scripted_chat(4))
        systems: list[str] = []
        memory.extract("c", model=_recording(systems))
        assert systems and all(s.startswith("Remember what matters (use the language") for s in systems)
        assert all(s.endswith("costs $0.") for s in systems)
    (data / "prompts" / ".base" / "extract_system.md").write_text("an older shipped text")
    with curator.open(data) as memory:  # a new process (an upgrade): the user's template is still in effect
        info = memory.prompts.info("extract_system")
        assert info.overridden and info.stale  # ... and the panel says the shipped text changed since
        memory.prompts.reset("extract_system")
        assert memory.prompts.text("extract_system") == shipped
        assert not (data / "prompts" / "extract_system.md").exists()


def test_the_settings_api_is_typed_for_other_front_ends(tmp_path):
    with curator.open(tmp_path / "data") as memory:
        client = TestClient(create_app(memory), base_url="http://127.0.0.1", headers={"x-curator-client": "t"})
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
        patch = schemas["ChatSettingsPatch"]["properties"]
        assert {"extraction", "recall", "maintenance", "tasks"} <= set(patch)
        recall = schemas["RecallSettingsPatch"]["properties"]
        budget = recall["budget_tokens"]
        assert budget["anyOf"][0]["minimum"] == 50 and "tokens" in budget["description"]
        created = client.post("/api/v1/chats", json={"id": "a", "settings": {"recall": {"mode": "llm"}}})
        assert created.status_code == 201
        changed = client.patch("/api/v1/chats/a/settings", json={"recall": {"budget_tokens": 700, "mode": None}})
        assert changed.json()["overrides"] == {"recall": {"budget_tokens": 700}}
        assert changed.json()["effective"]["recall"]["mode"] == "hybrid"
        bad = client.patch("/api/v1/chats/a/settings", json={"recall": {"budget_tokens": 1}})
        assert bad.status_code == 422 and "recall.budget_tokens" in bad.json()["error"]["message"]
        assert client.patch("/api/v1/chats/nope/settings", json={}).status_code == 404
        fields = {f["path"]: f for f in client.get("/api/v1/settings/fields").json()["fields"]}
        assert fields["extraction.channel"]["choices"] == ["extractor", "curator", "both", "off"]
        assert fields["maintenance.consolidation.enabled"]["type"] == "boolean"
        assert client.get("/api/v1/prompts/nope").status_code == 404
        put = client.put("/api/v1/prompts/inject_section", json={"text": "### $bucket\n$lines"})
        assert put.json()["overridden"] and "+### $bucket" in put.json()["diff"]
        memory.commit("a", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "Eileen"}}], 0)
        injection = client.post("/api/v1/chats/a/recall", json={"query": "Eileen"}).json()
        assert "### Current state" in injection["text"]


def test_an_injection_renders_with_one_version_of_each_prompt_and_the_next_sees_an_edit(tmp_path):
    """`Prompts.pinned` (what `pack` renders with): each template and label read once, so a whole injection has
    one version of each; a new view (the next recall) sees an override saved meanwhile."""
    from curator.prompts.overrides import Prompts

    prompts = Prompts(tmp_path)
    pinned = prompts.pinned()
    assert pinned.label("blocks", "recalled") == "Memory: recalled for this turn"
    assert pinned.render("inject_block", heading="h", sections="s").strip() == "[h]\ns"
    prompts.save("inject_block", "<<$heading>>\n$sections\n")
    shipped = prompts.shipped("inject_labels")
    prompts.save("inject_labels", shipped.replace("Memory: recalled for this turn", "Recalled"))
    assert pinned.label("blocks", "recalled") == "Memory: recalled for this turn"
    assert pinned.render("inject_block", heading="h", sections="s").strip() == "[h]\ns"
    assert pinned.pinned() is pinned
    again = prompts.pinned()
    assert again.label("blocks", "recalled") == prompts.label("blocks", "recalled") == "Recalled"
    assert again.render("inject_block", heading="h", sections="s").strip() == "<<h>>\ns"
    assert again.label("views", "known", bucket="B", speaker="Mira") == "B (known to Mira)"
