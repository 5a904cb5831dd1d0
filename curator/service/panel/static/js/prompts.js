// Prompts: every template the engine sends to a model, and the injection's templates and headings. Your version of
// a template is kept in the data directory's prompts/ folder (an upgrade never touches it); the shipped text stays
// beside it: compare the two, or reset to the shipped one. The service checks a template before saving it (its
// $placeholders must be ones the shipped template gets).

import { del, enc, get, put } from "./api.js";
import { clear, h, reportError, toast } from "./dom.js";

let selected = null;

export async function render(ctx, section) {
  const { folder, prompts } = await get("/prompts");
  selected = selected && prompts.some((p) => p.name === selected) ? selected : prompts[0].name;
  const list = h("ul", { class: "prompt-list", id: "prompt-list" }, prompts.map((p) => h("li", {},
    h("button", { class: p.name === selected ? "link selected" : "link", dataset: { prompt: p.name },
      onclick: () => { selected = p.name; render(ctx, section); } }, p.name,
      p.overridden ? h("b", { class: "badge" }, " yours") : null,
      p.shipped_changed ? h("b", { class: "badge warn", title: "The shipped text changed since you saved yours" }, " shipped changed") : null))));
  const editor = h("div", { class: "prompt-editor", id: "prompt-editor" });
  clear(section, h("p", { class: "muted" }, `Your templates live in ${folder}.`), h("div", { class: "prompt-layout" }, list, editor));
  await showPrompt(editor, selected, () => render(ctx, section));
}

async function showPrompt(editor, name, reload) {
  const prompt = await get(`/prompts/${enc(name)}`);
  const text = h("textarea", { id: "prompt-text", rows: 22, spellcheck: false }, prompt.text);
  const message = h("p", { id: "prompt-message", role: "status" });
  const diff = h("pre", { id: "prompt-diff", hidden: true }, prompt.diff || "(the same as the shipped text)");
  const shipped = h("pre", { id: "prompt-shipped", hidden: true }, prompt.shipped);
  clear(editor,
    h("h2", {}, name, prompt.overridden ? " (yours)" : " (shipped)"),
    h("p", {}, prompt.used_for),
    h("p", { class: "muted" }, prompt.kind === "labels"
      ? "The injection's headings (YAML); keep every key."
      : `Placeholders: ${prompt.placeholders.map((p) => "$" + p).join(", ") || "none"} (write $$ for a literal $).`),
    prompt.shipped_changed ? h("p", { class: "warn" }, "The shipped text changed since you saved yours: compare them before keeping yours.") : null,
    text,
    h("div", { class: "row" },
      h("button", { class: "primary", id: "prompt-save", onclick: async () => {
        try {
          await put(`/prompts/${enc(name)}`, { text: text.value });
          toast(`Saved ${name}`);
          reload();
        } catch (err) { message.className = "error"; message.textContent = reportError(err); }
      } }, "Save"),
      h("button", { id: "prompt-reset", disabled: !prompt.overridden, onclick: async () => {
        if (!confirm(`Drop your version of ${name} and use the shipped one?`)) return;
        try { await del(`/prompts/${enc(name)}`); toast(`${name}: the shipped text again`); reload(); } catch (err) { reportError(err); }
      } }, "Reset to shipped"),
      h("button", { id: "prompt-show-diff", onclick: () => { diff.hidden = !diff.hidden; } }, "Diff against shipped"),
      h("button", { onclick: () => { shipped.hidden = !shipped.hidden; } }, "Shipped text")),
    message, diff, shipped);
}
