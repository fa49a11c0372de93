// Small DOM helpers every screen shares. Elements are built from text (never innerHTML): a reply's text can
// only become markup through markdown.js, which sanitises it.
import { ApiError } from "./api.js";

export const main = () => document.getElementById("main");

// h("div.cls", {attrs}, children...)
export function h(spec, attrs, ...kids) {
  const [tag, ...classes] = spec.split(".");
  const el = document.createElement(tag || "div");
  if (classes.length) el.className = classes.join(" ");
  if (el.tagName === "PRE") el.tabIndex = 0; // it may scroll sideways: a keyboard can then scroll it too
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

// Grey bars where a screen's content will be, so a slow read is not a blank page.
export function skeleton(lines = 6) {
  return h("div.skeleton", { "aria-busy": "true", "aria-label": "Loading" },
    Array.from({ length: lines }, (_, i) => h("div.bar", { dataset: { w: String((i * 37) % 4) } })));
}

// The providers the deployment offers (the session probe lists them, ACP agents included); any other name can
// still be typed and the API says whether it knows it.
let offered = ["scripted", "codex", "claude"];
export function setProviders(list) { if (Array.isArray(list) && list.length) offered = list.slice(); }
export function providerField(id, attrs) {
  const input = h("input", { name: "provider", list: id, maxLength: 64, size: 12, autocomplete: "off", ...attrs });
  const known = h("datalist", { id }, offered.map((p) => h("option", { value: p })));
  return [input, known];
}
