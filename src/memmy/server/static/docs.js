// memmy's API page: renders the OpenAPI document embedded in this page (no network, no CDN).
(function () {
  "use strict";
  const doc = JSON.parse(document.getElementById("openapi").textContent);
  const el = (tag, attrs, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const child of children) node.append(child);
    return node;
  };
  const resolve = (schema) => {
    if (schema && schema.$ref) {
      const name = schema.$ref.split("/").pop();
      return (doc.components && doc.components.schemas && doc.components.schemas[name]) || schema;
    }
    return schema;
  };
  const pretty = (value) => el("pre", {}, JSON.stringify(value, null, 2));
  document.getElementById("info").textContent =
    `${doc.info.title} ${doc.info.version}` + (doc.info.description ? ` — ${doc.info.description}` : "");
  const ops = document.getElementById("ops");
  const toc = document.getElementById("toc");
  let index = 0;
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const id = `op-${index++}`;
      const body = el("div", { class: "body" });
      if (op.description) body.append(el("p", {}, op.description));
      const params = (op.parameters || []).concat(item.parameters || []);
      if (params.length) {
        const table = el("table", {}, el("tr", {}, el("th", {}, "parameter"), el("th", {}, "in"), el("th", {}, "schema")));
        for (const p of params) {
          table.append(el("tr", {}, el("td", {}, el("code", {}, p.name + (p.required ? " *" : ""))),
            el("td", {}, p.in), el("td", {}, el("code", {}, JSON.stringify(resolve(p.schema) || {})))));
        }
        body.append(el("h4", {}, "Parameters"), table);
      }
      const request = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
      if (request) body.append(el("h4", {}, "Request body (JSON)"), pretty(resolve(request.schema)));
      const responses = el("table", {}, el("tr", {}, el("th", {}, "status"), el("th", {}, "meaning")));
      for (const [status, response] of Object.entries(op.responses || {})) {
        responses.append(el("tr", {}, el("td", {}, status), el("td", {}, response.description || "")));
      }
      body.append(el("h4", {}, "Responses"), responses);
      const summary = el("summary", {}, el("span", { class: `m ${method}` }, method.toUpperCase()),
        el("code", {}, path), ` ${op.summary || ""}`);
      const details = el("details", { class: "op", id }, summary, body);
      details.dataset.text = `${method} ${path} ${op.summary || ""}`.toLowerCase();
      ops.append(details);
      const link = el("a", { href: `#${id}` }, `${method.toUpperCase()} ${path}`);
      link.dataset.target = id;
      toc.append(link);
    }
  }
  document.getElementById("filter").addEventListener("input", (event) => {
    const needle = event.target.value.trim().toLowerCase();
    for (const details of ops.children) {
      const hide = needle && !details.dataset.text.includes(needle);
      details.classList.toggle("hidden", hide);
      toc.querySelector(`[data-target="${details.id}"]`).classList.toggle("hidden", hide);
    }
  });
  if (location.hash) { const target = document.querySelector(location.hash); if (target) target.open = true; }
})();
