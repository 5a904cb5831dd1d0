// The API client: every call carries the bearer token (kept in this tab's session storage); errors become
// ApiError with the service's own message and hint.

const TOKEN_KEY = "curator.token";
const BASE = "/api/v1";

export class ApiError extends Error {
  constructor(status, code, message, hint) {
    super(message);
    this.status = status;
    this.code = code;
    this.hint = hint || "";
  }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
}

export const enc = encodeURIComponent;

export async function api(method, path, body) {
  // x-curator-client: the service refuses state-changing requests without it (or a JSON body), so that other
  // web pages cannot make the browser send them.
  const headers = { accept: "application/json", "x-curator-client": "panel" };
  if (token()) headers.authorization = "Bearer " + token();
  if (body !== undefined) headers["content-type"] = "application/json";
  const url = path.startsWith("/openapi") ? path : BASE + path;
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const e = data.error || {};
    throw new ApiError(response.status, e.code || String(response.status), e.message || response.statusText, e.hint);
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body === undefined ? {} : body);
export const put = (path, body) => api("PUT", path, body);
export const patch = (path, body) => api("PATCH", path, body);
export const del = (path) => api("DELETE", path);

export const chatPath = (chat, rest = "") => `/chats/${enc(chat)}${rest}`;

/** Poll a job until it ends; `onProgress(job)` sees every state on the way. */
export async function waitJob(job, onProgress, intervalMs = 300) {
  for (;;) {
    onProgress && onProgress(job);
    if (!["queued", "running"].includes(job.state)) return job;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
    job = await get(`/jobs/${enc(job.id)}`);
  }
}

let openapiPaths = null;
/** The service's own list of paths, to offer only the operations this version has. */
export async function servicePaths() {
  if (!openapiPaths) openapiPaths = get("/openapi.json").then((doc) => new Set(Object.keys(doc.paths || {})));
  return openapiPaths;
}
