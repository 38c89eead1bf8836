/* The Memmy workbench and its pet page: one event stream (SSE) from memmy serve, a JSON API with the CSRF token,
   no framework, no build step. Text from the model only ever reaches the page through memmyMarkdown (escaped). */
"use strict";
(function () {
  const BOOT = JSON.parse(document.getElementById("boot").textContent);
  const PAGE = document.body.dataset.page;
  const $ = (sel) => document.querySelector(sel);
  const ZH = {
    "New": "新建", "Search": "搜索", "Pinned": "置顶", "Today": "今天", "Yesterday": "昨天", "Last 7 days": "最近 7 天",
    "Older": "更早", "Archived": "已归档", "Scheduled": "定时任务", "once": "一次", "Remove the schedule": "删除定时任务", "New task": "新任务", "Stop": "停止", "Restart": "重新运行", "Send": "发送",
    "Memory panel ↗": "记忆面板 ↗", "Pet": "桌宠", "Settings": "设置", "What should memmy do?": "想让 memmy 做什么？",
    "Your tasks share memory with your other agents. Type / for commands.": "你的任务与其他智能体共享记忆。输入 / 查看命令。",
    "Message memmy — Enter sends, Shift+Enter new line, / for commands": "给 memmy 发消息 — Enter 发送，Shift+Enter 换行，/ 打开命令",
    "Search tasks…": "搜索任务…", "Ask memmy…": "问问 memmy…", "running…": "运行中…", "stopped": "已停止",
    "Rename": "重命名", "Pin": "置顶", "Unpin": "取消置顶", "Archive": "归档", "Restore": "恢复", "Delete": "删除",
    "Rename task": "重命名任务", "memory for this turn": "本轮注入的记忆", "(nothing recalled)": "（没有召回内容）",
    "memmy wants to run:": "memmy 想运行：", "Allow": "允许", "Deny": "拒绝", "allowed": "已允许", "denied": "已拒绝",
    "queued": "已排队", "running": "运行中", "unread": "未读", "Back to the workbench": "返回工作台", "Models": "模型",
    "Slot": "槽位", "Provider": "提供方", "Model": "模型", "Endpoint": "端点", "Key": "密钥", "General": "通用",
    "Language": "语言", "Developer": "开发者", "Usage today": "今日用量", "Calls": "调用", "Tokens": "Token", "Cost": "费用",
    "calls": "调用", "tokens": "Token", "saved and applied by the memory daemon": "已保存，记忆服务已应用",
    "Daily cap for memory work (summary and evolution; chat is counted, never stopped), 0 for none:": "记忆后台任务（摘要与进化）的每日上限（对话只计量、不停止），0 表示不限：",
    "the cap is reached: memory work waits until tomorrow": "已达上限：记忆后台任务明天继续", "The microphone is not available: ": "麦克风不可用：",
    "Speech to text failed: ": "语音转文字失败：", "Presets": "预设", "Name": "名称", "Save": "保存", "off": "关闭",
    "Primary (chat)": "主模型（对话）", "Embedding": "向量嵌入", "Memory summary": "记忆摘要", "Skill evolution": "技能进化",
    "Speech to text (ASR)": "语音转文字（ASR）", "Image generation": "图像生成", "saved": "已保存",
    "saved; restart the memory daemon (memmy-memory serve) to use it": "已保存；重启记忆服务（memmy-memory serve）后生效",
    "Keys may be ${ENV} references (kept as written); an empty key field keeps the key there. Speech to text and image generation are optional.":
      "密钥可写成 ${ENV} 引用（按原样保存）；密钥留空则保留原有密钥。语音转文字与图像生成为可选项。",
    "Presets (/model NAME) are set in ~/.memmy/config.yaml (agents.presets).": "预设（/model 名称）在 ~/.memmy/config.yaml（agents.presets）中设置。", "Log level": "日志级别", "Test connection": "测试连接",
    "Download a diagnostic report": "下载诊断报告", "finished": "已完成",
    "Notify me when a task finishes while I look elsewhere": "任务在我看别处时完成，发通知提醒我", "set": "已设置", "not set": "未设置", "testing…": "测试中…",
    "No keys, tokens, prompts or messages are in it.": "其中不含任何密钥、令牌、提示词或消息。",
    "Channels": "消息渠道", "Connect": "连接", "Update": "更新", "Disconnect": "断开", "Pairing code": "配对码",
    "connected": "已连接", "connecting": "连接中", "retrying": "重试中", "unavailable": "不可用", "disabled": "已停用",
    "not configured": "未配置", "Allowed user ids": "允许的用户 ID", "checking with the platform…": "正在向平台验证…",
    "connected as": "已连接为", "Send this to the bot within 10 minutes:": "10 分钟内把这条发给机器人：",
    "in": "收", "out": "发", "refused": "拒绝", "paired": "已配对", "or the value": "或直接填值",
    "Not available in this version yet; see docs/channels.md.": "此版本尚不可用；见 docs/channels.md。",
    "Talk to the agent from your chat apps, with the same memory. Nobody may talk to a bot until you pair them with a one-time code or list their user id.":
      "在聊天应用里与智能体对话，记忆相同。在你用一次性配对码配对或列出其用户 ID 之前，任何人都不能与机器人对话。",
  };
  const LANG = BOOT.language || localStorage.getItem("memmy.lang") || (navigator.language.startsWith("zh") ? "zh" : "en");
  const t = (text) => (LANG === "zh" && ZH[text]) || text;
  const tr = t;  // inside functions whose task argument is named t
  const GROUPS = [["pinned", t("Pinned")], ["today", t("Today")], ["yesterday", t("Yesterday")],
    ["week", t("Last 7 days")], ["older", t("Older")], ["archived", t("Archived")]];
  function translate() {
    document.documentElement.lang = LANG === "zh" ? "zh-CN" : "en";
    document.querySelectorAll("[data-i18n]").forEach((node) => { node.textContent = t(node.textContent.trim()); });
    document.querySelectorAll("[data-i18n-ph]").forEach((node) => { node.placeholder = t(node.placeholder); });
  }
  let adopting = null;  // a new task's send in flight (see send)
  const state = { tasks: [], current: null, viewSeq: 0, log: [], running: false, seq: 0, files: [], view: null, composing: false, petThread: null };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (v !== false && v != null) node.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children) if (child != null) node.append(child);
    return node;
  }

  async function api(method, path, body) {
    const init = { method, headers: { "x-csrf-token": BOOT.csrf }, credentials: "same-origin" };
    if (body instanceof FormData) init.body = body;
    else if (body !== undefined) { init.body = JSON.stringify(body); init.headers["content-type"] = "application/json"; }
    const answer = await fetch(path, init);
    const data = await answer.json().catch(() => ({}));
    if (!answer.ok) throw new Error(data.error || `HTTP ${answer.status}`);
    return data;
  }

  // -- the message stream ---------------------------------------------------------------------------------
  function md(node, text) { node.innerHTML = window.memmyMarkdown(text); }

  function View(root) {
    this.root = root; this.bubble = null; this.buffer = ""; this.pending = false; this.calls = {};
  }
  View.prototype.user = function (text) {
    this.root.append(el("div", { class: "msg user" }, el("div", { class: "body" }, text)));
    this.bubble = null;
  };
  View.prototype.assistant = function () {
    if (!this.bubble) {
      this.bubble = el("div", { class: "md" });
      this.buffer = "";
      this.root.append(el("div", { class: "msg assistant" }, this.bubble));
    }
    return this.bubble;
  };
  View.prototype.text = function (delta) {
    this.assistant();
    this.buffer += delta;
    if (!this.pending) {
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; if (this.bubble) md(this.bubble, this.buffer); scrollDown(); });
    }
  };
  View.prototype.settle = function (text) { if (text) { this.assistant(); this.buffer = text; md(this.bubble, text); } this.bubble = null; };
  View.prototype.toolCall = function (id, name, args) {
    const result = el("pre", { class: "tool-out" }, "running…");
    const box = el("details", { class: "tool", "data-id": id },
      el("summary", {}, el("span", { class: "tool-name" }, "⚙ " + name), el("span", { class: "tool-args" }, " " + String(args || "").slice(0, 120))),
      el("pre", { class: "tool-in" }, prettyJson(args)), result);
    this.calls[id] = { box, result, name };
    this.root.append(box);
    const artifact = preview(name, args);
    if (artifact) this.root.append(artifact);
    this.bubble = null;
  };
  // A file the agent writes or edits, shown as it will be on disk (text only, never as HTML).
  function preview(name, args) {
    let a;
    try { a = JSON.parse(args || "{}"); } catch (e) { return null; }
    if (!a || typeof a.path !== "string") return null;
    let body;
    if (name === "write_file" && typeof a.content === "string") body = a.content;
    else if (name === "edit_file" && typeof a.old_text === "string") {
      body = a.old_text.split("\n").map((l) => "- " + l).concat(String(a.new_text || "").split("\n").map((l) => "+ " + l)).join("\n");
    } else return null;
    return el("div", { class: "artifact" }, el("pre", { class: "code" },
      el("div", { class: "code-head" }, el("span", {}, (name === "edit_file" ? "✎ " : "▤ ") + a.path)), el("code", {}, body)));
  }
  View.prototype.toolResult = function (id, output, ok) {
    const call = this.calls[id];
    if (!call) return;
    call.result.textContent = String(output || "(no output)");
    call.box.classList.toggle("failed", ok === false);
    const made = call.name === "generate_image" && ok !== false && /^saved images\/([A-Za-z0-9._-]+)/.exec(String(output || ""));
    if (made && state.current) this.image(`/api/sessions/${state.current}/image/${made[1]}`, call.box);
  };
  // A picture the agent or /image made: the file under the task's images/ folder.
  View.prototype.image = function (url, after) {
    const figure = el("figure", { class: "artifact image" }, el("img", { src: url, alt: url.split("/").pop(), loading: "lazy" }));
    if (after) after.after(figure); else this.root.append(figure);
  };
  View.prototype.memory = function (markdown, ids) {
    const links = el("div", { class: "mem-links" });
    for (const id of ids || []) {
      links.append(el("a", { href: `${BOOT.panel}/memories/${encodeURIComponent(id)}`, target: "_blank", rel: "noopener" }, id), " ");
    }
    const body = el("div", { class: "md" });
    md(body, markdown || t("(nothing recalled)"));
    this.root.append(el("details", { class: "memory" }, el("summary", {}, `◈ ${t("memory for this turn")} (${(ids || []).length})`), body, links));
  };
  View.prototype.note = function (text, kind) {
    this.root.append(el("div", { class: "note " + (kind || "") }, el("pre", {}, text)));
    this.bubble = null;
  };
  View.prototype.approval = function (sid, id, command) {
    const box = el("div", { class: "approval" }, el("div", {}, t("memmy wants to run:")), el("pre", {}, command));
    const answer = async (allow) => {
      box.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      await api("POST", `/api/sessions/${sid}/approve`, { id, allow });
      box.append(el("div", { class: "muted" }, t(allow ? "allowed" : "denied")));
    };
    box.append(el("button", { class: "btn primary", type: "button", onclick: () => answer(true) }, t("Allow")),
      el("button", { class: "btn", type: "button", onclick: () => answer(false) }, t("Deny")));
    this.root.append(box);
  };
  View.prototype.apply = function (event) {
    const d = event.data || {};
    switch (event.kind) {
      case "start": this.user(event.text); this.assistant(); break;
      case "text": this.text(event.text); break;
      case "memory": this.memory(event.text, d.ids); break;
      case "tool_call": this.settle(""); this.toolCall(d.id, event.text, d.arguments); break;
      case "tool_result": this.toolResult(d.id, event.text, d.ok); break;
      case "notice": case "compaction": this.note(event.text, "notice"); break;
      case "error": this.note(event.text, "error"); break;
      case "approval": this.approval(event.session, d.id, event.text); break;
      case "queued": this.note(`${t("queued")}: ${event.text}`, "notice"); break;
      case "done":
        if (this.bubble && !this.buffer) { this.bubble.parentNode.remove(); this.bubble = null; }
        if (this.bubble) md(this.bubble, this.buffer);
        this.bubble = null;
        if (d.status === "cancelled") this.note(t("stopped"), "notice");
        break;
      default: break;
    }
  };
  View.prototype.history = function (messages) {
    for (const m of messages) {
      if (m.role === "user") this.user(typeof m.content === "string" ? m.content : JSON.stringify(m.content));
      else if (m.role === "assistant") {
        if (m.content) this.settle(m.content);
        for (const call of m.tool_calls || []) this.toolCall(call.id, call.function.name, call.function.arguments);
        for (const a of m.artifacts || []) {
          const name = a.kind === "image" && /^images\/([A-Za-z0-9._-]+)$/.exec(String(a.path || ""));
          if (name && state.current) this.image(`/api/sessions/${state.current}/image/${name[1]}`);
        }
      } else if (m.role === "tool") this.toolResult(m.tool_call_id, m.content, true);
    }
  };

  function prettyJson(text) { try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return String(text || ""); } }
  function scrollDown() { const s = $("#stream"); if (s) s.scrollTop = s.scrollHeight; }

  // -- the composer ----------------------------------------------------------------------------------------
  function chips() {
    const box = $("#chips");
    box.replaceChildren(...state.files.map((f, i) => el("span", { class: "chip" }, f.name,
      el("button", { type: "button", title: "remove", onclick: () => { state.files.splice(i, 1); chips(); } }, "×"))));
  }
  function addFiles(list) {
    for (const file of list) {
      if (state.files.length >= BOOT.maxFiles) { flash(`at most ${BOOT.maxFiles} attachments`); break; }
      if (file.size > BOOT.maxBytes) { flash(`${file.name} is larger than ${BOOT.maxBytes / 1048576} MB`); continue; }
      state.files.push(file);
    }
    chips();
  }
  function flash(text) { if (state.view) state.view.note(text, "error"); else alert(text); }

  async function send() {
    const input = $("#input");
    const text = input.value;
    if (!text.trim() && !state.files.length) return;
    const form = new FormData();
    form.append("text", text);
    form.append("session", PAGE === "pet" ? (state.petThread || "") : (state.current || ""));
    if (PAGE === "pet") form.append("pet", "1");
    for (const f of state.files) form.append("files", f, f.name);
    input.value = ""; state.files = []; chips(); hideCommands();
    const sentAt = state.seq;
    // A new task's events (its end too) may come before its id does: until it is opened, it is not "out of sight".
    let adopted = () => {};
    if (PAGE === "workbench" && !state.current) {
      const pending = new Promise((resolve) => { adopted = () => { if (adopting === pending) adopting = null; resolve(); }; });
      adopting = pending;
    }
    try { await sendAndShow(form, text, sentAt); } finally { adopted(); }
  }

  async function sendAndShow(form, text, sentAt) {
    const input = $("#input");
    let answer;
    try { answer = await api("POST", "/api/send", form); } catch (e) { input.value = text; flash(String(e.message || e)); return; }
    if (PAGE === "pet") {
      const known = state.petThread === answer.id;
      state.petThread = answer.id || state.petThread;
      if (answer.text) $("#preview").textContent = answer.text;
      // A new thread's first events may have come before its id did: show them now.
      if (!known) for (const e of state.log.filter((x) => x.session === answer.id && x.seq > sentAt)) petEvent(e);
      return refresh();
    }
    if (answer.id && answer.id !== state.current) await open(answer.id);
    if (answer.status === "command" && answer.text) state.view.note(answer.text, "command");
    // A new task opened above already shows the picture (its history keeps it); an open one gets it here.
    if (answer.image && !state.view.root.querySelector(`img[src="${answer.image}"]`)) state.view.image(answer.image);
  }

  function keydown(e) {
    const panel = $("#commands");
    if (panel && !panel.hidden && (e.key === "Tab" || (e.key === "Enter" && !e.shiftKey && !isComposing(e)))) {
      const first = panel.querySelector(".cmd.active") || panel.querySelector(".cmd");
      const input = $("#input");
      if (first && e.key === "Tab") { e.preventDefault(); input.value = first.dataset.name + " "; hideCommands(); return; }
    }
    if (e.key === "Enter" && !e.shiftKey && !isComposing(e)) { e.preventDefault(); send(); }
  }
  // An IME (Chinese, Japanese…) confirms a candidate with Enter: never send then.
  function isComposing(e) { return e.isComposing || e.keyCode === 229 || state.composing; }

  function showCommands() {
    const panel = $("#commands");
    if (!panel) return;
    const value = $("#input").value;
    if (!value.startsWith("/") || value.includes("\n") || value.includes(" ")) return hideCommands();
    const found = BOOT.commands.filter(([name]) => name.startsWith(value));
    if (!found.length) return hideCommands();
    panel.replaceChildren(...found.map(([name, hint, purpose], i) => el("div", {
      class: "cmd" + (i === 0 ? " active" : ""), "data-name": name,
      onmousedown: (e) => { e.preventDefault(); $("#input").value = name + " "; $("#input").focus(); hideCommands(); },
    }, el("b", {}, name), " ", el("span", { class: "muted" }, hint), el("span", { class: "purpose" }, purpose))));
    panel.hidden = false;
  }
  function hideCommands() { const p = $("#commands"); if (p) p.hidden = true; }

  // -- the microphone: MediaRecorder -> /api/transcribe (the ASR slot) -> the input box ----------------------
  const mic = { recorder: null, chunks: [] };
  async function toggleMic() {
    const button = $("#mic");
    if (mic.recorder) { mic.recorder.stop(); return; }
    let stream;
    try { stream = await navigator.mediaDevices.getUserMedia({ audio: true }); }
    catch (e) { showNote(t("The microphone is not available: ") + e.message); return; }
    mic.chunks = [];
    mic.recorder = new MediaRecorder(stream);
    mic.recorder.addEventListener("dataavailable", (e) => { if (e.data && e.data.size) mic.chunks.push(e.data); });
    mic.recorder.addEventListener("stop", async () => {
      stream.getTracks().forEach((track) => track.stop());
      const type = (mic.recorder && mic.recorder.mimeType) || "audio/webm";
      mic.recorder = null;
      button.classList.remove("recording"); button.classList.add("busy");
      const form = new FormData();
      form.append("audio", new Blob(mic.chunks, { type }), "voice." + (type.split("/")[1] || "webm").split(";")[0]);
      try {
        const r = await api("POST", "/api/transcribe", form);
        const input = $("#input");
        input.value = (input.value ? input.value.trimEnd() + " " : "") + r.text;
        input.focus();
      } catch (e) { showNote(t("Speech to text failed: ") + e.message); }
      finally { button.classList.remove("busy"); }
    });
    mic.recorder.start();
    button.classList.add("recording");
  }
  function showNote(text) {
    const chips = $("#chips");
    chips.replaceChildren(el("span", { class: "chip bad" }, text));
  }

  function wireComposer() {
    const micButton = $("#mic");
    if (micButton && BOOT.asr && navigator.mediaDevices && window.MediaRecorder) {
      micButton.hidden = false;
      micButton.addEventListener("click", toggleMic);
    }
    const input = $("#input");
    input.addEventListener("keydown", keydown);
    input.addEventListener("compositionstart", () => { state.composing = true; });
    input.addEventListener("compositionend", () => { setTimeout(() => { state.composing = false; }, 0); });
    input.addEventListener("input", showCommands);
    input.addEventListener("paste", (e) => { if (e.clipboardData && e.clipboardData.files.length) addFiles(e.clipboardData.files); });
    $("#composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
    $("#composer").addEventListener("dragover", (e) => e.preventDefault());
    $("#composer").addEventListener("drop", (e) => { e.preventDefault(); addFiles(e.dataTransfer.files); });
    const files = $("#files");
    if (files) files.addEventListener("change", () => { addFiles(files.files); files.value = ""; });
  }

  // -- the task list ---------------------------------------------------------------------------------------
  let refreshes = 0;
  async function refresh() {
    const mine = ++refreshes;
    const data = await api("GET", "/api/state");
    if (mine !== refreshes) return;  // a later refresh was asked for: its answer wins, whatever comes first
    state.tasks = data.sessions; state.schedules = data.schedules || [];
    if (PAGE === "pet") return renderPet(data);
    renderTasks();
    const task = state.tasks.find((t) => t.id === state.current);
    if (task) setRunning(task.running);
  }
  let refreshTimer = null;
  function refreshSoon() { clearTimeout(refreshTimer); refreshTimer = setTimeout(refresh, 60); }

  function renderTasks() {
    const nav = $("#tasks");
    const blocks = [];
    if (state.schedules && state.schedules.length) {
      blocks.push(el("div", { class: "group", "data-group": "scheduled" }, el("h2", {}, t("Scheduled")),
        ...state.schedules.map((s) => el("div", { class: "task scheduled", "data-schedule": s.id,
          title: s.cron ? `cron ${s.cron}` : t("once") },
        el("span", { class: "clock" }, "◷"), el("span", { class: "task-title" }, s.task),
        el("span", { class: "when muted" }, whenText(s.next)),
        el("span", { class: "actions" }, el("button", { type: "button", title: t("Remove the schedule"), "data-act": "unschedule",
          onclick: async () => { if (confirm(`${t("Remove the schedule")} “${s.task}”?`)) { await api("POST", `/api/schedules/${s.id}/remove`, {}); refresh(); } } }, "✕"))))));
    }
    for (const [key, label] of GROUPS) {
      const rows = state.tasks.filter((t) => t.group === key);
      if (!rows.length) continue;
      blocks.push(el("div", { class: "group", "data-group": key }, el("h2", {}, label), ...rows.map(taskRow)));
    }
    nav.replaceChildren(...blocks);
  }

  function whenText(stamp) {
    const d = new Date(stamp * 1000);
    const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return d.toDateString() === new Date().toDateString() ? hm : `${d.toLocaleDateString()} ${hm}`;
  }

  function taskRow(t) {
    const menu = el("span", { class: "actions" },
      el("button", { type: "button", title: tr("Rename"), "data-act": "rename", onclick: (e) => act(e, t, "rename") }, "✎"),
      el("button", { type: "button", title: t.pinned ? tr("Unpin") : tr("Pin"), "data-act": t.pinned ? "unpin" : "pin", onclick: (e) => act(e, t, t.pinned ? "unpin" : "pin") }, t.pinned ? "☆" : "★"),
      el("button", { type: "button", title: t.archived ? tr("Restore") : tr("Archive"), "data-act": t.archived ? "restore" : "archive", onclick: (e) => act(e, t, t.archived ? "restore" : "archive") }, t.archived ? "↩" : "⊟"),
      el("button", { type: "button", title: tr("Delete"), "data-act": "delete", onclick: (e) => act(e, t, "delete") }, "✕"));
    return el("a", { class: "task" + (t.id === state.current ? " current" : ""), href: `/?s=${t.id}`, "data-id": t.id,
      onclick: (e) => { e.preventDefault(); open(t.id); } },
    t.running ? el("span", { class: "spinner", title: "running" }) : t.unread ? el("span", { class: "dot", title: "unread" }) : el("span", { class: "gap" }),
    t.name.startsWith("schedule:") ? el("span", { class: "clock", title: tr("Scheduled") }, "◷") : null,
    el("span", { class: "task-title" }, t.title || tr("New task")), menu);
  }

  async function act(e, t, verb) {
    e.preventDefault(); e.stopPropagation();
    let body = {};
    if (verb === "rename") {
      const title = prompt(tr("Rename task"), t.title);
      if (title === null) return;
      body = { title };
    }
    if (verb === "delete" && !confirm(`Delete “${t.title}”? This removes the session file.`)) return;
    await api("POST", `/api/sessions/${t.id}/${verb}`, body);
    if (verb === "delete" && t.id === state.current) { state.current = null; blank(); }
    refresh();
  }

  function blank() {
    $("#stream").replaceChildren(el("div", { class: "empty" }, el("h2", {}, t("What should memmy do?")),
      el("p", { class: "muted" }, t("Your tasks share memory with your other agents. Type / for commands."))));
    $("#title").textContent = t("New task");
    state.view = new View($("#stream"));
    history.replaceState(null, "", "/");
    setRunning(false);
  }

  async function open(id) {
    const data = await api("GET", `/api/sessions/${id}`);
    state.current = id;
    state.viewSeq = data.seq;  // events up to here are in the answer; the stream may bring them again
    history.replaceState(null, "", `/?s=${id}`);
    $("#title").textContent = data.task.title || t("New task");
    const stream = $("#stream");
    const built = document.createDocumentFragment();  // one insertion: the page lays out once
    state.view = new View(built);
    state.view.history(data.messages);
    for (const event of data.live) state.view.apply(event);
    stream.replaceChildren(built);
    state.view.root = stream;
    setRunning(data.task.running);
    // Events of this task that came while its answer was on the way were not this page's yet: apply them now.
    for (const event of state.log.filter((e) => e.session === id && e.seq > data.seq)) onEvent(event);
    renderTasks();
    scrollDown();
    $("#input").focus();
  }

  function setRunning(running) {
    state.running = running;
    if (PAGE !== "workbench") return;
    $("#stop").hidden = !running;
    $("#restart").hidden = !state.current;
    $("#state").textContent = running ? t("running…") : "";
    $("#state").classList.toggle("busy", running);
  }

  // -- search (Ctrl/Cmd+K) ---------------------------------------------------------------------------------
  function openSearch() {
    $("#search").hidden = false;
    const input = $("#search-input");
    input.value = ""; input.focus(); runSearch();
  }
  async function runSearch() {
    const q = $("#search-input").value;
    const data = await api("GET", `/api/search?q=${encodeURIComponent(q)}`);
    $("#search-results").replaceChildren(...data.sessions.map((t, i) => el("li", { class: i === 0 ? "active" : "", "data-id": t.id,
      onclick: () => { closeSearch(); open(t.id); } }, t.title || tr("New task"))));
  }
  function closeSearch() { $("#search").hidden = true; }

  // -- events ----------------------------------------------------------------------------------------------
  function listen(after) {
    const source = new EventSource(`/api/events?after=${after}`);
    source.onmessage = (message) => {
      const event = JSON.parse(message.data);
      state.seq = event.seq;
      state.log.push(event);
      if (state.log.length > 4000) state.log.splice(0, 2000);
      onEvent(event);
    };
    source.onerror = () => { source.close(); setTimeout(() => listen(state.seq), 1000); };
  }

  // A finished task the user is not looking at: a system notification, when Settings turned them on.
  async function notifyDone(event) {
    if (!(BOOT.notifications || localStorage.getItem("memmy.notify") === "1") || !window.Notification || Notification.permission !== "granted") return;
    if (adopting) await adopting;  // a task this page just started may be this very one
    if (event.session === state.current && !document.hidden) return;
    new Notification("memmy", { body: `${event.text || t("New task")} — ${t("finished")}`, tag: event.session });
  }

  function onEvent(event) {
    if (event.kind === "idle" && PAGE === "workbench") notifyDone(event);
    const mine = PAGE === "pet" ? event.session === state.petThread : event.session === state.current;
    if (["start", "idle", "meta", "deleted", "queued", "restart", "schedule"].includes(event.kind)) refreshSoon();
    if (!mine) return;
    if (PAGE === "pet") return petEvent(event);
    if (event.seq <= state.viewSeq) return;
    if (event.kind === "restart") { open(event.session); return; }
    if (event.kind === "start") setRunning(true);
    if (event.kind === "idle") { setRunning(false); api("POST", `/api/sessions/${event.session}/read`, {}).catch(() => {}); }
    state.view.apply(event);
  }

  // -- pet -------------------------------------------------------------------------------------------------
  let petText = "";
  function petEvent(event) {
    const preview = $("#preview");
    if (event.kind === "start") { petText = ""; preview.textContent = "…"; }
    if (event.kind === "text") { petText += event.text; md(preview, petText); }
    if (event.kind === "error") preview.textContent = event.text;
    if (event.kind === "done" && event.data && event.data.status === "cancelled") preview.textContent = t("stopped");
  }

  function renderPet(data) {
    const busy = state.tasks.filter((t) => t.running || t.unread);
    $("#badge").textContent = String(busy.length);
    $("#badge").classList.toggle("on", busy.length > 0);
    if (!state.petThread && data.pet) state.petThread = data.pet;
    const rows = [...state.tasks.filter((t) => t.running), ...state.tasks.filter((t) => !t.running && t.unread),
      ...state.tasks.filter((t) => !t.running && !t.unread && !t.archived)].slice(0, 6);
    $("#mini").replaceChildren(...rows.map((t) => el("li", { "data-id": t.id, class: t.id === state.petThread ? "current" : "",
      onclick: () => { state.petThread = t.id; renderPet(data); loadPreview(t.id); },
      ondblclick: () => window.open(`/?s=${t.id}`, "_blank") },
    t.running ? el("span", { class: "spinner" }) : t.unread ? el("span", { class: "dot" }) : el("span", { class: "gap" }),
    el("span", { class: "task-title" }, t.title || tr("New task")))));
  }

  async function loadPreview(id) {
    const data = await api("GET", `/api/sessions/${id}`);
    const last = [...data.messages].reverse().find((m) => m.role === "assistant" && m.content);
    petText = data.live.filter((e) => e.kind === "text").map((e) => e.text).join("");
    md($("#preview"), petText || (last ? last.content : ""));
  }

  // -- start -----------------------------------------------------------------------------------------------
  // -- settings --------------------------------------------------------------------------------------------
  function testButton(body) {
    const status = el("span", { class: "muted test-status" });
    const run = async () => {
      status.textContent = t("testing…");
      const r = await api("POST", "/api/settings/test", body).catch((e) => ({ ok: false, message: String(e.message) }));
      status.textContent = (r.ok ? "✓ " : "✗ ") + r.message;
      status.className = "test-status " + (r.ok ? "ok" : "bad");
    };
    return [el("button", { class: "btn small test", type: "button", onclick: run }, t("Test connection")), status];
  }

  function slotRow(s) {
    const provider = el("select", { name: "provider" }, ...s.providers.map((p) =>
      el("option", { value: p, selected: p === s.provider }, p || t("off"))));
    const model = el("input", { name: "model", value: s.model, size: 14 });
    const base = el("input", { name: "apiBase", value: s.apiBase, placeholder: "https://…/v1", size: 22 });
    const key = el("input", { name: "apiKey", type: "password", autocomplete: "off", size: 12,
      placeholder: s.key || "${ENV_NAME}" });
    const [test, status] = testButton({ slot: s.slot });
    const save = async () => {
      const body = { slot: s.slot, provider: provider.value, model: model.value, apiBase: base.value, apiKey: key.value };
      try {
        const r = await api("POST", "/api/settings/slot", body);
        key.value = ""; key.placeholder = r.slot.key || "${ENV_NAME}";
        status.textContent = "✓ " + t(r.message); status.className = "test-status ok";
      } catch (e) { status.textContent = "✗ " + e.message; status.className = "test-status bad"; }
    };
    return el("tr", { "data-slot": s.slot }, el("td", {}, t(s.label)), el("td", {}, provider), el("td", {}, model),
      el("td", {}, base), el("td", {}, key),
      el("td", {}, el("button", { class: "btn small save", type: "button", onclick: save }, t("Save")), " ", test, " ", status));
  }

  async function usageCard(labels) {
    const data = await api("GET", "/api/usage");
    $("#usage tbody").replaceChildren(...data.slots.map((u) => el("tr", { "data-slot": u.slot },
      el("td", {}, t(labels[u.slot] || u.slot)), el("td", {}, String(u.calls)), el("td", {}, u.tokens.toLocaleString()),
      el("td", {}, u.cost ? "$" + u.cost.toFixed(4) : "—"))));
    $("#cap-calls").value = data.cap.dailyCalls;
    $("#cap-tokens").value = data.cap.dailyTokens;
    const status = $("#cap-status");
    if (data.cap.exhausted) { status.textContent = t("the cap is reached: memory work waits until tomorrow"); status.className = "test-status bad"; }
    $("#cap-save").onclick = async () => {
      try {
        const r = await api("POST", "/api/settings/cap", { dailyCalls: Number($("#cap-calls").value), dailyTokens: Number($("#cap-tokens").value) });
        status.textContent = "✓ " + t(r.message); status.className = "test-status ok";
      } catch (e) { status.textContent = "✗ " + e.message; status.className = "test-status bad"; }
    };
  }

  async function settingsPage() {
    const data = await api("GET", "/api/settings");
    usageCard(Object.fromEntries(data.slots.map((s) => [s.slot, s.label])));
    $("#slots tbody").replaceChildren(...data.slots.map(slotRow));
    $("#models tbody").replaceChildren(...data.models.map((m) => el("tr", { "data-name": m.name },
      el("td", {}, m.name), el("td", {}, m.provider), el("td", {}, m.model), el("td", {}, m.apiBase || "—"),
      el("td", {}, t(m.key ? "set" : "not set")), el("td", {}, ...testButton({ name: m.name })))));
    const level = $("#log-level");
    level.replaceChildren(...data.levels.map((l) => el("option", { value: l, selected: l === data.logLevel }, l)));
    level.addEventListener("change", () => api("POST", "/api/settings/log-level", { level: level.value }));
    const notify = $("#notify");
    notify.checked = data.general.notifications || localStorage.getItem("memmy.notify") === "1";
    notify.addEventListener("change", async () => {
      if (notify.checked && window.Notification && Notification.permission !== "granted") {
        notify.checked = (await Notification.requestPermission()) === "granted";
      }
      localStorage.setItem("memmy.notify", notify.checked ? "1" : "0");
      await api("POST", "/api/settings/general", { notifications: notify.checked });
    });
    const lang = $("#language");
    lang.value = LANG;
    lang.addEventListener("change", async () => {
      localStorage.setItem("memmy.lang", lang.value);
      await api("POST", "/api/settings/general", { language: lang.value });
      location.reload();
    });
  }

  // -- channels --------------------------------------------------------------------------------------------
  function channelCard(c) {
    const fields = c.form.map((f) => el("label", {}, el("span", {}, t(f.label)),
      el("input", { name: f.key, type: f.secret ? "password" : "text", autocomplete: "off",
        placeholder: f.secret ? "${ENV_NAME} " + t("or the value") : "", value: c.public[f.key] || "" })));
    const allow = el("input", { name: "allowFrom", type: "text", value: c.allowFrom.join(", "), placeholder: "123456789, …" });
    const result = el("p", { class: "muted result" });
    const connect = async (event) => {
      event.preventDefault();
      const options = {};
      for (const f of c.form) {
        const v = event.target.querySelector(`[name="${f.key}"]`).value.trim();
        if (v) options[f.key] = v;
      }
      result.textContent = t("checking with the platform…");
      const r = await api("POST", "/api/channels/connect", { name: c.name, options,
        allowFrom: allow.value.split(",").map((x) => x.trim()).filter(Boolean) }).catch((e) => ({ ok: false, error: String(e.message) }));
      result.textContent = r.ok ? `✓ ${t("connected as")} ${r.bot}` : `✗ ${r.error}`;
      result.className = "result " + (r.ok ? "ok" : "bad");
      refreshChannels();
    };
    const pair = async () => {
      const r = await api("POST", "/api/channels/pair", { name: c.name });
      result.textContent = `${t("Send this to the bot within 10 minutes:")} /pair ${r.code}`;
      result.className = "result pair-code";
    };
    const off = async () => { await api("POST", "/api/channels/disconnect", { name: c.name }); refreshChannels(); };
    const form = c.form.length
      ? el("form", { class: "connect", onsubmit: connect }, ...fields, el("label", {}, el("span", {}, t("Allowed user ids")), allow),
          el("button", { class: "btn", type: "submit" }, t(c.enabled ? "Update" : "Connect")))
      : el("p", { class: "muted" }, t("Not available in this version yet; see docs/channels.md."));
    return el("section", { class: "card wide channel", "data-name": c.name },
      el("h2", {}, c.label, " ", el("span", { class: "state state-" + c.state.replace(/\s+/g, "-") }, t(c.state))),
      c.detail || c.problem ? el("p", { class: "muted detail" }, c.problem || c.detail) : null,
      c.note ? el("p", { class: "muted note" }, c.note) : null,
      c.enabled ? el("p", { class: "muted counts" }, `${t("in")} ${c.messagesIn} · ${t("out")} ${c.messagesOut} · ${t("refused")} ${c.refused}`
        + (c.paired.length ? ` · ${t("paired")}: ${c.paired.join(", ")}` : "")) : null,
      form,
      c.form.length ? el("p", {}, el("button", { class: "btn small", type: "button", onclick: pair }, t("Pairing code")), " ",
        c.enabled ? el("button", { class: "btn small", type: "button", onclick: off }, t("Disconnect")) : null) : null,
      result);
  }

  async function refreshChannels() {
    const data = await api("GET", "/api/channels");
    const box = $("#channels");
    const keep = {};  // what the person is typing survives the 5-second refresh
    box.querySelectorAll(".channel").forEach((card) => { keep[card.dataset.name] = card; });
    box.replaceChildren(...data.channels.map((c) => {
      const old = keep[c.name];
      if (old && old.contains(document.activeElement)) {
        old.querySelector("h2 .state").textContent = t(c.state);
        return old;
      }
      return channelCard(c);
    }));
  }

  async function channelsPage() {
    await refreshChannels();
    setInterval(refreshChannels, 5000);
  }

  async function main() {
    translate();
    if (PAGE === "settings") return settingsPage();
    if (PAGE === "channels") return channelsPage();
    wireComposer();
    if (PAGE === "pet") {
      $("#preview").addEventListener("dblclick", () => { if (state.petThread) window.open(`/?s=${state.petThread}`, "_blank"); });
      const data = await api("GET", "/api/state");
      state.seq = data.seq;
      state.tasks = data.sessions; state.schedules = data.schedules || [];
      renderPet(data);
      if (state.petThread) loadPreview(state.petThread);
      listen(state.seq);
      return;
    }
    $("#panel-link").href = BOOT.panel;
    $("#new-task").addEventListener("click", () => { state.current = null; blank(); renderTasks(); $("#input").focus(); });
    $("#stop").addEventListener("click", () => api("POST", `/api/sessions/${state.current}/stop`, {}));
    $("#restart").addEventListener("click", () => api("POST", `/api/sessions/${state.current}/restart`, {}));
    $("#open-search").addEventListener("click", openSearch);
    $("#search-input").addEventListener("input", runSearch);
    $("#search-input").addEventListener("keydown", (e) => {
      if (e.key === "Escape") closeSearch();
      if (e.key === "Enter" && !isComposing(e)) { const first = $("#search-results li"); if (first) { closeSearch(); open(first.dataset.id); } }
    });
    $("#search").addEventListener("click", (e) => { if (e.target.id === "search") closeSearch(); });
    document.addEventListener("keydown", (e) => {
      if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "k") { e.preventDefault(); openSearch(); }
    });
    document.addEventListener("click", (e) => {
      if (e.target.classList && e.target.classList.contains("copy")) navigator.clipboard.writeText(e.target.closest("pre").querySelector("code").textContent);
    });
    const data = await api("GET", "/api/state");
    state.seq = data.seq;
    state.tasks = data.sessions; state.schedules = data.schedules || [];
    const wanted = new URLSearchParams(location.search).get("s");
    if (wanted) await open(wanted); else { blank(); renderTasks(); }
    listen(state.seq);
  }
  main();
})();
