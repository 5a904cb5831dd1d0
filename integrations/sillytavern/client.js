// The memory service's HTTP API, as this extension uses it. Every request is JSON with an `X-Curator-Client` header
// (the service refuses writes without them, so other web pages cannot make a browser send them) and the service's
// bearer token when one is set. SillyTavern's own CSRF token and cookies never go to the service.

export class ServiceError extends Error {
    constructor(status, code, message, hint) {
        super(message);
        this.status = status;
        this.code = code;
        this.hint = hint || '';
    }
}

export class Client {
    /** @param {() => {url: string, token: string, timeoutMs: number}} config read on every call */
    constructor(config) {
        this.config = config;
    }

    base() {
        return String(this.config().url || '').replace(/\/+$/, '');
    }

    async request(method, path, body, { timeoutMs } = {}) {
        const { token, timeoutMs: configured } = this.config();
        const headers = { 'Accept': 'application/json', 'X-Curator-Client': 'sillytavern' };
        if (token) headers['Authorization'] = `Bearer ${token}`;
        if (body !== undefined) headers['Content-Type'] = 'application/json';
        const controller = new AbortController();
        const timer = setTimeout(() => controller.abort(), timeoutMs || configured || 30000);
        let response;
        try {
            response = await fetch(this.base() + '/api/v1' + path, {
                method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                signal: controller.signal, credentials: 'omit', mode: 'cors', cache: 'no-store',
            });
        } catch (error) {
            const reason = controller.signal.aborted ? 'timed out' : 'could not be reached';
            throw new ServiceError(0, 'unreachable', `the memory service at ${this.base()} ${reason}`,
                'Start it with `curator serve --allow-origin ' + location.origin + '`, or fix the URL in '
                + 'Extensions > Memory Curator.');
        } finally {
            clearTimeout(timer);
        }
        const data = await response.json().catch(() => ({}));
        if (!response.ok) {
            const e = data.error || {};
            throw new ServiceError(response.status, e.code || String(response.status), e.message || response.statusText,
                e.hint);
        }
        return data;
    }

    get(path, options) { return this.request('GET', path, undefined, options); }
    post(path, body, options) { return this.request('POST', path, body === undefined ? {} : body, options); }
    put(path, body, options) { return this.request('PUT', path, body, options); }

    chatPath(chat, rest = '') { return `/chats/${encodeURIComponent(chat)}${rest}`; }

    // front-end chats
    open(body) { return this.post('/frontends/sillytavern/open', body, { timeoutMs: 120000 }); }
    rename(body) { return this.post('/frontends/sillytavern/rename', body); }
    forget(body) { return this.post('/frontends/sillytavern/forget', body); }
    event(chat, body, options) { return this.post(this.chatPath(chat, '/events'), body, options); }
    card(chat, floor) { return this.get(this.chatPath(chat, `/cards/${floor}`)); }
    status(chat) { return this.get(this.chatPath(chat, '/status')); }
    events(chat) { return this.get(this.chatPath(chat, '/events')); }
    chat(chat) { return this.get(this.chatPath(chat)); }
    putSettings(chat, settings) { return this.put(this.chatPath(chat, '/settings'), settings); }
    health() { return this.get('/health', { timeoutMs: 5000 }); }

    /** The memory panel's address for a chat (it runs on the service's own origin, so it talks to the API itself). */
    panelUrl(chat) {
        const token = this.config().token;
        return `${this.base()}/panel/?chat=${encodeURIComponent(chat)}${token ? '#token=' + encodeURIComponent(token) : ''}`;
    }
}
