// The interactive API reference: the OpenAPI document rendered as a list of operations, each with a form that
// sends the request with the token typed above. Every text from the document is set with textContent.
const METHODS = ["get", "post", "put", "patch", "delete"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function resolve(doc, schema) {
  let seen = 0;
  while (schema && schema.$ref && seen++ < 20) {
    schema = schema.$ref.replace(/^#\//, "").split("/").reduce((node, key) => (node || {})[key], doc);
  }
  return schema || {};
}

function example(doc, schema, depth = 0) {
  schema = resolve(doc, schema);
  if (depth > 4) return null;
  if (schema.example !== undefined) return schema.example;
  if (schema.default !== undefined) return schema.default;
  const variant = schema.oneOf || schema.anyOf;
  if (variant) return example(doc, variant.find((s) => resolve(doc, s).type !== "null") || variant[0], depth + 1);
  if (schema.enum) return schema.enum[0];
  switch (schema.type) {
    case "object": {
      const out = {};
      for (const name of schema.required || []) out[name] = example(doc, schema.properties[name], depth + 1);
      return out;
    }
    case "array": return [];
    case "integer": case "number": return 0;
    case "boolean": return false;
    case "string": return "";
    default: return null;
  }
}

function parameters(op) {
  return (op.parameters || []).filter((p) => p.in === "path" || p.in === "query");
}

function tryIt(doc, method, path, op) {
  const inputs = {};
  const rows = parameters(op).map((p) => {
    inputs[p.name] = el("input", { placeholder: p.in + (p.required ? ", required" : "") });
    return el("tr", {}, el("td", {}, p.name), el("td", {}, inputs[p.name]));
  });
  const content = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
  const body = content ? el("textarea", {}) : null;
  if (body) body.value = JSON.stringify(example(doc, content.schema), null, 2);
  const out = el("pre", { class: "muted" }, "no request sent yet");
  const send = el("button", {}, "Send");
  send.addEventListener("click", async () => {
    let url = path.replace(/\{([^}:]+)(:[^}]*)?\}/g, (_, name) => encodeURIComponent(inputs[name]?.value || ""));
    const query = new URLSearchParams();
    for (const p of parameters(op)) if (p.in === "query" && inputs[p.name].value) query.set(p.name, inputs[p.name].value);
    if ([...query].length) url += "?" + query;
    const headers = { Accept: "application/json" };
    const token = document.getElementById("token").value.trim();
    if (token) headers.Authorization = "Bearer " + token;
    if (body) headers["Content-Type"] = "application/json";
    out.textContent = method.toUpperCase() + " " + url + " …";
    try {
      const answer = await fetch(url, { method: method.toUpperCase(), headers, body: body ? body.value : undefined });
      const text = op["x-stream"] || (answer.headers.get("content-type") || "").startsWith("text/event-stream")
        ? "(an event stream: open it with the SDK, the CLI or EventSource)" : await answer.text();
      let shown = text;
      try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON: shown as sent */ }
      out.textContent = answer.status + " " + answer.statusText + "\n\n" + shown;
    } catch (error) {
      out.textContent = "request failed: " + error;
    }
  });
  return el("div", {}, el("h4", {}, "Try it"), rows.length ? el("table", {}, ...rows) : "", body || "", send, out);
}

function operation(doc, method, path, op) {
  const summary = el("summary", {}, el("span", { class: "method " + method }, method.toUpperCase()),
    el("span", { class: "path" }, path), " ", el("span", { class: "muted" }, op.summary || op.operationId || ""));
  const body = el("div", { class: "body" });
  if (op.description) body.append(el("p", {}, op.description));
  body.append(el("p", { class: "muted" }, "operationId: " + (op.operationId || "—")));
  const params = op.parameters || [];
  if (params.length) {
    body.append(el("h4", {}, "Parameters"), el("table", {},
      el("tr", {}, el("th", {}, "name"), el("th", {}, "in"), el("th", {}, "required"), el("th", {}, "description")),
      ...params.map((p) => el("tr", {}, el("td", {}, p.name), el("td", {}, p.in), el("td", {}, p.required ? "yes" : ""),
        el("td", {}, p.description || "")))));
  }
  const content = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
  if (content) body.append(el("h4", {}, "Body"), el("pre", {}, JSON.stringify(resolve(doc, content.schema), null, 2)));
  body.append(el("h4", {}, "Answers"), el("table", {},
    ...Object.entries(op.responses || {}).map(([status, answer]) =>
      el("tr", {}, el("td", {}, status), el("td", {}, resolve(doc, answer).description || "")))));
  body.append(tryIt(doc, method, path, op));
  return el("details", { class: "op", id: op.operationId || path }, summary, body);
}

async function main() {
  const main = document.getElementById("main");
  const doc = await (await fetch("/schema/openapi.json")).json();
  document.getElementById("version").textContent = (doc.info && doc.info.version) || "";
  const byTag = new Map();
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const method of METHODS) {
      if (!item[method]) continue;
      const tag = (item[method].tags || ["other"])[0];
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push(operation(doc, method, path, item[method]));
    }
  }
  const intro = el("p", {}, (doc.info && doc.info.description) || "");
  main.replaceChildren(intro, ...[...byTag].flatMap(([tag, ops]) => [el("h2", {}, tag), ...ops]));
}

main().catch((error) => {
  document.getElementById("main").replaceChildren(el("p", {}, "could not load the OpenAPI document: " + error));
});
