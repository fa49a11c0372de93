// Treadle console: plain ES modules, no framework. Every screen reads and writes the public /v1 API.
import { call, del, get, noteSeq, post, setCsrf } from "./api.js";
import { h, main, providerField, setProviders, showError, skeleton, when } from "./dom.js";
import { readWaiting, refreshSidebar, setCurrent, setTitle, startSidebar, statusLabel, statusOf, stopSidebar } from "./sidebar.js";

let session = null;

async function signIn(token) {
  const info = await call("POST", "/console/session", { token });
  session = info;
  setCsrf(info.csrf_token);
  setProviders(info.providers);
}

function signInScreen(err) {
  stopSidebar();
  setTitle("Sign in · Treadle console");
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
  who.replaceChildren(h("span.muted.whoami", `${session.user} @ ${session.tenant}`), " ",
    h("button.link", { type: "button", onclick: async () => {
      try { await del("/console/session"); } finally { session = null; setCsrf(""); location.hash = "#/"; route(); }
    } }, "Sign out"));
}

// --- theme: the system's setting unless the user picked one here --------------------------------

const THEMES = ["system", "light", "dark"];
function applyTheme(theme) {
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
  const b = document.getElementById("theme");
  if (b) { b.textContent = `Theme: ${theme}`; b.setAttribute("aria-label", `Colour theme: ${theme} (change)`); }
}
function storedTheme() { try { return localStorage.getItem("treadle.theme") || "system"; } catch { return "system"; } }
function setupChrome() {
  applyTheme(storedTheme());
  document.getElementById("theme").addEventListener("click", () => {
    const next = THEMES[(THEMES.indexOf(storedTheme()) + 1) % THEMES.length];
    try { localStorage.setItem("treadle.theme", next); } catch { /* private mode: this page only */ }
    applyTheme(next);
  });
  document.getElementById("navtoggle").addEventListener("click", () => {
    const open = document.body.classList.toggle("nav-open");
    document.getElementById("navtoggle").setAttribute("aria-expanded", String(open));
  });
}

// --- thread list ---------------------------------------------------------------------------------

async function listScreen() {
  setTitle("Threads · Treadle console");
  const rows = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "More");
  // The API searches titles (`q`), so a search finds threads on pages not loaded yet; typing restarts the list.
  const search = h("input", { type: "search", placeholder: "Search titles", "aria-label": "Search titles", maxLength: 200, oninput: () => restart() });
  const box = h("section.card", h("div.row", h("h1", "Threads"), h("a.button", { href: "#/new" }, "New thread"), search),
    h("div.tablewrap", h("table.threads", h("thead", h("tr", ["Title", "Status", "Provider", "Runs", "Last activity"].map((c) => h("th", c)))), rows)),
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
      await readWaiting(doc.items);
      if (mine !== generation) return; // the search changed while this page was on its way
      for (const t of doc.items) {
        const st = statusOf(t);
        rows.append(h("tr", { dataset: { title: t.title || t.id, thread: t.id } },
          h("td.title", h("a", { href: "#/t/" + t.id }, t.title || "(untitled)"), h("div.muted.small.tid", t.id)),
          h("td", h("span.status." + st, statusLabel(st))), h("td", t.provider), h("td", t.runs),
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
  setTitle("New thread · Treadle console");
  const f = (name, el) => h("label", name + " ", el);
  const title = h("input", { name: "title", maxLength: 200 });
  const [provider, providers] = providerField("providers-new", { value: "scripted", required: true });
  const model = h("input", { name: "model", placeholder: "provider default", maxLength: 200 });
  const mode = h("select", { name: "runtime_mode" }, ["approval_required", "auto_accept_edits", "full_access"].map((m) => h("option", m)));
  const ws = h("input", { name: "workspace", placeholder: "(a new one for the thread)", maxLength: 255 });
  const form = h("form.card.newthread", { onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { title: title.value, provider: provider.value, runtime_mode: mode.value };
    if (model.value) body.model = model.value;
    if (ws.value) body.workspace = ws.value;
    try {
      const made = await post("/v1/threads", body);
      noteSeq(made.thread_id, made.seq);
      location.hash = "#/t/" + made.thread_id;
      refreshSidebar();
    } catch (e) { showError(form, e); }
  } }, h("h1", "New thread"), f("Title", title), f("Provider", provider), providers, f("Model", model), f("Runtime mode", mode),
  f("Workspace", ws), h("p.muted", "Modes outside the tenant's policy are refused by the API."), h("button", { type: "submit" }, "Create"));
  main().replaceChildren(form);
}

// --- routing -------------------------------------------------------------------------------------

let leave = null; // the current screen's cleanup (closes its event stream)
let routing = 0; // which navigation is the latest: an older one that finishes late cleans up after itself

export async function route() {
  const mine = ++routing;
  const path = location.hash.replace(/^#/, "") || "/";
  const m = path.match(/^\/t\/([^/]+)$/);
  // A thread's code (with the Markdown renderer) loads on the first thread opened, alongside the session probe:
  // the sign-in page and the list never fetch it.
  const threadModule = m ? import("./thread.js") : null;
  if (leave) { leave(); leave = null; }
  document.body.classList.remove("nav-open");
  if (!session) {
    try {
      const probe = await get("/console/session");
      if (mine !== routing) return;
      if (probe.signed_in === false) {
        header();
        return signInScreen(probe.reason === "not signed in" ? null : new Error(probe.reason));
      }
      session = probe;
      setCsrf(session.csrf_token);
      setProviders(session.providers);
    } catch (e) {
      header();
      return signInScreen(e);
    }
  }
  header();
  const nav = document.getElementById("sidebar");
  if (nav.hidden) startSidebar(nav); else refreshSidebar();
  document.body.dataset.screen = m ? "thread" : path === "/new" ? "new" : "list";
  setCurrent(m ? decodeURIComponent(m[1]) : null);
  if (m) {
    main().replaceChildren(skeleton());
    const { threadScreen } = await threadModule;
    const cleanup = await threadScreen(decodeURIComponent(m[1]), () => mine === routing);
    if (mine === routing) leave = cleanup; else cleanup();
  } else if (path === "/new") newScreen();
  else await listScreen();
}

setupChrome();
window.addEventListener("hashchange", route);
// A session that expired or was signed out elsewhere: back to the sign-in form, on the same URL.
window.addEventListener("treadle:signed-out", () => { if (session) { session = null; setCsrf(""); route(); } });
route();
