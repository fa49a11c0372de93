// A unified patch as one foldable block per file, each line coloured by what it does (added, removed, hunk
// header), built from text nodes only. Files start open when the patch is short, folded when it is long.
import { h } from "./dom.js";

const OPEN_LINES = 400;

export function splitFiles(patch) {
  const files = [];
  let cur = null;
  for (const line of (patch || "").split("\n")) {
    if (line.startsWith("diff --git ") || !cur) {
      cur = { header: line, lines: [], path: pathOf(line), added: 0, removed: 0 };
      files.push(cur);
      if (line.startsWith("diff --git ")) continue;
    }
    if (line.startsWith("+++ ") || line.startsWith("--- ")) { cur.lines.push(["meta", line]); if (line.startsWith("+++ b/")) cur.path = line.slice(6); continue; }
    if (line.startsWith("+")) { cur.added += 1; cur.lines.push(["add", line]); } else if (line.startsWith("-")) { cur.removed += 1; cur.lines.push(["del", line]); } else if (line.startsWith("@@")) cur.lines.push(["hunk", line]); else cur.lines.push([/^(index |new file|deleted file|similarity|rename |old mode|new mode|Binary)/.test(line) ? "meta" : "ctx", line]);
  }
  return files.filter((f) => f.lines.some(([, l]) => l !== ""));
}

function pathOf(header) {
  const m = header.match(/^diff --git a\/(.*) b\/(.*)$/);
  return m ? m[2] : "";
}

export function diffView(patch) {
  const files = splitFiles(patch);
  const total = files.reduce((n, f) => n + f.lines.length, 0);
  return h("div.diffview", files.map((f) => h("details.dfile", { open: total <= OPEN_LINES, dataset: { path: f.path } },
    h("summary", h("code", f.path || "(patch)"), " ", h("span.add", `+${f.added}`), " ", h("span.del", `−${f.removed}`)),
    h("pre.dlines", f.lines.map(([kind, line]) => h(`span.dl.${kind}`, line + "\n"))))));
}
