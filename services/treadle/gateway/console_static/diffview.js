// A unified patch as one foldable block per file, each line coloured by what it does (added, removed, hunk
// header), built from text nodes only. Files start open when the patch is short, folded when it is long.
import { h } from "./dom.js";

const OPEN_LINES = 400;

export function splitFiles(patch) {
  const files = [];
  let cur = null;
  let inHunk = false; // "--- x" inside a hunk is a removed line "-- x", not a file header
  for (const line of (patch || "").split("\n")) {
    if (line === "") continue; // the patch's final newline (an empty context line is " ")
    if (line.startsWith("diff --git ") || !cur) {
      cur = { lines: [], path: pathOf(line), added: 0, removed: 0 };
      files.push(cur);
      inHunk = false;
      if (line.startsWith("diff --git ")) continue;
    }
    if (!inHunk && (line.startsWith("+++ ") || line.startsWith("--- "))) {
      cur.lines.push(["meta", line]);
      if (line.startsWith("+++ b/")) cur.path = line.slice(6);
      else if (line.startsWith("--- a/") && !cur.path) cur.path = line.slice(6);
    } else if (line.startsWith("@@")) { inHunk = true; cur.lines.push(["hunk", line]); }
    else if (inHunk && line.startsWith("+")) { cur.added += 1; cur.lines.push(["add", line]); }
    else if (inHunk && line.startsWith("-")) { cur.removed += 1; cur.lines.push(["del", line]); }
    else cur.lines.push([inHunk ? "ctx" : "meta", line]);
  }
  return files;
}

function pathOf(header) {
  const m = header.match(/^diff --git a\/(.*) b\/(.*)$/);
  return m ? m[2] : "";
}

// Side by side: a hunk's removed lines beside the added lines that replace them, context on both sides.
function splitRows(lines) {
  const rows = [];
  let dels = [], adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) rows.push([dels[i] || null, adds[i] || null]);
    dels = []; adds = [];
  };
  for (const [kind, line] of lines) {
    if (kind === "del") dels.push(["del", line]);
    else if (kind === "add") adds.push(["add", line]);
    else { flush(); rows.push(kind === "ctx" ? [[kind, line], [kind, line]] : [[kind, line]]); }
  }
  flush();
  return rows;
}

const cell = (c) => (c ? h(`span.sc.${c[0]}`, c[1]) : h("span.sc.empty", " "));

function fileBody(f, split) {
  if (!split) return h("pre.dlines", f.lines.map(([kind, line]) => h(`span.dl.${kind}`, line + "\n")));
  return h("div.dsplit", { tabIndex: 0 }, splitRows(f.lines).map((r) => (r.length === 1 ? h(`div.srow.wide.${r[0][0]}`, r[0][1]) : h("div.srow", cell(r[0]), cell(r[1])))));
}

function storedLayout() { try { return localStorage.getItem("treadle.diff") === "split"; } catch { return false; } }

// The files of a patch, unified or side by side (a toggle, remembered), each one folding on its own.
export function diffView(patch) {
  const files = splitFiles(patch);
  const total = files.reduce((n, f) => n + f.lines.length, 0);
  let split = storedLayout();
  const body = h("div.dfiles");
  const toggle = h("button.small.layout", { type: "button", "aria-pressed": String(split) });
  const draw = () => {
    const open = new Map([...body.querySelectorAll("details.dfile")].map((d) => [d.dataset.path, d.open]));
    toggle.textContent = split ? "Unified view" : "Split view";
    toggle.setAttribute("aria-pressed", String(split));
    body.replaceChildren(...files.map((f) => h("details.dfile", { open: open.has(f.path) ? open.get(f.path) : total <= OPEN_LINES, dataset: { path: f.path } },
      h("summary", h("code", f.path || "(patch)"), " ", h("span.add", `+${f.added}`), " ", h("span.del", `−${f.removed}`)),
      fileBody(f, split))));
  };
  toggle.addEventListener("click", () => {
    split = !split;
    try { localStorage.setItem("treadle.diff", split ? "split" : "unified"); } catch { /* this page only */ }
    draw();
  });
  draw();
  return h("div.diffview", files.length > 0 ? h("div.row.dtools", toggle) : "", body);
}
