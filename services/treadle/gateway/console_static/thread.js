// One thread: the timeline with live text, requests answered inline, the composer, queue, diffs, fork, activity.
import { ApiError, del, get, noteSeq, patch, post, seqOf } from "./api.js";
import { errorBox, h, main, providerField, showError, when } from "./app.js";

const MODES = ["auto", "steer_active", "queue_after_active", "restart_active", "start_immediately", "reject", "rollback_active"];
const TERMINAL = new Set(["completed", "failed", "interrupted", "cancelled", "rolled_back", "superseded"]);
// The page reads the thread's last runs only (?runs=): a read, on each of its events, that costs the same however
// long the thread is. More than a thread may hold queued by default (100), so the queue is always in it.
const RECENT_RUNS = 200;

export async function threadScreen(id) {
  const root = h("div.thread");
  main().replaceChildren(root);
  const live = new Map(); // message id -> text streamed live (ahead of the projection)
  const opened = new Map(); // run id -> its diff view, kept across re-renders while the thread moves on
  const graphs = new Set(); // run ids whose graph is unfolded
  let doc = null;
  let source = null;
  let closed = false;
  let fetching = null;
  let again = false;

  try {
    doc = await get(`/v1/threads/${encodeURIComponent(id)}?runs=${RECENT_RUNS}`, id);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) {
      root.append(h("section.card.notfound", h("h1", "Thread not found"), errorBox(e), h("a", { href: "#/" }, "All threads")));
      return () => {};
    }
    root.append(errorBox(e));
    return () => {};
  }

  const view = { header: h("section.card"), notice: h("div.notice", { role: "status" }), runs: h("section.runs"), side: h("aside.side"), composer: h("section.card.composer") };
  root.append(h("div.cols", h("div.mainc", view.header, view.notice, view.runs, view.composer), view.side));

  // Coalesced refetch at the sequence of the event that triggered it: a read never goes back in time.
  async function refresh() {
    if (fetching) { again = true; return fetching; }
    fetching = (async () => {
      do {
        again = false;
        try { doc = await get(`/v1/threads/${encodeURIComponent(id)}?runs=${RECENT_RUNS}`, id); render(); } catch (e) { showError(view.header, e); }
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
    source.onopen = () => { root.dataset.stream = "open"; };
    source.onerror = () => { root.dataset.stream = "reconnecting"; };
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
    view.header.replaceChildren(
      h("div.row", h("h1", t.title || "(untitled)"), h("span.muted", t.id)),
      h("div.meta", `provider ${t.provider}${t.model ? " · " + t.model : ""} · ${t.runtime_mode} · workspace ${t.workspace}`,
        t.parent_thread_id ? h("span", " · forked from ", h("a", { href: "#/t/" + t.parent_thread_id }, t.parent_thread_id)) : null),
      caps.steering ? h("div.muted.small", `steering ${caps.steering} · interrupt ${caps.interrupt ?? "?"} · fork ${caps.fork ?? "?"}`) : null,
    );
    const full = doc.runs.length >= RECENT_RUNS; // earlier runs may exist: say so rather than count them
    view.runs.replaceChildren(full ? h("p.muted.earlier", `Only the last ${RECENT_RUNS} runs are shown.`) : "",
      ...doc.runs.map(runCard));
    for (const [mid, text] of live) {
      const m = doc.messages.find((x) => x.id === mid);
      if (m && m.status !== "streaming") live.delete(mid);
      else if (!m) { const s = streamingBox({ message_id: mid }); s.querySelector(".text").textContent = text; }
    }
    view.side.replaceChildren(queueCard(), handoffCard(), activityCard());
    composer.state.textContent = doc.active_run_id ? `active run ${doc.active_run_id}` : "no active run";
  }

  function messageEl(m) {
    const text = m.status === "streaming" && (live.get(m.id) || "").length > m.text.length ? live.get(m.id) : m.text;
    return h(`div.msg.${m.role}${m.status === "streaming" ? ".streaming" : ""}`, { dataset: { message: m.id } },
      h("div.who", m.role + (m.steering ? ` · steer (${m.steering})` : "")), h("div.text", text));
  }

  function nodeTree(run) {
    const kids = new Map();
    for (const n of run.nodes) { const k = n.parent_id || ""; kids.set(k, [...(kids.get(k) || []), n]); }
    const item = (n) => h("li", { dataset: { node: n.id } },
      h(`span.status.${n.status}`, n.status), " ", h("b", n.kind), " ", n.title,
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
        h("span.muted.small", `${run.provider}${run.model ? "/" + run.model : ""} · ${run.mode} → ${run.disposition}`),
        run.waiting_reason ? h("span.muted.small", "waiting: " + run.waiting_reason) : null,
        run.progress && run.progress.total ? h("span.small", `todo ${run.progress.done}/${run.progress.total}`) : null),
      run.error ? h("div.error", run.error) : null,
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
    const action = [];
    if (r.command) action.push(h("div", "Command ", h("code.command", r.command)), h("div", "in ", h("code.cwd", r.cwd || "")));
    for (const f of r.files || []) {
      action.push(h("div.file", h("b", f.change), " ", h("code", f.path), f.move_to ? ` → ${f.move_to}` : "", f.diff ? h("pre.diff", f.diff) : null));
    }
    box.append(h("div.row", h("b", r.kind === "user_input" ? "Question" : "Approval"), h(`span.status.${r.status}`, r.status)),
      h("div.prompt", r.prompt), ...action,
      r.description ? h("div.model", h("span.muted", "the model says: "), r.description) : null);
    if (r.status !== "pending") {
      if (r.response) box.append(h("div.muted.small", "answered: " + JSON.stringify(r.response)));
      return box;
    }
    const respond = (body) => (ev) => act(ev, () => post(`/v1/requests/${r.id}/respond`, body, id));
    if (r.kind === "user_input") {
      for (const q of r.questions) {
        const other = h("input", { placeholder: "your answer", maxLength: 20000 });
        box.append(h("div.question", h("div", q.header ? h("b", q.header + ": ") : null, q.question),
          q.options.map((o) => h("button.option", { title: o.description, onclick: respond({ answers: { [q.id]: o.label } }) }, o.label,
            o.description ? h("span.muted.small", " " + o.description) : null)),
          h("form.inline", { onsubmit: (ev) => { ev.preventDefault(); respond({ answers: { [q.id]: other.value } })(ev); } },
            other, h("button", { type: "submit" }, "Answer"))));
      }
      if (!r.questions.length) {
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
    return h("div.plan", h("b", "Proposed plan "), h(`span.status.${p.status}`, p.status), h("pre", p.text),
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
      const pane = h("div.diff", h("button.small.close", { onclick: () => { opened.delete(run.id); pane.remove(); } }, "×"),
        h("b", ` Changes of run ${run.ordinal}`), h("span.muted.small", ` ${d.files_total} file(s)`),
        h("ul.files", d.files.map((f) => h("li", h("b", f.change), " ", h("code", f.path), ` +${f.added} −${f.removed}`))),
        h("pre.patch", d.patch || "(no textual changes)"), d.truncated ? h("div.muted", "diff truncated") : null,
        h("button.rollback", { onclick: (e) => act(e, async () => {
          const r = await post(`/v1/threads/${id}/rollback`, { to_run_ordinal: run.ordinal }, id);
          view.notice.replaceChildren(h("div.ok.card", `Rolled back to run ${run.ordinal}'s files (${r.id ?? "rollback"}: ${r.status ?? "done"}).`));
          return r;
        }) }, `Roll back to run ${run.ordinal}`));
      opened.set(run.id, pane);
      box.replaceChildren(pane);
    } catch (e) { box.replaceChildren(errorBox(e)); }
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
    let dragged = null;
    queued.forEach((r, i) => {
      const msg = doc.messages.find((m) => m.id === r.message_id);
      const order = queued.map((q) => q.id);
      const move = (to) => { const o = order.slice(); o.splice(i, 1); o.splice(to, 0, r.id); return reorder(o); };
      list.append(h("li", { draggable: true, dataset: { queued: r.id },
        ondragstart: () => { dragged = i; }, ondragover: (e) => e.preventDefault(),
        ondrop: (e) => { e.preventDefault(); if (dragged !== null && dragged !== i) { const o = order.slice(); const [x] = o.splice(dragged, 1); o.splice(i, 0, x); reorder(o); } } },
        h("span.qtext", msg ? msg.text : r.id), " ",
        h("button.small", { disabled: i === 0, title: "up", onclick: () => move(i - 1) }, "↑"),
        h("button.small", { disabled: i === queued.length - 1, title: "down", onclick: () => move(i + 1) }, "↓"),
        h("button.small", { onclick: (ev) => { const text = prompt("Edit the queued message", msg ? msg.text : ""); if (text !== null) act(ev, () => patch(`/v1/threads/${id}/queue/${r.id}`, { text }, id)); } }, "Edit"),
        h("button.small", { onclick: (ev) => act(ev, () => del(`/v1/threads/${id}/queue/${r.id}`, id)) }, "Cancel")));
    });
    card.append(queued.length ? list : h("p.muted", "Nothing queued."));
    return card;
  }

  function handoffCard() {
    if (!doc.transfers.length) return h("span");
    return h("section.card", h("h2", "Context transfers"),
      doc.transfers.map((x) => h("div.muted.small", `${x.type} from ${x.source_thread_id}: ${x.status}`)));
  }

  function activityCard() {
    return h("section.card.activity", h("h2", "Activity"),
      h("ol", doc.activity.slice(-50).reverse().map((a) => h("li", h("span.muted.small", when(a.at) + " "), h("b", a.kind), " ", a.summary))));
  }

  // --- composer ---------------------------------------------------------------------------------
  const composer = {};
  function buildComposer() {
    const text = h("textarea", { name: "text", rows: 3, placeholder: "Message", required: true, maxLength: 100000 });
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
    } }, text, h("div.row", h("label", "mode ", mode), h("label", "provider ", provider), providers, model,
      h("label", { title: "a fresh provider thread, told the thread so far in a summary" }, clean, " clean context"),
      h("button", { type: "submit" }, "Send"), composer.state),
    h("details", h("summary", "script"), script), result);
    view.composer.replaceChildren(form);
  }

  buildComposer();
  render();
  openStream();
  return () => { closed = true; if (source) source.close(); };
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
  "thread.created", "thread.forked", "transfer.consumed", "transfer.failed",
];
