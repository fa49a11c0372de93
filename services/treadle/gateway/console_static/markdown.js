// A reply's Markdown as elements: marked (vendored) parses, raw HTML in the text is shown as text, and DOMPurify
// (vendored) sanitises what marked made. The CSP forbids inline scripts and styles anyway; the sanitiser drops
// what would only be refused (style attributes) and images, which would fetch from wherever a reply points.
import { Marked } from "./marked.esm.js";
import DOMPurify from "./purify.es.js";

const escape = (s) => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

const parser = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    html: ({ text }) => escape(text), // an HTML tag a model wrote is text, as it wrote it
    image: ({ href, text }) => `<a href="${escape(href || "")}">${escape(text || href || "image")}</a>`,
  },
});

const POLICY = {
  FORBID_TAGS: ["style", "img", "svg", "math", "form", "input", "button", "textarea", "select", "iframe", "video", "audio"],
  FORBID_ATTR: ["style", "id", "class", "srcset"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
});

export function markdown(text) {
  const fragment = DOMPurify.sanitize(parser.parse(text || ""), POLICY);
  for (const pre of fragment.querySelectorAll("pre")) pre.tabIndex = 0; // it may scroll: reachable by keyboard
  return fragment;
}
