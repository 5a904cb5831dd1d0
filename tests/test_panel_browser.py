"""The memory panel end to end in a real headless Chromium (Debian's `chromium`, driven by Playwright; no browser
is downloaded): a live `curator serve` app on loopback with a seeded graph and a bearer token, every tab opened,
a node edited in the table and seen through the API, a recall run from the recall view, the schema editor's
validation, an operation's job progress, the graph view clicked, screenshotted and measured at 2,000 nodes."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx2
import pytest
from panel_seed import ARCHIVED, BIG_ACTIVE, seed_big, seed_story

import curator
from curator.testing.scripted import scripted_model
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer

CHROMIUM = Path("/usr/bin/chromium") if Path("/usr/bin/chromium").exists() else (
    Path(p) if (p := shutil.which("chromium") or shutil.which("chromium-browser")) else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium found (/usr/bin/chromium or on PATH); "
                                "install Debian's `chromium` package (.ci/run does)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).parent / "artifacts"
TOKEN = "panel-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    data = tmp_path_factory.mktemp("panel") / "data"
    memory = curator.open(data)
    seed_story(memory)
    seed_big(memory)
    app = create_app(memory, ServiceConfig(token=TOKEN, model=scripted_model()))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1", headers=AUTH,
                                                      timeout=60) as api:
        yield server.url, api
    memory.close()


@pytest.fixture(scope="module")
def browser(service):  # the service first: its seeding runs asyncio, which Playwright's loop would block
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, service):  # the service fixture: up and seeded before the browser opens
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.request.method} {r.url}"))
    # failed requests a test expects; by default only the recall view asking for an injection before any recall
    page.expected_failures = ["/injection/last"]
    yield page
    context.close()
    assert [e for e in errors if not e.endswith(tuple(page.expected_failures))] == [], errors


def open_panel(page, url, chat="story", tab="overview"):
    page.goto(f"{url}/panel/#token={TOKEN}")
    page.wait_for_function("window.__panel && window.__panel.ready")
    if page.eval_on_selector("#chat-select", "s => s.value") != chat:
        page.select_option("#chat-select", chat)
    open_tab(page, tab)


def open_tab(page, tab):
    page.click(f'.tabs button[data-tab="{tab}"]')
    page.wait_for_function(f'document.querySelector("#tab-{tab}").dataset.loaded === "true" && '
                           f'!document.querySelector("#tab-{tab}").hidden')


def test_every_tab_opens_with_the_token_and_the_static_files_need_none(page, service):
    url, api = service
    assert httpx2.get(f"{url}/panel/").status_code == 200  # the page is open, it holds no data
    assert httpx2.get(f"{url}/api/v1/chats").status_code == 401  # the data is not
    open_panel(page, url)
    overview = page.inner_text("#tab-overview")
    stats = api.get("/chats/story/graph").json()["stats"]
    assert f"{stats['nodes_active']}\nactive nodes" in overview and "Recent extractions" in overview
    assert "fragmentation" in overview
    for tab, expected in (("graph", "nodes laid out"), ("nodes", "character_sheet nodes"), ("recall", "Try a query"),
                          ("schema", "extract every N floors"), ("ops", "Extract now")):
        open_tab(page, tab)
        if tab == "graph":
            page.wait_for_function("window.__panel.metrics.graph")
        assert expected in page.inner_text(f"#tab-{tab}"), tab
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"panel_{tab}.png"), full_page=True)


def test_without_the_token_the_panel_asks_for_it(browser, service):
    url, _api = service
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{url}/panel/")
    page.wait_for_selector("#token-dialog[open]")
    page.fill("#token-input", TOKEN)
    page.click("#token-save")
    page.wait_for_function("window.__panel.ready")
    assert "active nodes" in page.inner_text("#tab-overview")
    context.close()


def test_a_node_edited_in_the_table_is_one_commit_seen_through_the_api(page, service):
    url, api = service
    open_panel(page, url, tab="nodes")
    page.select_option("#nodes-type", "character_sheet")
    page.wait_for_selector("#nodes-body tr[data-id]")
    page.fill("#nodes-search", "Eileen")
    row = page.locator("#nodes-body tr[data-id]")
    assert row.count() == 1
    node_id = row.get_attribute("data-id")
    commits_before = len(api.get("/chats/story/commits").json()["commits"])
    row.locator("button.edit").click()
    page.fill('#node-form textarea[name="identity"]', "a travelling healer with a debt to Rowan")
    page.fill('#node-form input[name="importance"]', "8")
    page.click("#node-save")
    page.wait_for_selector("#node-dialog", state="hidden")
    page.wait_for_function(f'document.querySelector(\'tr[data-id="{node_id}"]\')?.innerText.includes("debt to Rowan")')
    node = api.get(f"/chats/story/nodes/{node_id}").json()
    assert node["fields"]["identity"] == "a travelling healer with a debt to Rowan" and node["importance"] == 8
    commits = api.get("/chats/story/commits").json()["commits"]
    assert len(commits) == commits_before + 1 and commits[-1]["origin"] == "manual"
    # bad input gets the service's clear error in the form, and nothing is committed
    page.expected_failures.append("400 POST " + url + "/api/v1/chats/story/nodes")
    page.click("#node-create")
    page.click("#node-save")  # a character sheet without its required name
    page.wait_for_function('document.querySelector("#node-error").textContent.length > 0')
    assert "name" in page.inner_text("#node-error")
    assert len(api.get("/chats/story/commits").json()["commits"]) == commits_before + 1
    # create one properly, then delete it: two more commits
    page.fill('#node-form textarea[name="name"]', "Odran")
    page.fill('#node-form textarea[name="goal"]', "find the lost bell")
    page.click("#node-save")
    page.wait_for_selector("#node-dialog", state="hidden")
    page.fill("#nodes-search", "Odran")
    page.wait_for_selector("#nodes-body tr[data-id] >> text=find the lost bell")
    created = page.locator("#nodes-body tr[data-id]").get_attribute("data-id")
    assert api.get(f"/chats/story/nodes/{created}").json()["fields"]["goal"] == "find the lost bell"
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'tr[data-id="{created}"] button.delete').click()
    page.wait_for_selector(f'tr[data-id="{created}"]', state="detached")
    assert api.get(f"/chats/story/nodes/{created}").status_code == 404
    commits = api.get("/chats/story/commits").json()["commits"]
    assert len(commits) == commits_before + 3 and [c["origin"] for c in commits[-3:]] == ["manual"] * 3


def test_a_recall_runs_from_the_recall_view_and_the_last_injection_is_shown(page, service):
    url, api = service
    open_panel(page, url, tab="recall")
    page.fill("#recall-query", "What did Eileen find at the bridge?")
    page.select_option("#recall-mode", "rag")
    page.click("#recall-run")
    page.wait_for_selector('#recall-results [data-mode="rag"][data-done]', timeout=60_000)
    box = page.inner_text('#recall-results [data-mode="rag"]')
    assert page.get_attribute('#recall-results [data-mode="rag"]', "data-done") == "true", box
    assert "mode rag" in box and "Eileen" in box and "As the model sees it" in box
    # a try is not the last injection; a real recall (what a client does before generating) is
    assert api.get("/chats/story/injection/last").status_code == 404
    real = api.post("/chats/story/recall", json={"query": "Where is Rowan now?", "mode": "rag"}).json()
    open_tab(page, "recall")
    last = page.inner_text("#recall-last")
    assert "Where is Rowan now?" in last and f"{real['tokens']['total']:,} of" in last


def test_the_schema_editor_validates_before_saving(page, service):
    url, api = service
    open_panel(page, url, tab="schema")
    cadence = page.locator('fieldset[data-type="location_state"] input.cadence')
    cadence.fill("0")
    page.expected_failures.append("422 POST " + url + "/api/v1/schemas/validate")
    page.click("#schema-save")
    page.wait_for_selector("#schema-message.error")
    assert "extract_every" in page.inner_text("#schema-message")
    assert api.get("/chats/story/schema").json()["types"]["location_state"]["extract_every"] != 0
    cadence.fill("3")
    page.locator('fieldset[data-type="location_state"] input.always-inject').check()
    page.click("#schema-save")
    # "ok" first says the draft is valid, then that it is saved: the stored schema is read after the second
    page.wait_for_function("(document.querySelector('#schema-message.ok') || {}).textContent?.startsWith('Saved')")
    spec = api.get("/chats/story/schema").json()["types"]["location_state"]
    assert spec["extract_every"] == 3 and spec["always_inject"]["enabled"] is True


def test_operations_show_job_progress_and_roll_back(page, service, tmp_path):
    url, api = service
    open_panel(page, url, tab="ops")
    page.click("#op-vectors")
    page.wait_for_selector('#ops-progress .job-progress[data-state="done"]', timeout=60_000)
    assert "vectors: done" in page.inner_text("#ops-progress")
    assert page.is_enabled("#op-compact") and page.is_enabled("#op-curate")  # the service offers every pass
    assert page.is_checked("#forget-dry")
    page.click("#op-forget")  # a dry run of the sleep cycle: its progress and its report
    page.wait_for_selector('#ops-progress .job-progress[data-state="done"] >> text=forget: done')
    report = page.inner_text("#ops-progress details.job-result pre")
    assert '"op": "forget"' in report and '"dry_run": true' in report
    with page.expect_download() as download:
        page.click("#export-graph")
    assert download.value.suggested_filename == "story.graph.json"
    # the exported file imported again, into a new chat
    exported = tmp_path / "story.graph.json"
    download.value.save_as(exported)
    page.set_input_files("#import-file", str(exported))
    page.fill("#import-chat", "story-copy")
    page.click("#import-run")
    page.wait_for_selector(".toast >> text=Imported")
    copy = api.get("/chats/story-copy/graph").json()["stats"]
    assert copy["nodes_active"] == api.get("/chats/story/graph").json()["stats"]["nodes_active"] > 0
    before = api.get("/chats/story/graph").json()["stats"]["commits"]
    page.fill("#rollback-floor", "15")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#op-rollback")
    page.wait_for_function("!document.querySelector('#ops-history').innerText.includes('Undo from floor 17')")
    after = api.get("/chats/story/graph").json()["stats"]["commits"]
    assert after < before
    assert all(c["anchor_floor"] < 15 for c in api.get("/chats/story/commits").json()["commits"])
    # extract now: the rolled-back floors are due again; the job's bar counts the steps
    page.click("#op-extract")
    page.wait_for_selector('#ops-progress .job-progress[data-state="done"] >> text=extract: done 3/3')
    assert [c["anchor_floor"] for c in api.get("/chats/story/commits").json()["commits"]][-3:] == [15, 17, 19]


def test_a_rollback_is_restored_in_one_click_from_the_overview(page, service):
    url, api = service
    api.post("/chats", json={"id": "undo-me"}).raise_for_status()
    for name in ("Eileen", "Rowan"):
        api.post("/chats/undo-me/nodes", json={"type": "character_sheet", "fields": {"name": name}}).raise_for_status()
    before = api.get("/chats/undo-me/graph/all").json()
    batch = api.post("/chats/undo-me/rollback", json={"floor": 0}).json()["batch"]
    assert api.get("/chats/undo-me/graph/all").json()["nodes"] == []
    open_panel(page, url, chat="undo-me")
    row = f'#overview-reverted tr[data-batch="{batch}"]'
    assert "rollback (the panel)" in page.inner_text(row) and "Eileen" in page.inner_text(row)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(f"{row} button.restore")
    page.wait_for_selector(f".toast >> text=Restored batch #{batch}")
    assert api.get("/chats/undo-me/graph/all").json()["nodes"] == before["nodes"]
    open_tab(page, "ops")  # the undo is itself a batch there, restorable the same way
    page.wait_for_selector('#ops-trash td >> text=undo (what the undo of')


def test_a_service_without_an_extraction_model_says_so_on_the_overview(browser, tmp_path, monkeypatch):
    monkeypatch.delenv("CURATOR_MODEL", raising=False)
    memory = curator.open(tmp_path / "data")
    memory.create_chat("bare", "default")
    with ThreadedServer(create_app(memory, ServiceConfig(proxy=False))) as server:
        page = browser.new_page()
        try:
            page.goto(f"{server.url}/panel/")
            page.wait_for_function("window.__panel && window.__panel.ready")
            open_tab(page, "overview")
            warning = page.inner_text("#extraction-warning")
            assert "Extraction will fail" in warning and "every reply's extraction will fail" in warning
        finally:
            page.close()
    memory.close()


def test_the_graph_view_clicks_through_to_details_and_is_saved_as_a_screenshot(page, service):
    url, api = service
    open_panel(page, url, tab="graph")
    page.wait_for_function("window.__panel.metrics.graph")
    node = next(n for n in api.get("/chats/story/nodes?type=character_sheet").json()["nodes"] if n["title"] == "Rowan")
    spot = page.evaluate(f"window.__panel.graph.screenPosition({node['id']!r})")
    page.mouse.click(spot["x"], spot["y"])
    page.wait_for_function("document.querySelector('#graph-details h2')?.innerText === 'Rowan'")
    assert "character_sheet" in page.inner_text("#graph-details")
    # drag the node: it follows the pointer
    page.mouse.move(spot["x"], spot["y"])
    page.mouse.down()
    page.mouse.move(spot["x"] + 60, spot["y"] + 40, steps=5)
    page.mouse.up()
    moved = page.evaluate(f"window.__panel.graph.screenPosition({node['id']!r})")
    assert abs(moved["x"] - spot["x"] - 60) < 2 and abs(moved["y"] - spot["y"] - 40) < 2
    # drag the background: everything pans; the wheel zooms around the pointer
    corner = page.eval_on_selector(".graph-stage canvas", "c => { const r = c.getBoundingClientRect(); "
                                   "return {x: r.left + 5, y: r.bottom - 30}; }")
    page.mouse.move(corner["x"], corner["y"])
    page.mouse.down()
    page.mouse.move(corner["x"] + 30, corner["y"] - 20, steps=3)
    page.mouse.up()
    panned = page.evaluate(f"window.__panel.graph.screenPosition({node['id']!r})")
    assert abs(panned["x"] - moved["x"] - 30) < 2 and abs(panned["y"] - moved["y"] + 20) < 2
    # the pointer 100 px beside the node, on whichever side stays on the canvas (the layout decides where it is)
    right = page.eval_on_selector(".graph-stage canvas", "c => c.getBoundingClientRect().right")
    pointer = panned["x"] + (100 if panned["x"] + 110 < right else -100)
    page.mouse.move(pointer, panned["y"])
    page.mouse.wheel(0, -400)
    page.wait_for_function(f"Math.abs(window.__panel.graph.screenPosition({node['id']!r}).x - {panned['x']}) > 1")
    zoomed = page.evaluate(f"window.__panel.graph.screenPosition({node['id']!r})")
    assert abs(zoomed["x"] - pointer) > abs(panned["x"] - pointer) + 10  # further from the pointer: zoomed in around it
    page.click("#graph-fit")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "panel_graph.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    print(f"\ngraph view screenshot: {shot}")
    page.click("#theme-toggle")
    assert page.evaluate("document.documentElement.dataset.theme") in ("light", "dark")
    page.screenshot(path=str(ARTIFACTS / "panel_graph_other_theme.png"))


def test_the_graph_view_lays_out_2000_nodes_without_freezing(page, service):
    url, _api = service
    open_panel(page, url, chat="big", tab="graph")
    page.wait_for_function(f"window.__panel.metrics.graph?.nodes === {BIG_ACTIVE}", timeout=60_000)
    metrics = page.evaluate("window.__panel.metrics.graph")
    frames = page.evaluate("window.__panel.graph.benchFrames(1000)")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel_graph_2000.png"))
    print(f"\ngraph of {metrics['nodes']} nodes, {metrics['edges']} edges: layout {metrics['layoutMs']:.0f} ms "
          f"({metrics['iterations']} steps, longest slice {metrics['longestSliceMs']:.1f} ms); redraw while panning: "
          f"{frames['frames']} frames in {frames['seconds']:.2f} s, {frames['avgDrawMs']:.1f} ms per draw "
          f"(worst {frames['worstDrawMs']:.1f} ms); screenshot {ARTIFACTS / 'panel_graph_2000.png'}")
    assert metrics["iterations"] > 0 and metrics["edges"] > BIG_ACTIVE
    assert frames["frames"] > 1  # frames kept coming while the page redrew the whole graph
    # archived nodes are hidden by default, shown when asked for
    page.check("#show-archived")
    page.wait_for_function(f"window.__panel.metrics.graph.nodes === {BIG_ACTIVE + ARCHIVED}", timeout=60_000)
    # the layout runs in slices, the page stays responsive: a click on the tab bar is answered
    open_tab(page, "nodes")


def test_narrow_screens_get_one_column(browser, service):
    url, _api = service
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    open_panel(page, url, tab="graph")
    page.wait_for_function("window.__panel.metrics.graph")
    columns = page.eval_on_selector(".graph-layout", "el => getComputedStyle(el).gridTemplateColumns")
    assert len(columns.split()) == 1, columns
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1  # nothing sticks out sideways
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel_graph_phone.png"))
    context.close()


LAYOUT_CHECK = """async () => {
  const { layout } = await import('/panel/js/graph_layout.js');
  // two rings of 30 nodes each, joined by one edge; 40 loose nodes
  const links = [];
  for (const base of [0, 30]) for (let i = 0; i < 30; i++) links.push(base + i, base + (i + 1) % 30);
  links.push(0, 30);
  const run = () => layout(100, new Int32Array(links), { iterations: 300 });
  const a = await run(), b = await run();
  const dist = (i, j) => Math.hypot(a.x[i] - a.x[j], a.y[i] - a.y[j]);
  const mean = (pairs) => pairs.reduce((s, [i, j]) => s + dist(i, j), 0) / pairs.length;
  const linked = [], apart = [];
  for (let e = 0; e < links.length; e += 2) linked.push([links[e], links[e + 1]]);
  for (let i = 0; i < 30; i++) apart.push([i, 30 + ((i + 15) % 30)]);
  let closest = Infinity;
  for (let i = 0; i < 100; i++) for (let j = i + 1; j < 100; j++) closest = Math.min(closest, dist(i, j));
  return { linked: mean(linked), apart: mean(apart), closest, same: a.x.every((v, i) => v === b.x[i]),
           finite: a.x.every(Number.isFinite) && a.y.every(Number.isFinite) };
}"""


def test_the_layout_keeps_linked_nodes_close_and_others_apart(page, service):
    url, _api = service
    page.goto(f"{url}/panel/#token={TOKEN}")
    result = page.evaluate(LAYOUT_CHECK)
    assert result["finite"] and result["same"]  # deterministic: the same graph opens the same way
    assert result["linked"] * 3 < result["apart"], result  # the two rings are separate clusters
    assert result["closest"] > 10, result  # no two nodes on top of each other (the spring length is 30)


def test_settings_and_prompts_are_edited_in_the_panel_and_reach_recall(page, service):
    """The chat's settings page sets its recall budget (seen in the chat's recall, not another's), a setting is
    reset to the global value, the global page sets config.yaml; a prompt edited in the panel reaches the
    injection's text, its diff shows the change, and a reset brings the shipped text back."""
    url, api = service
    open_panel(page, url, tab="settings")
    page.fill('input[name="recall.budget_tokens"]', "600")
    page.select_option('select[name="recall.mode"]', "rag")
    page.click("#settings-save")
    page.wait_for_function('document.querySelector("[data-path=\\"recall.budget_tokens\\"]")'
                           '.classList.contains("overridden")')
    assert api.get("/chats/story/settings").json()["overrides"]["recall"] == {"budget_tokens": 600, "mode": "rag"}
    injection = api.post("/chats/story/recall", json={"query": "Where is Rowan now?"}).json()
    assert injection["tokens"]["budget"] == 600 and injection["mode"] == "rag"
    assert api.post("/chats/big/recall", json={"query": "Person 3"}).json()["tokens"]["budget"] == 1500
    page.click('[data-path="recall.mode"] button.link')  # reset: back to config.yaml's (hybrid)
    page.click("#settings-save")
    page.wait_for_function('!document.querySelector("[data-path=\\"recall.mode\\"]").classList.contains("overridden")')
    assert api.get("/chats/story/settings").json()["overrides"]["recall"] == {"budget_tokens": 600}
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel_settings.png"), full_page=True)
    page.click("#settings-scope-global")
    page.wait_for_selector('[data-group="profiles"]')
    page.check('input[name="maintenance.reflection.enabled"]')
    page.click("#settings-save")
    page.wait_for_function('document.querySelector("[data-path=\\"maintenance.reflection.enabled\\"]")'
                           '.classList.contains("overridden")')
    assert api.get("/settings").json()["config"]["maintenance"] == {"reflection": {"enabled": True}}
    assert api.get("/chats/story/settings").json()["effective"]["maintenance"]["reflection"]["enabled"] is True
    api.patch("/settings", json={"maintenance": None})
    api.put("/chats/story/settings", json={})

    open_tab(page, "prompts")
    page.click('[data-prompt="inject_labels"]')
    page.wait_for_selector("#prompt-editor h2:has-text('inject_labels')")
    text = page.input_value("#prompt-text")
    page.fill("#prompt-text", text.replace('recalled: "Memory: recalled for this turn"', 'recalled: "Erinnerung"'))
    page.click("#prompt-save")
    page.wait_for_selector('[data-prompt="inject_labels"] .badge')
    injection = api.post("/chats/story/recall", json={"query": "Where is Rowan now?"}).json()
    assert "[Erinnerung]" in injection["text"] and "recalled for this turn" not in injection["text"]
    page.click("#prompt-show-diff")
    assert '+  recalled: "Erinnerung"' in page.inner_text("#prompt-diff")
    page.screenshot(path=str(ARTIFACTS / "panel_prompts.png"), full_page=True)
    page.fill("#prompt-text", "blocks: {}")  # the service refuses a labels file without its keys
    page.expected_failures.append("400 PUT " + url + "/api/v1/prompts/inject_labels")
    page.click("#prompt-save")
    page.wait_for_selector("#prompt-message.error")
    assert "missing blocks.persistent" in page.inner_text("#prompt-message")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#prompt-reset")
    page.wait_for_function('!document.querySelector("[data-prompt=\\"inject_labels\\"] .badge")')
    assert "recalled for this turn" in api.post("/chats/story/recall", json={"query": "Where is Rowan?"}).json()["text"]


def test_the_inbox_lists_a_contradiction_and_a_decision_is_one_commit(page, service):
    url, api = service
    node = {"level": 0, "parent": None, "importance": 5.0, "access_count": 0, "archived": False,
            "scope": {"layer": "objective", "owner": None, "region": None},
            "story_time": {"label": None, "segment": None},
            "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00", "children": []}
    graph = {"format": "memory-curator/graph", "version": 1, "schema": api.get("/schemas/default").json(),
             "nodes": [{**node, "id": "dead", "type": "event", "title": "Summary 1", "floor_from": 1, "floor_to": 1,
                        "fields": {"summary": "Mira dies of the fever at the mill."}},
                       {**node, "id": "alive", "type": "event", "title": "Summary 2", "floor_from": 3, "floor_to": 3,
                        "fields": {"summary": "Mira buys bread at the market."}}],
             "edges": [{"id": "e_conflict", "source": "alive", "target": "dead", "relation": "contradicts",
                        "strength": 0.8, "valid_from": 3, "valid_to": None, "created_at": node["created_at"],
                        "updated_at": node["created_at"]}]}
    assert api.post("/chats/inbox/import", json={"graph": graph, "mode": "restore"}).status_code == 201
    open_panel(page, url, chat="story", tab="inbox")
    assert "No open contradictions." in page.inner_text("#tab-inbox")
    page.select_option("#chat-select", "inbox")
    page.wait_for_selector('.contradiction[data-id="e_conflict"]')
    text = page.inner_text("#tab-inbox")
    assert "Mira buys bread at the market." in text and "Mira dies of the fever at the mill." in text
    page.click('.contradiction[data-id="e_conflict"] button[data-action="drop"]')
    page.wait_for_selector("#inbox-empty")
    nodes = {n["id"]: n for n in api.get("/chats/inbox/graph/all").json()["nodes"]}
    assert nodes["alive"]["archived"] and not nodes["dead"]["archived"]
    assert api.get("/chats/inbox/commits").json()["commits"][-1]["note"].startswith("contradiction e_conflict: drop")
    api.delete("/chats/inbox")
