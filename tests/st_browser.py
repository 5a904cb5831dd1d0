"""SillyTavern 1.12.6's web UI in Debian's chromium (Playwright), with the Memory Curator extension installed, for
`tests/test_sillytavern_extension.py` and `bench/sillytavern_session.py`.

`Tavern` starts SillyTavern (`st_harness.SillyTavern`), points its Chat Completion connection ("Custom
(OpenAI-compatible)") at a chat model on loopback, installs the extension the way a user does with "Install
extension" (SillyTavern clones it from a local git repository), makes the characters and the group, then opens the
page. Its actions are the UI's: the send box and button, a message's edit and branch buttons, the options menu's
"Back to parent chat" and "Start new chat", the chat list; it waits for SillyTavern to finish a generation and for
the extension's queue to drain.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import st_harness

CHROMIUM = Path("/usr/bin/chromium") if Path("/usr/bin/chromium").exists() else (
    Path(p) if (p := shutil.which("chromium") or shutil.which("chromium-browser")) else None)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
USER = "Alex"
MODEL = "story-model"


def missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    why = st_harness.missing()
    if why:
        return why
    if CHROMIUM is None:
        return "no chromium found (/usr/bin/chromium or on PATH); install Debian's `chromium` (.ci/run does)"
    if shutil.which("git") is None:
        return "`git` is not installed (SillyTavern's 'Install extension' clones with it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is missing (pip install -c constraints.txt '.[test]')"
    return None


def extension_repository(folder: Path) -> Path:
    """The extension as its own git repository (what SillyTavern's "Install extension" clones), as the installed
    package's `curator sillytavern export` writes it."""
    repo = folder / "memory-curator"
    subprocess.run([sys.executable, "-m", "curator", "sillytavern", "export", str(repo)], check=True,
                   capture_output=True, text=True)
    return repo


class Tavern:
    """A running SillyTavern with the extension, its HTTP session and (after `open`) its page."""

    def __init__(self, tavern: st_harness.SillyTavern, upstream_url: str, service_url: str):
        self.st, self.upstream_url, self.service_url = tavern, upstream_url, service_url
        self.page = None

    @property
    def user_dir(self) -> Path:
        return self.st.workdir / "data" / "default-user"

    def prepare(self, characters: list[dict], groups: list[dict], install: bool = True) -> None:
        """Settings, the extension, the characters and groups: what a user sets up once."""
        path = self.user_dir / "settings.json"
        if not path.exists():  # st_harness skips SillyTavern's content copy: its default settings, as a first run
            shutil.copy(self.st.workdir / "sillytavern" / "default" / "content" / "settings.json", path)
        settings = json.loads(path.read_text())
        settings["firstRun"] = False
        settings["username"] = USER
        settings["main_api"] = "openai"
        settings["oai_settings"].update(chat_completion_source="custom", custom_url=self.upstream_url,
                                        custom_model=MODEL, stream_openai=False)
        settings["power_user"]["auto_connect"] = True
        settings["extension_settings"]["memory_curator"] = {"url": self.service_url, "ask_on_delete": False}
        path.write_text(json.dumps(settings, indent=4))
        with self.st.session() as http:
            if install:
                answer = http.post("/api/extensions/install",
                                   json={"url": str(extension_repository(self.st.workdir))})
                assert answer.status_code == 200, answer.text
            for card in characters:
                form = {"ch_name": card["name"], "first_mes": card.get("first_mes", ""),
                        "description": card.get("description", ""), "fav": "false",
                        "extensions": json.dumps(card.get("extensions", {}))}
                answer = http.post("/api/characters/create", data=form)
                assert answer.status_code == 200, answer.text
            for group in groups:
                answer = http.post("/api/groups/create", json={"avatar_url": "", **group})  # as the UI sends it
                assert answer.status_code == 200, answer.text

    # ---- the page --------------------------------------------------------------------------------------------
    def open(self, browser, timeout_ms: int = 120_000):
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = self.page = context.new_page()
        page.set_default_timeout(timeout_ms)
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        page.goto(self.st.url)
        page.wait_for_function("window.__memoryCurator && window.SillyTavern"
                               " && SillyTavern.getContext().characters.length"
                               " && !document.getElementById('preloader') && !document.getElementById('load-spinner')")
        self.connect()
        return page

    def connect(self) -> None:
        """API Connections > Connect (Chat Completion, Custom OpenAI-compatible), unless already connected."""
        if self.page.evaluate("SillyTavern.getContext().onlineStatus") == "no_connection":
            self.page.evaluate("$('#api_button_openai').trigger('click')")
        self.page.wait_for_function("SillyTavern.getContext().onlineStatus !== 'no_connection'")

    def idle(self) -> None:
        """SillyTavern is not generating, every event the extension queued has reached the service, and the service
        holds the chat as SillyTavern does."""
        self.page.wait_for_function("document.querySelector('#send_but') && "
                                    "getComputedStyle(document.querySelector('#send_but')).display !== 'none'")
        self.page.evaluate("window.__memoryCurator.idle()")
        self.page.wait_for_function("window.__memoryCurator.inSync()")
        self.page.evaluate("window.__memoryCurator.idle()")

    def bound(self) -> dict:
        """Wait until the open chat is bound to its memory chat; its {file, chat, action}."""
        self.page.wait_for_function("(() => { const m = window.__memoryCurator.state; "
                                    "return m.chat && m.file === SillyTavern.getContext().getCurrentChatId(); })()")
        self.page.evaluate("window.__memoryCurator.idle()")
        return self.page.evaluate("({file: window.__memoryCurator.state.file, chat: window.__memoryCurator.state.chat,"
                                  " action: window.__memoryCurator.state.opened"
                                  " && window.__memoryCurator.state.opened.action})")

    def chat(self) -> list[dict]:
        return self.page.evaluate("SillyTavern.getContext().chat.map(m => ({name: m.name, is_user: !!m.is_user, "
                                  "is_system: !!m.is_system, mes: m.mes}))")

    def select_character(self, name: str) -> dict:
        return self.switch_character(name)

    def switch_character(self, name: str, bound: bool = True) -> dict | None:
        """Click a character in the list: SillyTavern opens its current chat (a new one with its greeting the
        first time). `bound`: wait for the extension to bind it (off when the extension is disabled)."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        index = self.page.evaluate(f"SillyTavern.getContext().characters.findIndex(c => c.name === {json.dumps(name)})")
        opened = (f"SillyTavern.getContext().name2 === {json.dumps(name)} && "
                  "SillyTavern.getContext().getCurrentChatId() && SillyTavern.getContext().chat.length")
        for attempt in range(12):
            # SillyTavern ignores the switch while a chat is still saving or a reply is under way (its toast: "Please
            # wait until the chat is saved"): a user clicks again, and so does this, unless the switch has begun
            if attempt == 0 or self.page.evaluate(f"SillyTavern.getContext().characterId !== '{index}'"):
                self.page.evaluate(f"SillyTavern.getContext().selectCharacterById('{index}')")
            try:
                self.page.wait_for_function(opened, timeout=10_000)
                break
            except PlaywrightTimeout:
                if attempt == 11:
                    raise
        return self.bound() if bound else None

    def open_group(self, name: str) -> dict:
        self.page.evaluate(f"""(async () => {{
            const groups = await import('/scripts/group-chats.js');
            const group = SillyTavern.getContext().groups.find(g => g.name === {json.dumps(name)});
            await groups.openGroupById(group.id);
        }})()""")
        return self.bound()

    def send(self, text: str, replies: int = 1) -> None:
        """Type a message and send it; wait for the `replies` answers (a group answers once per member)."""
        before = len(self.chat())
        self.page.fill("#send_textarea", text)
        self.page.click("#send_but")
        self.page.wait_for_function(f"SillyTavern.getContext().chat.length >= {before + 1 + replies}")
        self.idle()

    def edit(self, floor: int, text: str) -> None:
        """A message's pencil, new text, the check mark."""
        message = f"#chat .mes[mesid='{floor}']"
        self.page.evaluate(f"$(\"{message} .mes_edit\").trigger('click')")
        self.page.fill(f"{message} .edit_textarea", text)
        self.page.evaluate(f"$(\"{message} .mes_edit_done\").trigger('click')")
        self.page.wait_for_function(f"SillyTavern.getContext().chat[{floor}].mes === {json.dumps(text)}")
        self.idle()

    def branch(self, floor: int) -> dict:
        """A message's "Create branch" (SillyTavern opens the branch)."""
        before = self.page.evaluate("SillyTavern.getContext().getCurrentChatId()")
        self.page.evaluate(f"$(\"#chat .mes[mesid='{floor}'] .mes_create_branch\").trigger('click')")
        self.page.wait_for_function(f"SillyTavern.getContext().getCurrentChatId() !== {json.dumps(before)}")
        return self.bound()

    def back_to_parent(self) -> dict:
        """The options menu's "Back to parent chat"."""
        before = self.page.evaluate("SillyTavern.getContext().getCurrentChatId()")
        self.page.evaluate("$('#option_back_to_main').trigger('click')")
        self.page.wait_for_function(f"SillyTavern.getContext().getCurrentChatId() !== {json.dumps(before)}")
        return self.bound()

    def open_chat(self, file: str) -> dict:
        """A chat of the open character, picked from its chat list."""
        self.page.evaluate(f"SillyTavern.getContext().openCharacterChat({json.dumps(file)})")
        self.page.wait_for_function(f"SillyTavern.getContext().getCurrentChatId() === {json.dumps(file)}")
        return self.bound()

    def new_chat(self) -> dict:
        """The options menu's "Start new chat", confirmed."""
        before = self.page.evaluate("SillyTavern.getContext().getCurrentChatId()")
        self.page.evaluate("$('#option_start_new_chat').trigger('click')")
        self.page.click("dialog.popup .popup-button-ok")
        self.page.wait_for_function(f"SillyTavern.getContext().getCurrentChatId() !== {json.dumps(before)}")
        return self.bound()

    def swipe(self, direction: str) -> None:
        """The last message's swipe arrow: right past the last swipe generates a new one; left goes back."""
        last = self.page.evaluate("(() => { const c = SillyTavern.getContext().chat; const m = c[c.length - 1]; "
                                  "return {count: (m.swipes || [m.mes]).length, id: m.swipe_id || 0}; })()")
        self.page.evaluate(f"$('#chat .mes').last().find('.swipe_{direction}').trigger('click')")
        if direction == "right" and last["id"] == last["count"] - 1:
            self.page.wait_for_function("(() => { const c = SillyTavern.getContext().chat; const m = c[c.length - 1]; "
                                        f"return (m.swipes || []).length === {last['count'] + 1}"
                                        f" && m.swipe_id === {last['count']}"
                                        f" && m.mes === m.swipes[m.swipe_id]; }})()")
        else:
            target = last["id"] + (1 if direction == "right" else -1)
            self.page.wait_for_function(f"(() => {{ const c = SillyTavern.getContext().chat; "
                                        f"return c[c.length - 1].swipe_id === {target}; }})()")
        self.idle()

    def slash(self, command: str) -> None:
        """A slash command typed into the send box."""
        self.page.fill("#send_textarea", command)
        self.page.click("#send_but")

    def rename(self, name: str) -> dict:
        """`/renamechat` (the chat manager's pencil does the same)."""
        self.slash(f"/renamechat {name}")
        self.page.wait_for_function(f"SillyTavern.getContext().getCurrentChatId() === {json.dumps(name)}")
        return self.bound()

    def delete_chat(self, keep_memory: bool) -> None:
        """`/delchat` (it confirms SillyTavern's own question itself); then the extension's question, answered."""
        before = self.page.evaluate("SillyTavern.getContext().getCurrentChatId()")
        self.slash("/delchat")
        self.page.click("dialog.popup:has-text('Delete its memory too?') "
                        + (".popup-button-cancel" if keep_memory else ".popup-button-ok"))
        self.page.wait_for_function(f"SillyTavern.getContext().getCurrentChatId() !== {json.dumps(before)}")
        self.bound()

    def close(self) -> None:
        if self.page is not None:
            self.page.context.close()
            self.page = None
