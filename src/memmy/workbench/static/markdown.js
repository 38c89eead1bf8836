/* Safe streaming Markdown: everything is HTML-escaped first, then only our own tags are added, so raw HTML from
   the model is shown as text. Fenced code blocks, inline code, bold, italics, headings, lists, quotes, http(s)
   links. window.memmyMarkdown(text) -> HTML string. */
"use strict";
(function () {
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const escape = (s) => s.replace(/[&<>"']/g, (c) => ESC[c]);

  function inline(s) {
    const codes = [];
    s = s.replace(/`([^`\n]+)`/g, (_, c) => { codes.push(c); return "\u0000" + (codes.length - 1) + "\u0000"; });
    s = s.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g,
      (_, label, url) => `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`);
    s = s.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>");
    s = s.replace(/(^|[\s(])\*([^*\n]+)\*(?=[\s).,;:!?]|$)/g, "$1<em>$2</em>");
    return s.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[Number(i)]}</code>`);
  }

  function blocks(text) {
    const out = [];
    let list = null;
    const close = () => { if (list) { out.push(`</${list}>`); list = null; } };
    let para = [];
    const flush = () => { if (para.length) { out.push(`<p>${inline(para.join("<br>"))}</p>`); para = []; } };
    for (const line of text.split("\n")) {
      let m;
      if (!line.trim()) { flush(); close(); continue; }
      if ((m = /^(#{1,4})\s+(.*)$/.exec(line))) { flush(); close(); const n = m[1].length + 1; out.push(`<h${n}>${inline(m[2])}</h${n}>`); continue; }
      if ((m = /^\s*[-*+]\s+(.*)$/.exec(line)) || (m = /^\s*\d+[.)]\s+(.*)$/.exec(line))) {
        flush();
        const kind = /^\s*\d/.test(line) ? "ol" : "ul";
        if (list !== kind) { close(); out.push(`<${kind}>`); list = kind; }
        out.push(`<li>${inline(m[1])}</li>`);
        continue;
      }
      if ((m = /^&gt;\s?(.*)$/.exec(line))) { flush(); close(); out.push(`<blockquote>${inline(m[1])}</blockquote>`); continue; }
      close();
      para.push(line);
    }
    flush(); close();
    return out.join("");
  }

  window.memmyMarkdown = function (source) {
    const parts = escape(String(source || "")).split(/^```/m);
    let html = "";
    parts.forEach((part, i) => {
      if (i % 2 === 0) { html += blocks(part); return; }
      const nl = part.indexOf("\n");
      const lang = nl >= 0 ? part.slice(0, nl).trim().replace(/[^\w+-]/g, "") : "";
      const code = nl >= 0 ? part.slice(nl + 1) : "";
      html += `<pre class="code"><div class="code-head"><span>${lang || "code"}</span><button type="button" class="copy">copy</button></div><code>${code.replace(/\n$/, "")}</code></pre>`;
    });
    return html;
  };
})();
