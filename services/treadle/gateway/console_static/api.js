// The public API from a signed-in page: the session cookie authenticates, the CSRF token goes with every write.
let csrf = "";
const seen = new Map(); // thread id -> highest stream sequence written or seen (read-your-writes, min_seq)

export class ApiError extends Error {
  constructor(status, error) {
    super(error.message);
    this.status = status;
    this.code = error.code;
    this.details = error.details || {};
  }
}

export function setCsrf(token) { csrf = token || ""; }
export function noteSeq(thread, seq) { if (seq && seq > (seen.get(thread) || 0)) seen.set(thread, seq); }
export function seqOf(thread) { return seen.get(thread) || 0; }

export async function call(method, path, body, thread) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-Treadle-CSRF"] = csrf;
  if (thread && method === "GET" && seqOf(thread)) headers["X-Treadle-Min-Seq"] = String(seqOf(thread));
  const res = await fetch(path, {
    method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let doc = null;
  try { doc = text ? JSON.parse(text) : null; } catch { doc = null; }
  if (res.status === 401 && path.startsWith("/v1/")) window.dispatchEvent(new Event("treadle:signed-out"));
  if (!res.ok) {
    throw new ApiError(res.status, (doc && doc.error) || { code: "http_" + res.status, message: text || res.statusText });
  }
  if (thread && doc && typeof doc.seq === "number") noteSeq(thread, doc.seq);
  return doc;
}

export const get = (path, thread) => call("GET", path, undefined, thread);
export const post = (path, body, thread) => call("POST", path, body ?? {}, thread);
export const patch = (path, body, thread) => call("PATCH", path, body, thread);
export const del = (path, thread) => call("DELETE", path, undefined, thread);
