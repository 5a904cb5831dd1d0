// The Memory drawer: a panel at the side of the chat, open while you write. "Reply" shows what memory was injected
// for a reply and why (its recall card); "Memory" embeds the service's own panel (graph, node editor, schema,
// operations) for this chat; "Settings" is the chat's memory settings; "Status" says whether memory is being written.
// Everything the service sends is shown as text (never parsed as HTML).

import { writeExtensionField } from '../../../extensions.js';
import { this_chid } from '../../../../script.js';
import { ServiceError } from './client.js';

const TABS = [['card', 'Reply'], ['panel', 'Memory'], ['settings', 'Settings'], ['status', 'Status']];

function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const child of children.flat()) {
        if (child === null || child === undefined || child === false) continue;
        el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
}

function field(label, input, help) {
    return h('label', { class: 'mc-field' }, h('span', {}, label), input, help ? h('small', {}, help) : null);
}

function select(options, value) {
    const el = h('select', { class: 'text_pole' }, options.map(([v, text]) => h('option', { value: v }, text)));
    el.value = value ?? options[0][0];
    return el;
}

export class Drawer {
    constructor({ client, state, settings }) {
        this.client = client;
        this.state = state;
        this.settings = settings;
        this.tab = 'card';
        this.floor = null; // the reply whose card is shown (null: the last generation's)
        this.problem = '';
        this.body = h('div', { class: 'mc-body' });
        this.tabs = h('div', { class: 'mc-tabs', role: 'tablist' }, TABS.map(([id, text]) =>
            h('button', { class: 'menu_button', 'data-tab': id, role: 'tab', onclick: () => this.show(id) }, text)));
        this.root = h('div', { id: 'memory_curator_drawer', class: 'mc-drawer', hidden: true },
            h('div', { class: 'mc-head' }, h('b', {}, 'Memory'), h('span', { class: 'mc-chat' }),
                h('div', { class: 'mc-close fa-solid fa-xmark', title: 'Close', onclick: () => this.toggle(false) })),
            this.tabs, this.body);
        document.body.append(this.root);
    }

    /** Put `children` in the drawer's body (null and false are left out). */
    fill(...children) { this.body.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false)); }

    get open() { return !this.root.hidden; }

    toggle(force) {
        this.root.hidden = force === undefined ? this.open : !force;
        if (this.open) this.show(this.tab);
    }

    chatChanged() {
        this.floor = null;
        this.problem = '';
        this.panelFor = null;
        if (this.open) this.show(this.tab);
    }

    chatOpened() { if (this.open) this.show(this.tab); }
    refreshStatus() { if (this.open && this.tab === 'status') this.show('status'); }
    setProblem(message) { this.problem = message; if (this.open && this.tab === 'status') this.show('status'); }

    showCard(card) {
        if (this.open && this.tab === 'card' && this.floor === null) this.renderCard(card);
    }

    showFloor(floor) {
        this.floor = Number.isInteger(floor) ? floor : null;
        this.show('card');
    }

    async show(tab) {
        this.tab = tab;
        for (const b of this.tabs.querySelectorAll('button')) b.classList.toggle('mc-active', b.dataset.tab === tab);
        this.root.querySelector('.mc-chat').textContent = this.state.chat ? ` · ${this.state.id?.label || ''}` : '';
        if (!this.state.chat) {
            this.fill(h('p', { class: 'mc-muted' }, this.problem
                || 'No memory for this chat yet: open a chat (and check Extensions > Memory Curator).'));
            return;
        }
        try {
            if (tab === 'card') await this.cardTab();
            else if (tab === 'panel') this.panelTab();
            else if (tab === 'settings') await this.settingsTab();
            else await this.statusTab();
        } catch (error) {
            this.fill(h('p', { class: 'mc-bad' },
                error instanceof ServiceError ? `${error.message}. ${error.hint}` : String(error)));
        }
    }

    // ---- Reply: the recall card ------------------------------------------------------------------------------
    async cardTab() {
        if (this.floor === null && this.state.lastCard) return this.renderCard(this.state.lastCard);
        const floor = this.floor ?? (await this.client.get(this.client.chatPath(this.state.chat, '/cards'))).floors.at(-1);
        if (floor === undefined) {
            this.fill(h('p', { class: 'mc-muted' }, 'No reply has been generated with memory in this chat yet.'));
            return;
        }
        try {
            this.renderCard(await this.client.card(this.state.chat, floor));
        } catch (error) {
            if (!(error instanceof ServiceError && error.status === 404)) throw error;
            this.fill(h('p', { class: 'mc-muted' }, `No recall card for message #${floor} (it was not `
                + 'generated with memory, or not since this chat was opened with the extension).'));
        }
    }

    renderCard(card) {
        const tokens = card.tokens || {};
        const blocks = card.blocks || {};
        const rows = [];
        for (const [block, items] of Object.entries(blocks)) {
            for (const n of items) {
                rows.push(h('tr', {}, h('td', {}, block), h('td', {}, n.type), h('td', { class: 'mc-title' }, n.title),
                    h('td', {}, n.view || ''), h('td', {}, Number(n.score).toFixed(3)), h('td', {}, n.reason || ''),
                    h('td', {}, `${n.floors?.[0]}–${n.floors?.[1]}`)));
            }
        }
        const left = card.left_out_count ? h('p', { class: 'mc-muted' },
            `${card.left_out_count} more left out (${(card.left_out || []).slice(0, 5).map((x) => `${x.title || x.id}: ${x.why || x.reason || ''}`).join('; ')})`) : null;
        this.fill(
            h('p', { class: 'mc-card-head' },
                `Message #${card.reply_floor ?? card.floor} · ${card.generation_type || 'normal'}`
                + (card.speaker_requested ? ` · for ${card.speaker_requested}` : '')
                + ` · ${tokens.total ?? 0}/${tokens.budget ?? '?'} tokens · ${card.mode}${card.reused ? ' (reused)' : ''}`),
            card.query ? h('p', {}, h('small', {}, 'Query: '), card.query) : null,
            rows.length ? h('table', { class: 'mc-table' },
                h('thead', {}, h('tr', {}, ['block', 'type', 'memory', 'view', 'score', 'why', 'floors'].map((t) => h('th', {}, t)))),
                h('tbody', {}, rows)) : h('p', { class: 'mc-muted' }, 'Nothing was recalled.'),
            left,
            h('details', { open: true }, h('summary', {}, 'Injected text'), h('pre', { class: 'mc-pre' }, card.text || '(empty)')),
        );
    }

    // ---- Memory: the service's panel, embedded ------------------------------------------------------------------
    panelTab() {
        if (this.panelFor !== this.state.chat || !this.frame) {
            this.panelFor = this.state.chat;
            this.frame = h('iframe', { class: 'mc-frame', src: this.client.panelUrl(this.state.chat),
                title: 'Memory panel', referrerpolicy: 'no-referrer' });
        }
        this.fill(
            h('div', { class: 'mc-row' }, h('small', { class: 'mc-muted' }, 'The memory panel of this chat: graph, nodes, schema, operations.'),
                h('button', { class: 'menu_button', onclick: () => { this.frame = null; this.panelTab(); } }, 'Reload'),
                h('a', { href: this.client.panelUrl(this.state.chat), target: '_blank', rel: 'noopener noreferrer' }, 'Open in a tab')),
            this.frame);
    }

    // ---- Settings: the chat's memory settings ----------------------------------------------------------------
    async settingsTab() {
        const chat = await this.client.chat(this.state.chat);
        const s = chat.settings || {};
        const ex = s.extraction || {};
        const rc = s.recall || {};
        const every = h('input', { type: 'number', min: 1, max: 100, class: 'text_pole', value: ex.extract_every ?? 1 });
        const channel = select([['extractor', 'Built-in extractor'], ['curator', 'Curator agent'], ['both', 'Both'],
            ['off', 'Off (remember nothing new)']], ex.channel);
        const mode = select([['', 'Service default'], ['hybrid', 'hybrid'], ['rag', 'rag'], ['llm', 'llm']], rc.mode ?? '');
        const budget = h('input', { type: 'number', min: 50, max: 100000, class: 'text_pole', placeholder: 'service default', value: rc.budget_tokens ?? '' });
        const speakerRule = select([['auto', 'The character about to speak'], ['fixed', 'Always this name:']], rc.speaker ? 'fixed' : 'auto');
        const speaker = h('input', { type: 'text', class: 'text_pole', maxlength: 200, value: rc.speaker ?? '' });
        const position = select([['', 'As in the extension settings'], ['in_prompt', 'After the story string'],
            ['in_chat', 'In the chat, at a depth'], ['before_prompt', 'Before the story string']], rc.position ?? '');
        const depth = h('input', { type: 'number', min: 0, max: 1000, class: 'text_pole', placeholder: 'extension setting', value: Number.isInteger(rc.depth) && rc.depth <= 1000 ? rc.depth : '' });
        const role = select([['', 'As in the extension settings'], ['system', 'system'], ['user', 'user'], ['assistant', 'assistant']], rc.role ?? '');
        const result = h('p', { class: 'mc-muted' });
        const save = async () => {
            const recall = {};
            if (mode.value) recall.mode = mode.value;
            if (budget.value) recall.budget_tokens = Number(budget.value);
            if (speakerRule.value === 'fixed' && speaker.value.trim()) recall.speaker = speaker.value.trim();
            if (position.value) recall.position = position.value;
            if (depth.value !== '') recall.depth = Number(depth.value);
            if (role.value) recall.role = role.value;
            const next = { extraction: { ...ex, extract_every: Number(every.value) || 1, channel: channel.value },
                maintenance: s.maintenance || {}, recall, model: s.model || {} };
            try {
                const saved = await this.client.putSettings(this.state.chat, next);
                if (this.state.opened) this.state.opened.settings = saved.settings;
                result.textContent = 'Saved.';
                result.className = 'mc-ok';
            } catch (error) {
                result.textContent = error instanceof ServiceError ? `${error.message}. ${error.hint}` : String(error);
                result.className = 'mc-bad';
            }
        };
        const toCard = async () => {
            const schema = await this.client.get(this.client.chatPath(this.state.chat, '/schema'));
            await writeExtensionField(this_chid, 'memory_curator', { schema });
            result.textContent = `The character card now carries the schema “${schema.name}”: new chats of this character use it.`;
            result.className = 'mc-ok';
        };
        this.fill(
            h('p', { class: 'mc-muted' }, `Schema: ${chat.schema} · ${chat.floors} messages · memory chat ${chat.id}`),
            h('h4', {}, 'Extraction'), field('Extract every N replies', every), field('Who writes memory', channel),
            h('h4', {}, 'Recall'), field('Mode', mode), field('Budget (tokens)', budget),
            field('Point of view', speakerRule, 'In group chats, "the character about to speak" is the one SillyTavern drafted.'),
            field('Name', speaker), field('Where the memory goes', position), field('Depth', depth), field('Role', role),
            h('div', { class: 'mc-row' }, h('button', { class: 'menu_button', onclick: save }, 'Save'),
                this.state.id && !this.state.id.group ? h('button', { class: 'menu_button', onclick: () => toCard().catch((e) => { result.textContent = String(e.message || e); }) },
                    'Put this schema on the character card') : null),
            result);
    }

    // ---- Status: is memory being written? -------------------------------------------------------------------
    async statusTab() {
        const [status, recent] = await Promise.all([this.client.status(this.state.chat), this.client.events(this.state.chat)]);
        const ex = status.extraction || {};
        const model = ex.model ? `${ex.model.model}${ex.model.base_url ? ' at ' + ex.model.base_url : ''} (${ex.model.source})` : 'none';
        const b = status.binding || {};
        this.fill(
            this.problem ? h('p', { class: 'mc-bad' }, this.problem) : null,
            h('p', { class: ex.state === 'ok' ? 'mc-ok' : ex.state === 'off' ? 'mc-muted' : 'mc-bad', 'data-state': ex.state },
                ex.state === 'ok' ? `Memory is being written (${model}).` : `${ex.message}${ex.hint ? '. ' + ex.hint : ''}`),
            h('table', { class: 'mc-table' }, h('tbody', {},
                [['Memory chat', status.chat], ['SillyTavern chat', `${b.file || '?'} (${b.scope || '?'})`],
                    ['Forked from', status.fork ? `${status.fork.parent} at message #${status.fork.floor}` : '—'],
                    ['Schema', status.schema], ['Messages', status.floors], ['Commits', status.commits],
                    ['Memories', `${status.graph?.nodes_active ?? 0} active, ${status.graph?.edges ?? 0} links`],
                    ['LLM calls', `${status.usage?.calls ?? 0} (${(status.usage?.input_tokens ?? 0) + (status.usage?.output_tokens ?? 0)} tokens)`],
                ].map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, String(v)))))),
            h('h4', {}, 'Recent events'),
            h('table', { class: 'mc-table' }, h('tbody', {}, (recent.events || []).slice(0, 15).map((e) =>
                h('tr', {}, h('td', {}, e.event + (e.generation_type ? ` (${e.generation_type})` : '')),
                    h('td', {}, e.dirty_floor !== null && e.dirty_floor !== undefined ? `rolled back from #${e.dirty_floor} (${e.reason})` : ''),
                    h('td', {}, e.restored ? `${e.restored} restored` : ''), h('td', {}, e.speaker ? `for ${e.speaker}` : ''),
                    h('td', {}, `${e.ms} ms`))))));
    }
}
