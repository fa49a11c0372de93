// The sidebar of threads beside every screen: search, status, provider, unread, and a badge where a run waits
// for an approval or a question. The list read (/v1/threads) says only that a run is active; whether it waits
// on someone is read from that thread's pending requests, for the active threads only. The tab's title and
// favicon count the threads that wait.
import { get } from "./api.js";
import { h, skeleton } from "./dom.js";

const POLL_MS = 4000;
const LIMIT = 50;
const waiting = new Map(); // thread id -> pending requests (active threads only)
let state = null;

// "needs you" when a request waits, else running while a run is active, else how the last run ended.
export function statusOf(t) {
  if (waiting.get(t.id)) return "needs-you";
  return t.active_run_id ? "running" : (t.last_run_status || "idle");
}
export const statusLabel = (s) => (s === "needs-you" ? "needs you" : s);

// Pending requests of the active threads among `items`, into `waiting` (a thread with no active run waits on nobody).
export async function readWaiting(items) {
  await Promise.all(items.map(async (t) => {
    if (!t.active_run_id) { waiting.delete(t.id); return; }
    try {
      const page = await get(`/v1/threads/${encodeURIComponent(t.id)}/requests?status=pending&limit=20`);
      waiting.set(t.id, page.items.length);
    } catch { /* the next poll asks again */ }
  }));
}

// The open thread knows its own pending requests at once, without waiting for the next poll.
export function noteWaiting(id, count) {
  if ((waiting.get(id) || 0) === count) return;
  if (count) waiting.set(id, count); else waiting.delete(id);
  if (state) draw();
  showWaiting();
}

let titleBase = "Treadle console";
export function setTitle(base) { titleBase = base || "Treadle console"; showWaiting(); }

function showWaiting() {
  const n = [...waiting.values()].filter(Boolean).length;
  document.title = n ? `(${n}) ${titleBase}` : titleBase;
  const icon = document.getElementById("favicon");
  if (icon) {
    const dot = n ? "<circle cx='24' cy='8' r='7' fill='%23d93025'/>" : "";
    icon.href = `data:image/svg+xml,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 32 32'><rect x='3' y='5' width='24' height='24' rx='5' fill='%232d5bd7'/>${dot}</svg>`;
  }
}

const seenKey = (id) => `treadle.seen.${id}`;
export function markSeen(id, seq) { try { localStorage.setItem(seenKey(id), String(seq)); } catch { /* private mode */ } }
function unread(t) {
  try { const seen = localStorage.getItem(seenKey(t.id)); return seen !== null && Number(seen) < t.seq; } catch { return false; }
}

export function startSidebar(nav) {
  stopSidebar();
  const search = h("input", { type: "search", placeholder: "Search threads", "aria-label": "Search threads", maxLength: 200 });
  const list = h("ul.tlist", { role: "list" }, h("li", skeleton(4))); // until the first read answers
  const archived = h("input.showarchived", { type: "checkbox" }); // archived threads are left out unless asked for
  state = { nav, search, list, items: [], query: "", archived: false, timer: null, typing: null, generation: 0, current: null };
  archived.addEventListener("change", () => { state.archived = archived.checked; refreshSidebar(); });
  search.addEventListener("input", () => {
    clearTimeout(state.typing);
    state.typing = setTimeout(() => { state.query = search.value.trim(); refreshSidebar(); }, 250);
  });
  // Arrow keys move between threads; Enter opens the focused one (it is a link).
  list.addEventListener("keydown", (ev) => {
    if (ev.key !== "ArrowDown" && ev.key !== "ArrowUp") return;
    const links = [...list.querySelectorAll("a")];
    const i = links.indexOf(document.activeElement);
    const next = links[Math.max(0, Math.min(links.length - 1, i + (ev.key === "ArrowDown" ? 1 : -1)))];
    if (next) { ev.preventDefault(); next.focus(); }
  });
  nav.replaceChildren(h("div.navhead", h("a.button.newthread", { href: "#/new" }, "+ New thread"), search,
    h("label.small.muted", archived, " Show archived")), list);
  nav.hidden = false;
  refreshSidebar();
  return stopSidebar;
}

export function stopSidebar() {
  if (!state) return;
  clearTimeout(state.timer); clearTimeout(state.typing);
  state.generation += 1;
  state.nav.replaceChildren(); state.nav.hidden = true;
  state = null;
}

export function setCurrent(id) {
  if (!state) return;
  state.current = id;
  for (const li of state.list.children) li.classList.toggle("current", li.dataset.thread === id);
}

export async function refreshSidebar() {
  if (!state) return;
  const s = state;
  const mine = ++s.generation;
  clearTimeout(s.timer);
  try {
    const qs = new URLSearchParams({ limit: String(LIMIT) });
    if (s.query) qs.set("q", s.query);
    if (s.archived) qs.set("archived", "include");
    const doc = await get("/v1/threads?" + qs);
    await readWaiting(doc.items);
    if (mine !== s.generation || state !== s) return;
    s.items = doc.items;
    draw();
    showWaiting();
  } catch { /* shown by the screens; the next poll tries again */ }
  if (state === s && mine === s.generation) s.timer = setTimeout(tick, POLL_MS);
}

function tick() { if (document.visibilityState === "visible") refreshSidebar(); else if (state) state.timer = setTimeout(tick, POLL_MS); }

function draw() {
  const s = state;
  const rows = s.items.map((t) => {
    const st = statusOf(t);
    const n = waiting.get(t.id) || 0;
    return h("li", { dataset: { thread: t.id, status: st }, className: t.id === s.current ? "current" : "" },
      h("a", { href: "#/t/" + t.id, "aria-current": t.id === s.current ? "page" : null },
        h("span.ttitle", t.title || "(untitled)"),
        n ? h("span.badge", { title: `${n} request(s) wait for you`, "aria-label": `${n} waiting` }, String(n)) : null,
        unread(t) && t.id !== s.current ? h("span.unread", { title: "new since you last looked", "aria-label": "unread" }) : null,
        h("span.tmeta", h(`span.status.${st}`, statusLabel(st)), " ", h("span.muted", t.provider),
          t.archived ? h("span.muted.archivedtag", " · archived") : "")));
  });
  s.list.replaceChildren(...(rows.length ? rows : [h("li.muted.empty", s.query ? "No thread's title matches." : "No threads yet.")]));
}
