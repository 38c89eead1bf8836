// memmy panel: the only script. Keyboard shortcut "/" for search, confirmations, search results loaded after
// the page, and the live sync progress (SSE).
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    const target = event.target;
    const typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
    if (event.key === "/" && !typing) {
      const box = document.querySelector("[data-hotkey='/']");
      if (box) { event.preventDefault(); box.focus(); }
    }
  });
  document.addEventListener("submit", function (event) {
    const form = event.target;
    const question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
  const results = document.getElementById("search-results");
  if (results && results.getAttribute("data-src") && window.fetch) {
    // The search page answers at once; its results come from the same engine as a fragment.
    fetch(results.getAttribute("data-src"), { headers: { "x-panel-fragment": "1" }, credentials: "same-origin" })
      .then(function (answer) { return answer.ok ? answer.text() : Promise.reject(answer.status); })
      .then(function (html) { results.innerHTML = html; })
      .catch(function (why) { results.textContent = "search failed (" + why + ")"; })
      .finally(function () { results.setAttribute("aria-busy", "false"); results.setAttribute("data-loaded", "1"); });
  }
  const box = document.getElementById("sync-progress");
  if (box && window.EventSource) {
    const job = box.getAttribute("data-job");
    const state = document.getElementById("sync-state");
    const counts = document.getElementById("sync-counts");
    const detail = document.getElementById("sync-detail");
    const events = new EventSource("/panel/sync/" + encodeURIComponent(job) + "/events");
    events.addEventListener("progress", function (message) {
      const status = JSON.parse(message.data);
      state.textContent = status.state;
      const totals = status.totals || {};
      counts.textContent = Object.keys(totals).map(function (k) { return k + ": " + JSON.stringify(totals[k]); }).join(" · ");
      detail.textContent = (status.sources || []).map(function (s) {
        return s.source + ": " + s.state + ", " + s.conversations + " conversations, " + s.turnsAdded + " turns added";
      }).join("\n");
      if (["done", "stopped", "failed"].indexOf(status.state) >= 0) { events.close(); box.setAttribute("data-finished", status.state); }
    });
    events.onerror = function () { events.close(); };
  }
})();
