// SillyTavern's chat as memory sees it: its identity (scope + file), its floors (one per message, floor = mesid), and
// what changed since the last sync (so an event sends a tail window from the first changed floor, not the chat).

import { characters, chat, chat_metadata, getCurrentChatId, getPastCharacterChats, name1, name2, this_chid } from '../../../../script.js';
import { groups, selected_group } from '../../../group-chats.js';

export const METADATA_KEY = 'memory_curator';
const MAX_NAME = 200;
const MAX_TEXT = 200000;

/** The open chat's identity, or null when no chat is open (the welcome screen, a character's info page). */
export function identity() {
    const file = getCurrentChatId();
    if (!file) return null;
    if (selected_group) {
        const group = groups.find((g) => g.id === selected_group);
        if (!group) return null;
        return { scope: `group:${group.id}`, file: String(file), label: group.name || 'group', group: true };
    }
    const character = characters[this_chid];
    if (!character) return null;
    return { scope: `character:${character.avatar}`, file: String(file), label: character.name || 'character', group: false };
}

/** One floor per message: role, name, the active swipe's text and its index (hidden messages count as system). */
export function floors(messages = chat) {
    return messages.map((m) => ({
        role: m.is_user ? 'user' : (m.is_system ? 'system' : 'assistant'),
        name: String(m.name || '').slice(0, MAX_NAME),
        text: String(m.mes ?? '').slice(0, MAX_TEXT),
        swipe_id: Number.isInteger(m.swipe_id) && m.swipe_id >= 0 ? m.swipe_id : 0,
    }));
}

const key = (f) => `${f.role}\u0001${f.name}\u0001${f.text}`;

/** What the service holds of the open chat, as last synced: one key per floor. */
export class SyncedChat {
    constructor() { this.reset(null); }

    reset(file) {
        this.file = file;
        this.keys = null; // unknown: the next sync sends the whole chat
    }

    /** The first floor that differs from what was synced (the chat's length when nothing did). */
    firstChange(list) {
        if (!this.keys) return 0;
        let i = 0;
        while (i < this.keys.length && i < list.length && this.keys[i] === key(list[i])) i++;
        return i;
    }

    unchanged(list) { return this.keys !== null && this.keys.length === list.length && this.firstChange(list) === list.length; }

    remember(list) { this.keys = list.map(key); }
}

/** What this chat's metadata says about its memory: {chat, file}, copied by SillyTavern into branches. */
export function claim() {
    const value = chat_metadata?.[METADATA_KEY];
    return value && typeof value.chat === 'string' ? { chat: value.chat, file: String(value.file || '') } : null;
}

export function setClaim(memoryChat, file) {
    chat_metadata[METADATA_KEY] = { chat: memoryChat, file };
}

/** The chat files the open chat's character or group has (tells a branch, whose parent is still there, from a rename). */
export async function scopeFiles(id) {
    if (id.group) {
        const group = groups.find((g) => `group:${g.id}` === id.scope);
        return group ? group.chats.map(String) : [];
    }
    try {
        const chats = await getPastCharacterChats(this_chid);
        return (Array.isArray(chats) ? chats : Object.values(chats || {})).map((c) => String(c.file_name || '').replace(/\.jsonl$/, ''));
    } catch (error) {
        console.warn('[Memory Curator] could not list the character\'s chats', error);
        return [];
    }
}

/** The schema the character card carries (`data.extensions.memory_curator.schema`), or for a group its first member's. */
export function cardSchema(id) {
    const fromCard = (c) => c?.data?.extensions?.[METADATA_KEY]?.schema ?? null;
    if (!id.group) return fromCard(characters[this_chid]);
    const group = groups.find((g) => `group:${g.id}` === id.scope);
    for (const avatar of group?.members || []) {
        const found = fromCard(characters.find((c) => c.avatar === avatar));
        if (found) return found;
    }
    return null;
}

export function userName() { return name1; }
export function characterName() { return name2; }
export function chatLength() { return chat.length; }
export function currentChat() { return chat; }
