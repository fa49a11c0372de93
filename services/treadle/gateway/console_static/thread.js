// One thread: the timeline with live text, requests answered inline, the composer, queue, diffs, fork, activity.
import { ApiError, del, get, noteSeq, patch, post, seqOf } from "./api.js";
import { diffView } from "./diffview.js";
import { errorBox, h, main, providerField, showError, when } from "./dom.js";
import { markdown } from "./markdown.js";
import { markSeen, noteWaiting, refreshSidebar, setTitle } from "./sidebar.js";

const MODES = ["auto", "steer_active", "queue_after_active", "restart_active", "start_immediately", "reject", "rollback_active"];
const TERMINAL = new Set(["completed", "failed", "interrupted", "cancelled", "rolled_back", "superseded"]);
// The page reads the thread's last runs only (?runs=): a read, on each of its events, that costs the same however
// long the thread is. More than a thread may hold queued by default (100), so the queue is always in it.
const RECENT_RUNS = 200;

const DECISIONS = { accept: "Approved", accept_for_session: "Approved for the session", decline: "Declined", cancel: "Cancelled" };

// A host path as the thread's workspace sees it: "." for its root, "src/app" below it; a path outside the
// workspace stays as it is (that it is outside is the point of showing it).
export function inWorkspace(path, workspace) {
  if (!path) return "";
  const root = "/" + String(workspace || "").replace(/^\/+|\/+$/g, "");
  if (root === "/") return path;
  if (path === root.slice(1) || path.endsWith(root)) return ".";
  const i = path.lastIndexOf(root + "/");
  return i >= 0 ? path.slice(i + root.length + 1) || "." : path;
}

// The host's path of the workspace, wherever the runtime wrote it into a prompt or a summary, as the
// workspace sees it: "./src/app" below its root, "the workspace" for the root itself.
export function relText(text, workspace) {
  const ws = String(workspace || "").replace(/^\/+|\/+$/g, "");
  if (!text || !ws) return text || "";
  const escaped = ws.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const found = new RegExp("/[^\\s`'\"]*?/" + escaped + "(/[^\\s`'\"]*)?(?![\\w-])", "g");
  return text.replace(found, (_, below) => (below && below !== "/" ? "." + below : "the workspace"));
}

// An answered request in words: Approved, Declined, the option chosen or the text given.
export function answerText(r) {
  const x = r.response || {};
  if (x.decision) return DECISIONS[x.decision] || String(x.decision);
  if (x.answers && typeof x.answers === "object") {
    return "Answered: " + Object.entries(x.answers).map(([qid, v]) => {
      const q = (r.questions || []).find((y) => y.id === qid);
      const said = Array.isArray(v) ? v.join(", ") : String(v ?? "");
      return (r.questions || []).length > 1 && q ? `${q.header || q.question} → ${said}` : said;
    }).join("; ");
  }
  if (x.message) return "Answered: " + x.message;
  return r.status === "resolved" ? "Answered" : "Closed without an answer";
}

export async function threadScreen(id, isCurrent = () => true) {
  const root = h("div.thread");
  const live = new Map(); // message id -> text streamed live (ahead of the projection)
  const opened = new Map(); // run id -> its diff view, kept across re-renders while the thread moves on
  const graphs = new Set(); // run ids whose graph is unfolded
  const editing = new Map(); // queued run id -> the draft being edited inline
  const dropping = new Set(); // queued run ids whose cancellation waits for a confirmation
  const rendered = new Map(); // message id -> [its text, its Markdown element]: parsed once, not on every event
  let doc = null;
  let source = null;
  let closed = false;
  let fetching = null;
  let again = false;
  let lastActive;
  let retry = null; // the timer of a re-subscription after the server refused the stream
  let backoff = 1000;

  try {
    doc = await get(`/v1/threads/${encodeURIComponent(id)}?runs=${RECENT_RUNS}`, id);
  } catch (e) {
    if (!isCurrent()) return () => {};
    main().replaceChildren(root);
    setTitle("Thread not found · Treadle console");
    if (e instanceof ApiError && e.status === 404) {
      root.append(h("section.card.notfound", h("h1", "Thread not found"), errorBox(e), h("a", { href: "#/" }, "All threads")));
      return () => {};
    }
    root.append(errorBox(e));
    return () => {};
  }

  if (!isCurrent()) return () => {}; // another thread was opened while this one loaded
  main().replaceChildren(root);
  lastActive = doc.active_run_id;
  const view = {
    header: h("section.card.thead"), notice: h("div.notice", { role: "status" }), runs: h("section.runs"),
    queue: h("div"), handoffs: h("div"), activity: h("div"), composer: h("section.card.composer"),
    manage: h("div.manage"), // a rename field or a delete confirmation: kept across re-renders
  };
  root.append(h("div.cols", h("div.mainc", view.header, view.notice, view.runs, view.composer),
    h("aside.side", view.queue, view.handoffs, view.activity)));

  // Coalesced refetch at the sequence of the event that triggered it: a read never goes back in time.
  async function refresh() {
    if (fetching) { again = true; return fetching; }
    fetching = (async () => {
      do {
        again = false;
        try { doc = await get(`/v1/threads/${encodeURIComponent(id)}?runs=${RECENT_RUNS}`, id); if (!closed) render(); } catch (e) { if (!closed) showError(view.header, e); }
      } while (again && !closed);
      fetching = null;
    })();
    return fetching;
  }

  function openStream() {
    source = new EventSource(`/v1/threads/${encodeURIComponent(id)}/events?after=${doc.seq}`);
    source.addEventListener("live.delta", (ev) => {
      const d = JSON.parse(ev.data);
      live.set(d.message_id, (live.get(d.message_id) || "") + d.text);
      const el = root.querySelector(`[data-message="${d.message_id}"] .text`);
      if (el) el.textContent = live.get(d.message_id);
      else { const s = streamingBox(d); s.querySelector(".text").textContent = live.get(d.message_id); }
    });
    source.onopen = () => { root.dataset.stream = "open"; backoff = 1000; };
    // The browser retries a dropped stream by itself (with Last-Event-ID); a refused one (an error status) it
    // gives up on: read the thread again and subscribe anew after what that read saw, backing off to 30 s.
    source.onerror = () => {
      root.dataset.stream = "reconnecting";
      if (source.readyState !== EventSource.CLOSED || closed) return;
      source.close();
      retry = setTimeout(async () => { await refresh(); if (!closed) openStream(); }, backoff);
      backoff = Math.min(backoff * 2, 30000);
    };
    source.onmessage = () => refresh();
    const durable = (ev) => { noteSeq(id, Number(ev.lastEventId)); refresh(); };
    for (const t of EVENT_TYPES) source.addEventListener(t, durable);
  }

  function streamingBox(d) {
    const run = d.run_id && root.querySelector(`[data-run="${d.run_id}"] .msgs`);
    const box = h("div.msg.assistant.streaming", { dataset: { message: d.message_id } }, h("div.who", "assistant"), h("div.text"));
    (run || view.runs).append(box);
    return box;
  }

  function render() {
    const t = doc.thread;
    const caps = doc.capabilities || {};
    const said = (v) => (v === null || v === undefined || v === "" ? "?" : String(v));
    view.header.replaceChildren(
      h("div.row", h("h1", t.title || "(untitled)"), h("span.muted.small.tid", t.id)),
      h("div.meta", [`provider ${t.provider}`, t.model, t.runtime_mode, t.workspace ? `workspace ${t.workspace}` : null].filter(Boolean).join(" · "),
        t.parent_thread_id ? h("span", " · forked from ", h("a", { href: "#/t/" + t.parent_thread_id }, t.parent_thread_id)) : null),
      // (replaceChildren and append write a null as the text "null": an absent part is "")
      caps.steering ? h("div.muted.small", `steering ${caps.steering} · interrupt ${said(caps.interrupt)} · fork ${said(caps.fork)}`) : "",
      t.archived ? h("div.archived.muted", "Archived: out of the thread list, and new messages are refused until it is unarchived.") : "",
      h("div.actions.threadactions",
        h("button.small.rename", { type: "button", onclick: () => renameForm(t) }, "Rename"),
        h("button.small.archive", { type: "button", onclick: (e) => act(e, async () => {
          const r = await patch(`/v1/threads/${id}`, { archived: !t.archived }, id);
          refreshSidebar();
          return r;
        }) }, t.archived ? "Unarchive" : "Archive"),
        h("button.small.delete", { type: "button", onclick: () => confirmDelete(t) }, "Delete…")),
      view.manage,
    );
    const full = doc.runs.length >= RECENT_RUNS; // earlier runs may exist: say so rather than count them
    // A queued run is drawn once, in the queue; it gets its card when it starts.
    const drawn = doc.runs.filter((r) => !(r.status === "queued" && doc.queue.includes(r.id)));
    view.runs.replaceChildren(full ? h("p.muted.earlier", `Only the last ${RECENT_RUNS} runs are shown.`) : "",
      ...drawn.map(runCard), drawn.length ? "" : h("p.muted.empty", "No runs yet: send the first message below."));
    for (const [mid, text] of live) {
      const m = doc.messages.find((x) => x.id === mid);
      if (m && m.status !== "streaming") live.delete(mid);
      else if (!m) { const s = streamingBox({ message_id: mid }); s.querySelector(".text").textContent = text; }
    }
    for (const rid of [...editing.keys()]) if (!doc.queue.includes(rid)) editing.delete(rid);
    for (const rid of [...dropping]) if (!doc.queue.includes(rid)) dropping.delete(rid);
    if (doc.active_run_id !== lastActive) { lastActive = doc.active_run_id; refreshSidebar(); } // its status changed
    // A queued message being edited keeps its field (and focus) while the thread moves on around it.
    if (!editing.size || !view.queue.firstChild) view.queue.replaceChildren(queueCard());
    view.handoffs.replaceChildren(handoffCard());
    view.activity.replaceChildren(activityCard());
    const log = view.activity.querySelector("ol");
    if (log) log.scrollTop = log.scrollHeight; // oldest first, like the timeline: the newest is in view
    composer.state.textContent = doc.active_run_id ? `active run ${doc.active_run_id}` : "no active run";
    const pending = doc.requests.filter((r) => r.status === "pending").length;
    setTitle((t.title || "(untitled)") + " · Treadle");
    noteWaiting(id, pending);
    markSeen(id, doc.seq);
  }

  function messageEl(m) {
    const text = m.status === "streaming" && (live.get(m.id) || "").length > m.text.length ? live.get(m.id) : m.text;
    // A finished reply is Markdown; while it streams (and a user's own words) it is plain text.
    let body;
    if (m.role === "assistant" && m.status !== "streaming") {
      const [was, el] = rendered.get(m.id) || [];
      body = was === text ? el : h("div.text.md", markdown(text));
      rendered.set(m.id, [text, body]);
    } else body = h("div.text", text || "");
    return h(`div.msg.${m.role}${m.status === "streaming" ? ".streaming" : ""}`, { dataset: { message: m.id } },
      h("div.who", m.role + (m.steering ? ` · steer (${m.steering})` : "")), body);
  }

  function nodeTree(run) {
    const kids = new Map();
    for (const n of run.nodes) { const k = n.parent_id || ""; kids.set(k, [...(kids.get(k) || []), n]); }
    const item = (n) => h("li", { dataset: { node: n.id } },
      h(`span.status.${n.status}`, n.status), " ", h("b", n.kind), " ", relText(n.title, doc.thread.workspace),
      n.kind === "tool" && n.output ? h("details", h("summary", "output"), h("pre", n.output)) : null,
      n.kind === "reasoning" && n.output ? h("details", h("summary", "reasoning"), h("pre", n.output)) : null,
      kids.has(n.id) ? h("ul", kids.get(n.id).map(item)) : null);
    return h("ul.graph", (kids.get("") || []).map(item));
  }

  function runCard(run) {
    const msgs = doc.messages.filter((m) => m.run_id === run.id || m.id === run.message_id);
    const reqs = doc.requests.filter((r) => r.run_id === run.id);
    const plans = doc.plans.filter((p) => p.run_id === run.id);
    const active = !TERMINAL.has(run.status) && run.status !== "queued";
    const card = h("article.card.run", { dataset: { run: run.id, status: run.status } },
      h("div.row", h("b", `Run ${run.ordinal}`), h(`span.status.${run.status}`, run.status),
        h("span.muted.small", `${run.provider}${run.model ? "/" + run.model : ""} · ${run.mode}${run.disposition ? " → " + run.disposition : ""}`),
        run.waiting_reason ? h("span.muted.small", "waiting: " + run.waiting_reason) : null,
        run.progress && run.progress.total ? h("span.small", `todo ${run.progress.done}/${run.progress.total}`) : null),
      run.error ? h("div.error", relText(run.error, doc.thread.workspace)) : null,
      h("div.msgs", msgs.map(messageEl)),
      reqs.map(requestCard),
      plans.map(planCard),
      doc.handoffs.filter((x) => x.run_id === run.id).map(handoffEl),
      h("details.graphbox", { open: graphs.has(run.id), ontoggle: (ev) => (ev.target.open ? graphs.add(run.id) : graphs.delete(run.id)) }, h("summary", `graph: ${run.attempts.length} attempt(s), ${run.nodes.length} node(s)`),
        h("ol", run.attempts.map((a) => h("li", `attempt ${a.number} (${a.reason}) `, h(`span.status.${a.status}`, a.status),
          a.error ? " " + a.error : ""))), nodeTree(run)),
      h("div.actions",
        active ? h("button", { onclick: (ev) => act(ev, () => post(`/v1/runs/${run.id}/interrupt`, {}, id)) }, "Interrupt") : null,
        run.checkpoint_id ? h("button", { onclick: (ev) => showDiff(ev, run) }, "Changes") : null,
        TERMINAL.has(run.status) ? h("button", { onclick: (ev) => fork(ev, run) }, "Fork from here") : null),
      h("div.diffbox", opened.get(run.id) || null));
    return card;
  }

  function requestCard(r) {
    const box = h(`div.request.${r.status}`, { dataset: { request: r.id } });
    const ws = doc.thread.workspace;
    const action = [];
    if (r.command) {
      action.push(h("div", "Command ", h("code.command", r.command)),
        r.cwd ? h("div", "in ", h("code.cwd", { title: "relative to the thread's workspace" }, inWorkspace(r.cwd, ws))) : "");
    }
    for (const f of r.files || []) {
      action.push(h("div.file", h("b", f.change), " ", h("code", inWorkspace(f.path, ws)), f.move_to ? ` → ${inWorkspace(f.move_to, ws)}` : "",
        f.diff ? diffView(f.diff) : null));
    }
    box.append(h("div.row", h("b", r.kind === "user_input" ? "Question" : "Approval"), h(`span.status.${r.status}`, r.status)),
      r.prompt ? h("div.prompt", relText(r.prompt, ws)) : "", ...action,
      r.description ? h("div.model", h("span.muted", "the model says: "), relText(r.description, ws)) : "");
    if (r.status !== "pending") {
      box.append(h("div.answer", answerText(r)));
      return box;
    }
    const respond = (body) => (ev) => act(ev, () => post(`/v1/requests/${r.id}/respond`, body, id));
    if (r.kind === "user_input") {
      for (const q of r.questions || []) {
        const other = h("input", { placeholder: "your answer", maxLength: 20000 });
        box.append(h("div.question", h("div", q.header ? h("b", q.header + ": ") : null, q.question || ""),
          (q.options || []).map((o) => h("button.option", { title: o.description, onclick: respond({ answers: { [q.id]: o.label } }) }, o.label,
            o.description ? h("span.muted.small", " " + o.description) : null)),
          h("form.inline", { onsubmit: (ev) => { ev.preventDefault(); respond({ answers: { [q.id]: other.value } })(ev); } },
            other, h("button", { type: "submit" }, "Answer"))));
      }
      if (!(r.questions || []).length) {
        const msg = h("input", { placeholder: "your answer" });
        box.append(h("form.inline", { onsubmit: (ev) => { ev.preventDefault(); respond({ message: msg.value })(ev); } }, msg, h("button", "Answer")));
      }
    } else {
      box.append(h("div.actions",
        h("button.approve", { onclick: respond({ decision: "accept" }) }, "Approve"),
        h("button", { onclick: respond({ decision: "accept_for_session" }) }, "Allow for session"),
        h("button.decline", { onclick: respond({ decision: "decline" }) }, "Decline")));
    }
    return box;
  }

  function handoffEl(x) {
    return h("details.handoff", { dataset: { handoff: x.id } },
      h("summary", h("b", "handoff "), h("span.strategy", x.strategy), ` ${x.from_provider ?? "(none)"} → ${x.to_provider}`,
        x.reason ? h("span.muted.small", " · " + x.reason) : null,
        x.covered_ordinals.length ? h("span.muted.small", ` · covers run ${x.covered_ordinals.join(", ")}`) : null),
      h("pre", x.text), x.truncated ? h("div.muted.small", "cut to the provider's budget") : null);
  }

  function planCard(p) {
    if (p.kind === "todo_list") {
      return h("div.todo", h("b", "Todo"), h("ul", p.items.map((i) => h(`li.${i.status}`, `${i.status === "completed" ? "☑" : i.status === "in_progress" ? "◐" : "☐"} ${i.text}`))));
    }
    return h("div.plan", h("b", "Proposed plan "), h(`span.status.${p.status}`, p.status), h("div.md.plantext", markdown(p.text || "")),
      p.status !== "implemented" ? h("div.actions",
        h("button", { onclick: (ev) => act(ev, () => post(`/v1/plans/${p.id}/implement`, { as: "run" }, id)) }, "Implement here"),
        h("button", { onclick: (ev) => act(ev, async () => { const r = await post(`/v1/plans/${p.id}/implement`, { as: "thread" }); location.hash = "#/t/" + r.thread_id; }) }, "Implement as new thread"))
        : h("div.muted.small", "implemented by " + p.implemented_by));
  }

  async function act(ev, fn) {
    const where = ev.target.closest(".card, .request, form") || view.header;
    ev.target.disabled = true;
    try { const r = await fn(); if (r && typeof r.seq === "number") noteSeq(id, r.seq); await refresh(); return r; }
    catch (e) { showError(where, e); }
    finally { ev.target.disabled = false; }
  }

  async function showDiff(ev, run) {
    const box = ev.target.closest(".run").querySelector(".diffbox");
    try {
      const d = await get(`/v1/runs/${run.id}/diff`, id);
      const pane = h("div.diff", h("div.row", h("b", `Changes of run ${run.ordinal}`), h("span.muted.small", `${d.files_total} file(s)`),
        h("button.small.close", { type: "button", "aria-label": "Close the changes", onclick: () => { opened.delete(run.id); pane.remove(); } }, "×")),
        d.patch ? diffView(d.patch) : h("p.muted", "No textual changes."),
        d.truncated ? h("div.muted", "diff truncated") : null,
        h("div.confirmbox"),
        h("button.rollback", { type: "button", onclick: () => confirmRollback(pane, run) }, `Roll back to run ${run.ordinal}…`));
      opened.set(run.id, pane);
      box.replaceChildren(pane);
    } catch (e) { box.replaceChildren(errorBox(e)); }
  }

  function renameForm(t) {
    const field = h("input.newtitle", { type: "text", value: t.title || "", maxLength: 200, "aria-label": "New title" });
    const form = h("form.renameform", {
      onsubmit: (ev) => { ev.preventDefault(); act(ev, async () => {
        const r = await patch(`/v1/threads/${id}`, { title: field.value.trim() }, id);
        view.manage.replaceChildren();
        refreshSidebar();
        return r;
      }); },
    }, field, h("button.small", { type: "submit" }, "Save"), h("button.small", { type: "button", onclick: () => view.manage.replaceChildren() }, "Cancel"));
    view.manage.replaceChildren(form);
    field.focus();
  }

  // Deleting erases the thread's data for good (no undo): the page asks first, and says what goes.
  function confirmDelete(t) {
    view.manage.replaceChildren(h("div.confirm", { role: "alertdialog", "aria-label": "Confirm deleting the thread" },
      h("p", h("b", `Delete “${t.title || "(untitled)"}”? `),
        `Its ${doc.runs.length} run(s), messages, checkpoints and workspace are erased for good; forks of it stay.`),
      doc.active_run_id || doc.queue.length ? h("p.muted", "A run is active or queued: interrupt it first, or the deletion is refused.") : "",
      h("div.actions",
        h("button.danger.confirm-delete", { type: "button", onclick: async (ev) => {
          ev.target.disabled = true;
          try {
            await del(`/v1/threads/${id}`, id);
            refreshSidebar();
            location.hash = "#/";
          } catch (e) { showError(view.manage, e); ev.target.disabled = false; }
        } }, "Delete for good"),
        h("button", { type: "button", onclick: () => view.manage.replaceChildren() }, "Keep it"))));
    view.manage.querySelector(".confirm-delete").focus();
  }

  // Rollback undoes every later run: the page names them and asks before it does anything.
  function confirmRollback(pane, run) {
    const undone = doc.runs.filter((r) => r.ordinal > run.ordinal && r.status !== "rolled_back" && !(r.status === "queued" && doc.queue.includes(r.id)));
    const first = (r) => { const m = doc.messages.find((x) => x.id === r.message_id); return m ? ` “${m.text.slice(0, 60)}${m.text.length > 60 ? "…" : ""}”` : ""; };
    const where = pane.querySelector(".confirmbox");
    const words = undone.length === 1 ? "1 run" : `${undone.length} runs`;
    // The way back: a rolled-back run cannot be forked, so a copy of the undone work is forked first.
    const last = undone.filter((r) => TERMINAL.has(r.status)).at(-1);
    const keep = h("input", { type: "checkbox", name: "keep_copy" });
    const files = h("div.files.muted.small");
    where.replaceChildren(h("div.confirm", { role: "alertdialog", "aria-label": "Confirm the rollback" },
      h("p", h("b", `Roll back to run ${run.ordinal}? `), undone.length
        ? `This undoes ${words} and ${undone.length === 1 ? "its" : "their"} file changes:` : "No later run is undone; the files go back to run " + run.ordinal + "'s."),
      undone.length ? h("ul.undone", undone.map((r) => h("li", `Run ${r.ordinal} (${r.status})${first(r)}`))) : null,
      files,
      last ? h("label.keep", keep, ` Keep the undone work in a new thread (a fork from run ${last.ordinal}, made first)`) : null,
      h("div.actions",
        h("button.danger.confirm-rollback", { type: "button", onclick: (e) => act(e, async () => {
          const copy = keep.checked && last ? await post(`/v1/threads/${id}/fork`, { source: { type: "run", id: last.id } }) : null;
          if (copy) noteSeq(copy.thread_id, copy.seq);
          const r = await post(`/v1/threads/${id}/rollback`, { to_run_ordinal: run.ordinal }, id);
          where.replaceChildren();
          view.notice.replaceChildren(h("div.ok.card", `Rolled back to run ${run.ordinal}'s files` +
            (undone.length ? `; undid ${undone.map((x) => "run " + x.ordinal).join(", ")}.` : "."),
            copy ? h("span", " The undone work is kept in ", h("a.kept", { href: "#/t/" + copy.thread_id }, "its fork"), ".") : ""));
          if (copy) refreshSidebar();
          return r;
        }) }, undone.length ? `Undo ${words}` : "Roll back"),
        h("button", { type: "button", onclick: () => where.replaceChildren() }, "Keep them"))));
    where.querySelector(".confirm-rollback").focus();
    // The files those runs changed, named from the diff between the two checkpoints (a name list, not the patch).
    const newest = undone.filter((r) => r.checkpoint_id).at(-1);
    if (newest) {
      get(`/v1/threads/${id}/diff?from=${run.ordinal}&to=${newest.ordinal}&max_bytes=1024`, id).then((d) => {
        const names = d.files.slice(0, 20).map((f) => `${f.path} (${f.change})`);
        files.textContent = names.length ? `Files put back: ${names.join(", ")}${d.files.length > 20 ? ` and ${d.files.length - 20} more` : ""}.` : "No file changes to undo.";
      }).catch(() => { files.textContent = ""; });
    }
  }

  async function fork(ev, run) {
    await act(ev, async () => {
      const r = await post(`/v1/threads/${id}/fork`, { source: { type: "run", id: run.id } });
      noteSeq(r.thread_id, r.seq);
      location.hash = "#/t/" + r.thread_id;
    });
  }

  // --- side: queue, handoffs, activity ------------------------------------------------------------
  function queueCard() {
    const queued = doc.runs.filter((r) => r.status === "queued" && doc.queue.includes(r.id));
    queued.sort((a, b) => doc.queue.indexOf(a.id) - doc.queue.indexOf(b.id));
    const card = h("section.card.queue", h("h2", `Queue (${queued.length})`));
    const list = h("ol");
    const reorder = (order) => act({ target: card.querySelector("h2") }, () => patch(`/v1/threads/${id}/queue`, { order }, id));
    const stopEditing = (rid) => { editing.delete(rid); view.queue.replaceChildren(queueCard()); };
    let dragged = null;
    queued.forEach((r, i) => {
      const msg = doc.messages.find((m) => m.id === r.message_id);
      const order = queued.map((q) => q.id);
      const move = (to) => { const o = order.slice(); o.splice(i, 1); o.splice(to, 0, r.id); return reorder(o); };
      if (editing.has(r.id)) {
        const field = h("textarea.qedit", { name: "queued_text", rows: 2, "aria-label": "Edit the queued message", maxLength: 100000,
          value: editing.get(r.id), oninput: () => editing.set(r.id, field.value),
          onkeydown: (e) => { if (e.key === "Escape") stopEditing(r.id); else if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); } } });
        const form = h("form.qform", { onsubmit: async (e) => {
          e.preventDefault();
          const text = field.value;
          editing.delete(r.id);
          await act({ target: form.querySelector("button") }, () => patch(`/v1/threads/${id}/queue/${r.id}`, { text }, id));
          view.queue.replaceChildren(queueCard());
        } }, field, h("div.actions", h("button", { type: "submit" }, "Save"), h("button", { type: "button", onclick: () => stopEditing(r.id) }, "Cancel edit")));
        list.append(h("li.editing", { dataset: { queued: r.id } }, form));
        queueMicrotask(() => { if (document.activeElement === document.body) field.focus(); });
        return;
      }
      list.append(h("li", { draggable: true, dataset: { queued: r.id },
        ondragstart: () => { dragged = i; }, ondragover: (e) => e.preventDefault(),
        ondrop: (e) => { e.preventDefault(); if (dragged !== null && dragged !== i) { const o = order.slice(); const [x] = o.splice(dragged, 1); o.splice(i, 0, x); reorder(o); } } },
        h("span.qtext", msg ? msg.text : r.id), " ",
        h("button.small", { type: "button", disabled: i === 0, title: "up", "aria-label": "Move up", onclick: () => move(i - 1) }, "↑"),
        h("button.small", { type: "button", disabled: i === queued.length - 1, title: "down", "aria-label": "Move down", onclick: () => move(i + 1) }, "↓"),
        h("button.small", { type: "button", onclick: () => { editing.set(r.id, msg ? msg.text : ""); view.queue.replaceChildren(queueCard()); view.queue.querySelector("textarea.qedit")?.focus(); } }, "Edit"),
        h("button.small", { type: "button", onclick: () => { dropping.add(r.id); view.queue.replaceChildren(queueCard()); view.queue.querySelector(".confirm-drop")?.focus(); } }, "Cancel"),
        dropping.has(r.id) ? dropConfirm(r, msg) : ""));
    });
    card.append(queued.length ? list : h("p.muted", "Nothing queued."));
    return card;
  }

  // Cancelling a queued run drops its message for good: the item asks first, quoting it (kept across re-renders).
  function dropConfirm(r, msg) {
    const words = msg ? msg.text.slice(0, 80) + (msg.text.length > 80 ? "…" : "") : r.id;
    const close = () => { dropping.delete(r.id); view.queue.replaceChildren(queueCard()); };
    return h("div.confirm", { role: "alertdialog", "aria-label": "Confirm cancelling the queued message" },
      h("p", `Cancel this queued message? “${words}” will not run.`),
      h("div.actions",
        h("button.danger.confirm-drop", { type: "button", onclick: (ev) => { dropping.delete(r.id); act(ev, () => del(`/v1/threads/${id}/queue/${r.id}`, id)); } }, "Cancel the message"),
        h("button", { type: "button", onclick: close }, "Keep it")));
  }

  function handoffCard() {
    if (!doc.transfers.length) return h("span");
    return h("section.card", h("h2", "Context transfers"),
      doc.transfers.map((x) => h("div.muted.small", `${x.type} from ${x.source_thread_id}: ${x.status}`)));
  }

  function activityCard() {
    return h("section.card.activity", h("h2", "Activity"),
      h("ol", doc.activity.slice(-50).map((a) => h("li", h("span.muted.small", when(a.at) + " "), h("b", a.kind), " ", relText(a.summary, doc.thread.workspace)))));
  }

  // --- composer ---------------------------------------------------------------------------------
  const composer = {};
  function buildComposer() {
    const text = h("textarea", { name: "text", rows: 3, placeholder: "Message", "aria-label": "Message", required: true, maxLength: 100000 });
    const mode = h("select", { name: "mode" }, MODES.map((m) => h("option", m)));
    const [provider, providers] = providerField("providers-send", { placeholder: "same provider" });
    const model = h("input", { name: "model", placeholder: "model (optional)", maxLength: 200, size: 14 });
    const clean = h("input", { type: "checkbox", name: "clean_context" });
    const script = h("textarea.script", { name: "script", rows: 3, placeholder: 'script (scripted provider), e.g. {"steps": [...]}' });
    const result = h("div.disposition", { role: "status" });
    composer.state = h("span.muted.small");
    const form = h("form", { onsubmit: async (ev) => {
      ev.preventDefault();
      const body = { text: text.value, mode: mode.value };
      if (provider.value) body.provider = provider.value;
      if (model.value) body.model = model.value;
      if (clean.checked) body.clean_context = true;
      if (script.value.trim()) {
        try { body.script = JSON.parse(script.value); } catch (e) { result.replaceChildren(errorBox(new Error("script is not JSON: " + e.message))); return; }
      }
      try {
        const r = await post(`/v1/threads/${id}/messages`, body, id);
        noteSeq(id, r.seq);
        result.replaceChildren(h("span", "disposition: "), h("b.disp", r.disposition), h("span.muted.small", ` run ${r.run_id}`));
        text.value = "";
        await refresh();
      } catch (e) { result.replaceChildren(errorBox(e)); }
    } }, text, h("div.muted.small.hint", "Enter sends · Shift+Enter new line · Esc interrupts the active run"), h("div.row", h("label", "mode ", mode), h("label", "provider ", provider), providers, model,
      h("label", { title: "a fresh provider thread, told the thread so far in a summary" }, clean, " clean context"),
      h("button", { type: "submit" }, "Send"), composer.state),
    h("details", h("summary", "script"), script), result);
    // Enter sends (Ctrl/Cmd+Enter as well), Shift+Enter is a new line, an IME's Enter is the IME's; Esc interrupts.
    text.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); form.requestSubmit(); }
      else if (ev.key === "Escape" && doc.active_run_id) {
        ev.preventDefault();
        const run = doc.active_run_id;
        act({ target: text }, () => post(`/v1/runs/${run}/interrupt`, {}, id));
      }
    });
    view.composer.replaceChildren(form);
  }

  buildComposer();
  render();
  openStream();
  return () => { closed = true; clearTimeout(retry); if (source) source.close(); source = null; };
}

// Durable event types the console reacts to by reading the thread again (any `event:` name works as well).
const EVENT_TYPES = [
  "attempt.ended", "attempt.started", "checkpoint.captured", "context.delivered", "context.resolved",
  "handoff.created", "message.completed", "message.created", "message.delta", "node.completed", "node.started",
  "plan.implemented", "plan.updated", "provider_thread.unusable", "queue.reordered", "request.opened",
  "request.resolved", "request.cancelled", "request.closed", "rollback.completed", "rollback.failed",
  "rollback.provider_requested", "rollback.started", "run.cancelled", "run.completed", "run.dispatched",
  "run.edited", "run.failed", "run.held", "run.interrupted", "run.queued", "run.started", "run.steered",
  "run.warning", "run.superseded", "session.started", "session.stopped", "steer.joined", "thread.child_forked",
  "thread.created", "thread.forked", "thread.renamed", "thread.archived", "thread.unarchived", "transfer.consumed",
  "transfer.failed",
];
