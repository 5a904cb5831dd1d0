// Memory Curator for SillyTavern: the chat's memory follows SillyTavern's own chat (its file and its character or
// group), SillyTavern's events drive it (edits, deletions, swipes, generations by type), and the memory block goes
// into the prompt through SillyTavern's extension-prompt mechanism, so any backend works. It talks to `curator serve`
// (started with `--allow-origin <this page's origin>`); see docs/sillytavern.md in the memory-curator repository.

import { eventSource, event_types, extension_prompt_roles, extension_prompt_types, saveSettingsDebounced, setExtensionPrompt } from '../../../../script.js';
import { extension_settings, saveMetadataDebounced } from '../../../extensions.js';
import { oai_settings } from '../../../openai.js';
import { Popup, POPUP_RESULT } from '../../../popup.js';
import { SyncedChat, cardSchema, characterName, claim, currentChat, floors, identity, scopeFiles, setClaim, userName } from './chat.js';
import { Client, ServiceError } from './client.js';
import { Drawer } from './drawer.js';

const NAME = 'memory_curator';
const PROMPT_KEY = 'MEMORY_CURATOR';
const DEFAULTS = {
    enabled: true,
    url: 'http://127.0.0.1:8787',
    token: '',
    timeout_ms: 30000,
    position: 'in_prompt', // in_prompt | in_chat | before_prompt (SillyTavern's extension prompt positions)
    depth: 4,
    role: 'system',
    scan: false, // let World Info scan the memory block
    model_source: 'connection', // connection | custom | none: the extraction model this extension names
    model_base_url: '',
    model_name: '',
    model_key_env: '',
    ask_on_delete: true,
    message_button: true,
};
const POSITIONS = { in_prompt: extension_prompt_types.IN_PROMPT, in_chat: extension_prompt_types.IN_CHAT,
    before_prompt: extension_prompt_types.BEFORE_PROMPT };
const ROLES = { system: extension_prompt_roles.SYSTEM, user: extension_prompt_roles.USER, assistant: extension_prompt_roles.ASSISTANT };

const settings = () => extension_settings[NAME];
const client = new Client(() => ({ url: settings().url, token: settings().token, timeoutMs: settings().timeout_ms }));
const synced = new SyncedChat();
const state = {
    file: null, // the open chat's file, as SillyTavern names it
    id: null, // its identity (scope, file, label)
    chat: null, // the memory chat it is bound to
    opened: null, // the service's answer to the last open
    extraction: null, // whether its extraction runs (and why not)
    generation: null, // the type of the generation under way (from GENERATION_STARTED)
    lastCard: null, // the injection of the last generation
    warned: new Set(), // the problems already shown as a toast (each once per chat)
};
let queue = Promise.resolve(); // the service hears the chat's events one at a time, in order
let drawer = null;

function enqueue(task) {
    const run = queue.then(task, task);
    queue = run.catch(() => {});
    return run;
}

/** Wait until every event so far has reached the service (the tests and the bench use it). */
function idle() { return queue.then(() => undefined); }

// ---- the extraction model this extension names (used when the service has none configured) ----------------------
function namedModel() {
    const s = settings();
    if (s.model_source === 'none') return null;
    if (s.model_source === 'custom') {
        return s.model_base_url && s.model_name ? withKey({ base_url: s.model_base_url, model: s.model_name }) : null;
    }
    // SillyTavern's own connection, when it is an OpenAI-compatible endpoint the service can reach
    if (oai_settings?.chat_completion_source === 'custom' && oai_settings.custom_url && oai_settings.custom_model) {
        return withKey({ base_url: oai_settings.custom_url, model: oai_settings.custom_model });
    }
    return null;
}

function withKey(model) {
    const env = settings().model_key_env.trim();
    return env ? { ...model, api_key_env: env } : model;
}

// ---- showing problems where the user is ---------------------------------------------------------------------
function warnOnce(key, title, message) {
    const tag = `${state.chat}|${key}|${message}`;
    if (state.warned.has(tag)) return;
    state.warned.add(tag);
    toastr.warning(message, title, { timeOut: 12000, preventDuplicates: true });
}

function noteExtraction(extraction) {
    if (!extraction) return;
    state.extraction = extraction;
    if (['no_model', 'failing'].includes(extraction.state)) {
        warnOnce('extraction', 'Memory is not being written', `${extraction.message}. ${extraction.hint || ''}`.trim());
    }
    drawer?.refreshStatus();
}

function serviceProblem(error) {
    const message = error instanceof ServiceError ? `${error.message}. ${error.hint}`.trim() : String(error);
    warnOnce('service', 'Memory Curator', message);
    drawer?.setProblem(message);
    console.warn('[Memory Curator]', error);
}

// ---- chat identity: CHAT_CHANGED opens the chat's memory (bound, forked for a branch, moved for a rename, new) ----
async function openChat() {
    setExtensionPrompt(PROMPT_KEY, '', POSITIONS[settings().position] ?? extension_prompt_types.IN_PROMPT, settings().depth);
    const id = identity();
    state.file = id?.file ?? null;
    state.id = id;
    state.chat = null;
    state.opened = null;
    state.lastCard = null;
    synced.reset(state.file);
    drawer?.chatChanged();
    if (!id || !settings().enabled) return;
    const messages = floors(); // the chat as it is now: later events are queued behind this open
    const claimed = claim();
    await enqueue(async () => {
        if (state.file !== id.file) return; // the user moved on meanwhile
        try {
            const files = claimed && claimed.file !== id.file ? await scopeFiles(id) : [];
            const opened = await client.open({ scope: id.scope, file: id.file, label: id.label, claim: claimed,
                files, schema: cardSchema(id), model: namedModel(), messages });
            if (state.file !== id.file) return;
            state.chat = opened.chat;
            state.opened = opened;
            synced.remember(messages);
            if (!claimed || claimed.chat !== opened.chat || claimed.file !== id.file) {
                setClaim(opened.chat, id.file);
                saveMetadataDebounced();
            }
            if (opened.action === 'forked') {
                toastr.info(`This chat got its own memory, copied from its parent up to message #${opened.fork.floor}.`,
                    'Memory Curator', { timeOut: 5000 });
            }
            noteExtraction(opened.extraction);
            drawer?.chatOpened();
        } catch (error) {
            serviceProblem(error);
        }
    });
}

// ---- events: the chat as SillyTavern holds it now, from the first floor that changed -----------------------------
/** Whether SillyTavern's open chat is the one memory is bound to (a new group chat's greetings arrive before its
 * CHAT_CHANGED: they must not reach the previous chat's memory). */
function current() {
    return !!state.file && identity()?.file === state.file;
}

function syncEvent(event, extra = {}) {
    if (!settings().enabled || !current()) return Promise.resolve();
    const file = state.file;
    const messages = floors();
    return enqueue(async () => {
        if (state.file !== file || !state.chat) return;
        if (synced.unchanged(messages) && !extra.force) return; // nothing new for memory
        await send(event, messages, extra);
    });
}

async function send(event, messages, extra) {
    const start = synced.firstChange(messages);
    const body = { event, messages: messages.slice(start), start, ...extra };
    delete body.force;
    let answer;
    try {
        answer = await client.event(state.chat, body);
    } catch (error) {
        if (error instanceof ServiceError && error.status === 400 && start > 0) {
            answer = await client.event(state.chat, { ...body, messages, start: 0 }); // out of step: send it all
        } else {
            throw error;
        }
    }
    synced.remember(messages);
    noteExtraction(answer.extraction);
    return answer;
}

function onEvent(event) {
    // SillyTavern awaits its listeners: the event is queued and the UI goes on (the queue keeps the order)
    return () => { syncEvent(event).catch(serviceProblem); };
}

function onSwiped() {
    const messages = currentChat();
    const last = messages[messages.length - 1];
    // a swipe past the last one starts a generation: its interceptor tells the service (without that reply)
    if (last && Number.isInteger(last.swipe_id) && Array.isArray(last.swipes) && last.swipe_id >= last.swipes.length) return;
    syncEvent('message_swiped').catch(serviceProblem);
}

function onGenerationStarted(type, _options, dryRun) {
    state.generation = { type: type || 'normal', dryRun: !!dryRun };
}

// ---- the generation: recall for the coming reply, its memory into the prompt --------------------------------------
async function interceptor(_chat, _contextSize, _abort) {
    const s = settings();
    const position = POSITIONS[s.position] ?? extension_prompt_types.IN_PROMPT;
    setExtensionPrompt(PROMPT_KEY, '', position, s.depth);
    const generation = state.generation || { type: 'normal', dryRun: false };
    if (!s.enabled || !current() || generation.dryRun || generation.type === 'quiet') return;
    const file = state.file;
    const all = floors();
    // a swipe being generated: the reply it replaces is not part of the prompt (SillyTavern leaves it out too)
    const messages = generation.type === 'swipe' ? all.slice(0, -1) : all;
    const replyFloor = ['swipe', 'continue'].includes(generation.type) ? all.length - 1 : all.length;
    const speaker = generation.type === 'impersonate' ? userName() : characterName();
    try {
        await enqueue(async () => {
            if (state.file !== file || !state.chat) return;
            const answer = await send('generation_started', messages,
                { generation_type: generation.type, speaker, reply_floor: replyFloor });
            const injection = answer.injection;
            if (!injection || state.file !== file) return;
            state.lastCard = injection;
            const chosen = chatPlacement(injection);
            setExtensionPrompt(PROMPT_KEY, injection.text || '', chosen.position, chosen.depth, s.scan, chosen.role);
            drawer?.showCard(injection);
        });
    } catch (error) {
        serviceProblem(error); // the generation goes on without memory
    }
}

/** Where the block goes: the chat's own recall settings when it has them, else this extension's. */
function chatPlacement(injection) {
    const s = settings();
    const own = state.opened?.settings?.recall || {};
    const position = own.position && POSITIONS[own.position] !== undefined ? POSITIONS[own.position] : POSITIONS[s.position];
    const depth = Number.isInteger(own.depth) ? Math.min(own.depth, 1000) : s.depth;
    const role = ROLES[own.role || s.role] ?? extension_prompt_roles.SYSTEM;
    return { position: position ?? extension_prompt_types.IN_PROMPT, depth, role, tokens: injection.tokens };
}

// ---- a deleted chat: offer to delete its memory --------------------------------------------------------------
async function onChatDeleted(file, group) {
    if (!settings().enabled) return;
    const id = identity();
    const scope = group ? 'group:*' : (id && !id.group ? id.scope : 'character:*');
    let deleteMemory = false;
    if (settings().ask_on_delete) {
        const answer = await Popup.show.confirm('Delete its memory too?',
            `The chat “${file}” was deleted. Delete its memory in Memory Curator as well? (No keeps the memory, unbound.)`);
        deleteMemory = answer === POPUP_RESULT.AFFIRMATIVE || answer === true;
    }
    try {
        await enqueue(() => client.forget({ scope, file, delete_memory: deleteMemory }));
        toastr.info(deleteMemory ? 'Its memory was deleted.' : 'Its memory was kept (unbound).', 'Memory Curator');
    } catch (error) {
        if (!(error instanceof ServiceError && error.status === 404)) serviceProblem(error);
    }
}

// ---- settings ---------------------------------------------------------------------------------------------------
function loadSettings() {
    extension_settings[NAME] = Object.assign({}, DEFAULTS, extension_settings[NAME] || {});
}

async function addSettingsPanel() {
    const html = await (await fetch(new URL('settings.html', import.meta.url))).text();
    $('#extensions_settings2').append(html);
    const s = settings();
    const bind = (id, key, kind = 'text') => {
        const input = $(`#${id}`);
        if (kind === 'checkbox') input.prop('checked', !!s[key]); else input.val(s[key]);
        input.on('input change', () => {
            s[key] = kind === 'checkbox' ? !!input.prop('checked') : kind === 'number' ? Number(input.val()) : String(input.val());
            saveSettingsDebounced();
            if (key === 'model_source') showModelFields();
        });
    };
    bind('mc_enabled', 'enabled', 'checkbox');
    bind('mc_url', 'url');
    bind('mc_token', 'token');
    bind('mc_position', 'position');
    bind('mc_depth', 'depth', 'number');
    bind('mc_role', 'role');
    bind('mc_scan', 'scan', 'checkbox');
    bind('mc_model_source', 'model_source');
    bind('mc_model_base_url', 'model_base_url');
    bind('mc_model_name', 'model_name');
    bind('mc_model_key_env', 'model_key_env');
    bind('mc_ask_on_delete', 'ask_on_delete', 'checkbox');
    const showModelFields = () => $('#mc_model_custom').toggle(settings().model_source === 'custom');
    showModelFields();
    $('#mc_connect').on('click', async () => {
        const status = $('#mc_status');
        status.text('Connecting...');
        try {
            const health = await client.health();
            status.text(`Connected (worker ${health.worker}).`).attr('class', 'mc-ok');
            state.warned.clear();
            await openChat();
        } catch (error) {
            status.text(error instanceof ServiceError ? `${error.message}. ${error.hint}` : String(error)).attr('class', 'mc-bad');
        }
    });
    $('#mc_open_drawer').on('click', () => drawer.toggle(true));
}

function addMenuEntry() {
    const entry = $('<div id="mc_menu" class="list-group-item flex-container flexGap5" title="Memory Curator">'
        + '<div class="fa-solid fa-brain extensionsMenuExtensionButton"></div><span>Memory</span></div>');
    entry.on('click', () => drawer.toggle());
    $('#extensionsMenu').append(entry);
}

/** A button on each message that opens its recall card. */
function addMessageButtons() {
    const template = $('#message_template .mes_buttons .extraMesButtons');
    if (template.length && !template.find('.mc_card_button').length) {
        template.prepend('<div title="What memory was injected for this reply" class="mes_button mc_card_button fa-solid fa-brain"></div>');
    }
    $(document).on('click', '.mc_card_button', function () {
        const floor = Number($(this).closest('.mes').attr('mesid'));
        drawer.toggle(true);
        drawer.showFloor(floor);
    });
}

// ---- start ------------------------------------------------------------------------------------------------------
jQuery(async () => {
    loadSettings();
    drawer = new Drawer({ client, state, settings, save: saveSettingsDebounced, reopen: openChat });
    await addSettingsPanel();
    addMenuEntry();
    addMessageButtons();
    window['memoryCuratorInterceptor'] = interceptor;
    // for tests and the bench: `inSync()` says whether the service has the chat as SillyTavern holds it now
    const inSync = () => !settings().enabled || !current() || (state.chat !== null && synced.unchanged(floors()));
    window['__memoryCurator'] = { idle, inSync, state, client, settings, synced };
    eventSource.on(event_types.CHAT_CHANGED, () => { openChat().catch(serviceProblem); });
    eventSource.on(event_types.GENERATION_STARTED, onGenerationStarted);
    eventSource.on(event_types.MESSAGE_RECEIVED, onEvent('message_received'));
    eventSource.on(event_types.GENERATION_ENDED, onEvent('generation_ended'));
    eventSource.on(event_types.GENERATION_STOPPED, onEvent('generation_stopped'));
    eventSource.on(event_types.MESSAGE_EDITED, onEvent('message_edited'));
    eventSource.on(event_types.MESSAGE_DELETED, onEvent('message_deleted'));
    eventSource.on(event_types.MESSAGE_SWIPED, onSwiped);
    eventSource.on(event_types.CHAT_DELETED, (name) => { onChatDeleted(name, false).catch(serviceProblem); });
    eventSource.on(event_types.GROUP_CHAT_DELETED, (name) => { onChatDeleted(name, true).catch(serviceProblem); });
    for (const changed of [event_types.CHATCOMPLETION_MODEL_CHANGED, event_types.CHATCOMPLETION_SOURCE_CHANGED]) {
        eventSource.on(changed, () => { if (state.chat) openChat().catch(serviceProblem); }); // the named model follows
    }
    if (identity()) await openChat();
});
