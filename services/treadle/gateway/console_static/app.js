// Treadle console: plain ES modules, no framework. Every screen reads and writes the public /v1 API.
import { ApiError, call, del, get, noteSeq, patch, post, setCsrf } from "./api.js";
import { threadScreen } from "./thread.js";

export const main = () => document.getElementById("main");

// h("div.cls", {attrs}, children...): elements built from text only (never innerHTML), so no reply can inject markup.
export function h(spec, attrs, ...kids) {
  const [tag, ...classes] = spec.split(".");
  const el = document.createElement(tag || "div");
  if (classes.length) el.className = classes.join(" ");
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) { kids.unshift(attrs); attrs = null; }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k in el && k !== "list") el[k] = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

// An error exactly as the API stated it: code, message, details.
export function errorBox(err) {
  if (err instanceof ApiError) {
    return h("div.error", { role: "alert" }, h("b", err.code), " ", err.message,
      Object.keys(err.details).length ? h("code", " " + JSON.stringify(err.details)) : null);
  }
  return h("div.error", { role: "alert" }, String(err && err.message ? err.message : err));
}

export function showError(where, err) {
  where.querySelectorAll(":scope > .error").forEach((e) => e.remove());
  where.prepend(errorBox(err));
}

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");

let session = null;

async function signIn(token) {
  const info = await call("POST", "/console/session", { token });
  session = info;
  setCsrf(info.csrf_token);
}

function signInScreen(err) {
  const input = h("input", { type: "password", name: "token", placeholder: "trd_…", autocomplete: "off", required: true });
  const form = h("form.card.signin", { onsubmit: async (ev) => {
    ev.preventDefault();
    try { await signIn(input.value); input.value = ""; route(); } catch (e) { showError(form, e); }
  } }, h("h1", "Sign in"), h("label", "API token ", input), h("button", { type: "submit" }, "Sign in"),
  h("p.muted", "The token is exchanged for a session cookie; the page never keeps it."));
  main().replaceChildren(form);
  if (err) showError(form, err);
}

function header() {
  const who = document.getElementById("who");
  if (!session) { who.replaceChildren(); return; }
  who.replaceChildren(h("span.muted", `${session.user} @ ${session.tenant}`), " ",
    h("button.link", { onclick: async () => {
      try { await del("/console/session"); } finally { session = null; setCsrf(""); location.hash = "#/"; route(); }
    } }, "Sign out"));
}

// A provider by name: the built-in ones offered, any other typed (an ACP agent a deployment configured is
// "acp-<name>"; the API refuses a name it does not know, and the page shows that refusal).
export function providerField(id, attrs) {
  const input = h("input", { name: "provider", list: id, maxLength: 64, size: 12, autocomplete: "off", ...attrs });
  const known = h("datalist", { id }, ["scripted", "codex", "claude", "acp-claude", "acp-codex"].map((p) => h("option", { value: p })));
  return [input, known];
}

// --- thread list ---------------------------------------------------------------------------------

function statusOf(t) { return t.active_run_id ? "running" : (t.last_run_status || "idle"); }

async function listScreen() {
  const rows = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "More");
  // The API searches titles (`q`), so a search finds threads on pages not loaded yet; typing restarts the list.
  const search = h("input", { type: "search", placeholder: "Search titles", maxLength: 200, oninput: () => restart() });
  const box = h("section.card", h("div.row", h("h1", "Threads"), h("a.button", { href: "#/new" }, "New thread"), search),
    h("table.threads", h("thead", h("tr", ["Title", "Status", "Provider", "Runs", "Last activity"].map((c) => h("th", c)))), rows),
    more);
  main().replaceChildren(box);
  let cursor = null, query = "", generation = 0, timer = null;
  const page = async () => {
    const mine = generation;
    try {
      const qs = new URLSearchParams({ limit: "25" });
      if (query) qs.set("q", query);
      if (cursor) qs.set("cursor", cursor);
      const doc = await get("/v1/threads?" + qs);
      if (mine !== generation) return; // the search changed while this page was on its way
      for (const t of doc.items) {
        rows.append(h("tr", { dataset: { title: t.title || t.id, thread: t.id } },
          h("td", h("a", { href: "#/t/" + t.id }, t.title || "(untitled)"), h("div.muted.small", t.id)),
          h("td", h("span.status." + statusOf(t), statusOf(t))), h("td", t.provider), h("td", t.runs),
          h("td.activity", { title: "created " + when(t.created_at) }, when(t.last_activity_at || t.created_at))));
      }
      cursor = doc.next_cursor;
      more.hidden = !cursor;
      if (!cursor && !rows.children.length) {
        rows.append(h("tr", h("td", { colSpan: 5 }, query ? "No thread's title matches." : "No threads yet.")));
      }
    } catch (e) { if (mine === generation) showError(box, e); }
  };
  const restart = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      generation += 1; cursor = null; query = search.value.trim();
      rows.replaceChildren(); more.hidden = true;
      page();
    }, 250); // one request per pause in typing, not per key
  };
  more.onclick = page;
  await page();
}

// --- new thread ----------------------------------------------------------------------------------

function newScreen() {
  const f = (name, el) => h("label", name + " ", el);
  const title = h("input", { name: "title", maxLength: 200 });
  const [provider, providers] = providerField("providers-new", { value: "scripted", required: true });
  const model = h("input", { name: "model", placeholder: "provider default", maxLength: 200 });
  const mode = h("select", { name: "runtime_mode" }, ["approval_required", "auto_accept_edits", "full_access"].map((m) => h("option", m)));
  const ws = h("input", { name: "workspace", placeholder: "(a new one for the thread)", maxLength: 255 });
  const form = h("form.card", { onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { title: title.value, provider: provider.value, runtime_mode: mode.value };
    if (model.value) body.model = model.value;
    if (ws.value) body.workspace = ws.value;
    try {
      const made = await post("/v1/threads", body);
      noteSeq(made.thread_id, made.seq);
      location.hash = "#/t/" + made.thread_id;
    } catch (e) { showError(form, e); }
  } }, h("h1", "New thread"), f("Title", title), f("Provider", provider), providers, f("Model", model), f("Runtime mode", mode),
  f("Workspace", ws), h("p.muted", "Modes outside the tenant's policy are refused by the API."), h("button", { type: "submit" }, "Create"));
  main().replaceChildren(form);
}

// --- routing -------------------------------------------------------------------------------------

let leave = null; // the current screen's cleanup (closes its event stream)

export async function route() {
  if (leave) { leave(); leave = null; }
  if (!session) {
    try {
      const probe = await get("/console/session");
      if (probe.signed_in === false) {
        header();
        return signInScreen(probe.reason === "not signed in" ? null : new Error(probe.reason));
      }
      session = probe;
      setCsrf(session.csrf_token);
    } catch (e) {
      header();
      return signInScreen(e);
    }
  }
  header();
  const path = location.hash.replace(/^#/, "") || "/";
  const m = path.match(/^\/t\/([^/]+)$/);
  if (m) leave = await threadScreen(decodeURIComponent(m[1]));
  else if (path === "/new") newScreen();
  else await listScreen();
}

window.addEventListener("hashchange", route);
// A session that expired or was signed out elsewhere: back to the sign-in form, on the same URL.
window.addEventListener("treadle:signed-out", () => { if (session) { session = null; setCsrf(""); route(); } });
route();
