// memmy-memory: OpenCode plugin installed by `memmy-memory install opencode`; remove it the same way.
// Recalls shared memory before each prompt (chat.message) and captures the finished turn (session.idle).
// Every network call is time-boxed and fail-open: an error or a slow daemon never breaks an OpenCode turn.
// Built on the shared client (templates/memmy_client.js: loadConfig, createClient, text, sanitize, packet, ...),
// which the installer inserts right below this header: the installed plugin is one self-contained module.

const SOURCE = "opencode";
const ADAPTER_ID = "memmy-opencode-plugin";
const RESUME_START = "MEMMY_RESUME_COMMAND_ARGUMENTS:";
const RESUME_END = "MEMMY_RESUME_COMMAND_END";

function clone(value) {
  try {
    return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
  } catch {
    return undefined;
  }
}

function parseResume(raw) {
  const start = raw.indexOf(RESUME_START);
  if (start < 0) return null;
  const end = raw.indexOf(RESUME_END, start);
  return raw.slice(start + RESUME_START.length, end < 0 ? undefined : end).trim();
}

export const MemmyMemory = async ({ directory, worktree } = {}) => {
  const config = loadConfig(CONFIG_URL);
  const workspace = text(directory) || text(worktree) || process.cwd();
  const send = createClient(config, SOURCE);
  /** Every request of this plugin instance carries the project's workspace. */
  const call = (method, path, body, budgetMs) => send(method, path, body, budgetMs, workspace);
  const opened = new Set();
  const pending = new Map();
  const userMessages = new Set();
  const latestRequest = new Map();

  const remaining = (deadline) => deadline - Date.now();

  async function ensureSession(sessionID, deadline) {
    const sessionId = `opencode-memory-${sessionID}`;
    if (opened.has(sessionId)) return sessionId;
    const result = await call("POST", "/api/v1/sessions/open",
      { sessionId, source: SOURCE, workspacePath: workspace }, remaining(deadline));
    if (!result.ok) return null;
    opened.add(sessionId);
    return sessionId;
  }

  function rewrite(parts, textParts, content) {
    textParts[0].text = content;
    for (const part of textParts.slice(1)) {
      const index = parts.indexOf(part);
      if (index >= 0) parts.splice(index, 1);
    }
  }

  async function resume(turn, parts, textParts, query) {
    const request = `Continue the earlier work about: ${query}`;
    turn.query = request;
    if (!query) {
      rewrite(parts, textParts, "Usage: /memmy-resume <what you were working on>");
      return;
    }
    const result = await call("POST", "/api/v1/memory/search",
      { query, layers: ["L1"], limit: 5, source: SOURCE }, config.timeoutMs);
    const markdown = result.ok ? text(result.data.injectedContext) : "";
    rewrite(parts, textParts, packet(markdown || "No relevant Memmy memories found.", "resume", request));
  }

  async function complete(sessionID) {
    const turn = pending.get(sessionID);
    if (!turn) return;
    pending.delete(sessionID);
    const answer = [...turn.answers.values()].map(sanitize).filter(Boolean).join("\n\n");
    const toolCalls = [...turn.toolCalls.values()];
    if (!answer && !toolCalls.length && turn.status === "succeeded") return;
    const deadline = Date.now() + config.captureTimeoutMs;
    const sessionId = await ensureSession(sessionID, deadline);
    if (!sessionId) return;
    const fallback = turn.status === "succeeded" ? "(no text answer)" : `(turn ${turn.status}${turn.error ? ": " + turn.error : ""})`;
    const body = {
      sessionId, query: turn.query, answer: answer || fallback, status: turn.status, toolCalls,
      sourceMemoryIds: turn.sourceMemoryIds, source: SOURCE, adapterId: ADAPTER_ID,
    };
    body.requestId = `opencode-complete:${turn.turnId}:${fnv1a(JSON.stringify(body))}`;
    await call("POST", `/api/v1/turns/${encodeURIComponent(turn.turnId)}/complete`, body, remaining(deadline));
  }

  async function recall(input, output) {
    const parts = Array.isArray(output && output.parts) ? output.parts : [];
    const textParts = parts.filter((p) => p && p.type === "text" && !p.synthetic && typeof p.text === "string");
    const sessionID = text(input && input.sessionID) || text(output && output.message && output.message.sessionID);
    if (!textParts.length || !sessionID) return;
    const raw = textParts.map((p) => p.text).join("\n\n");
    const resumeQuery = parseResume(raw);
    const query = resumeQuery === null ? sanitize(raw) : resumeQuery;
    if (resumeQuery === null && (!query || query.startsWith("/"))) return;
    const messageID = text(input && input.messageID) || text(output && output.message && output.message.id);
    if (messageID) userMessages.add(messageID);
    const turnId = messageID ? `opencode-${messageID}` : `opencode-turn-${fnv1a(sessionID + query + Date.now())}`;
    const turn = {
      turnId, query, userMessageId: messageID, answers: new Map(), toolCalls: new Map(),
      status: "succeeded", error: "", sourceMemoryIds: [],
    };
    pending.set(sessionID, turn);
    latestRequest.set(sessionID, query);
    if (resumeQuery !== null) {
      await resume(turn, parts, textParts, resumeQuery);
      return;
    }
    if (query.length < MIN_QUERY_CHARS) return;
    const deadline = Date.now() + config.timeoutMs;
    const sessionId = await ensureSession(sessionID, deadline);
    if (!sessionId) return;
    const started = await call("POST", "/api/v1/turns/start", {
      sessionId, turnId, query, source: SOURCE, adapterId: ADAPTER_ID, requestId: `opencode-start:${turnId}`,
    }, remaining(deadline));
    if (!started.ok) return;
    const ids = started.data.sourceMemoryIds;
    turn.sourceMemoryIds = Array.isArray(ids) ? ids.filter((id) => typeof id === "string") : [];
    const markdown = text(started.data.injectedContext && started.data.injectedContext.markdown);
    if (markdown) rewrite(parts, textParts, packet(markdown, "turn_start", query));
  }

  function noteAnswer(sessionID, messageID, partID, value) {
    const turn = pending.get(text(sessionID));
    const id = text(messageID);
    if (!turn || !id || id === turn.userMessageId || userMessages.has(id)) return;
    if (typeof value === "string" && !value.includes("<memmy_memory_context")) {
      turn.answers.set(text(partID) || id, value);
    }
  }

  function onEvent(event) {
    const props = event && event.properties && typeof event.properties === "object" ? event.properties : {};
    const type = event && event.type;
    if (type === "message.updated") {
      const info = props.info || {};
      if (info.role === "user" && text(info.id)) userMessages.add(text(info.id));
      return null;
    }
    if (type === "message.part.updated") {
      const part = props.part || {};
      if (part.type === "text" && !part.synthetic) noteAnswer(part.sessionID, part.messageID, part.id, part.text);
      return null;
    }
    if (type === "session.error") {
      const turn = pending.get(text(props.sessionID));
      if (turn) {
        const error = props.error || {};
        turn.status = error.name === "MessageAbortedError" ? "cancelled" : "failed";
        turn.error = text(error.data && error.data.message) || text(error.message) || text(error.name);
      }
      return null;
    }
    const idle = type === "session.idle" || (type === "session.status" && props.status && props.status.type === "idle");
    return idle ? complete(text(props.sessionID)) : null;
  }

  async function guarded(work, fallback) {
    try {
      return await work();
    } catch {
      return fallback;
    }
  }

  const hooks = {
    "chat.message": (input, output) => guarded(() => recall(input, output)),
    "tool.execute.before": (input, output) => guarded(async () => {
      const turn = pending.get(text(input && input.sessionID));
      if (!turn || MEMMY_TOOLS.has(input.tool)) return;
      const id = text(input.callID) || `call-${turn.toolCalls.size}`;
      turn.toolCalls.set(id, { id, name: text(input.tool) || "tool", input: clone(output && output.args), output: null, error: null });
    }),
    "tool.execute.after": (input, output) => guarded(async () => {
      const turn = pending.get(text(input && input.sessionID));
      if (!turn || MEMMY_TOOLS.has(input.tool)) return;
      const id = text(input.callID) || `call-${turn.toolCalls.size}`;
      const entry = turn.toolCalls.get(id) || { id, name: text(input.tool) || "tool", input: clone(input.args), error: null };
      entry.output = truncate(sanitize(toText(output && output.output)), TOOL_OUTPUT_MAX_CHARS);
      const error = output && output.metadata && output.metadata.error;
      if (error) entry.error = truncate(toText(error), TOOL_OUTPUT_MAX_CHARS);
      turn.toolCalls.set(id, entry);
    }),
    "experimental.text.complete": (input, output) => guarded(async () => {
      noteAnswer(input && input.sessionID, input && input.messageID, input && input.partID, output && output.text);
    }),
    event: ({ event } = {}) => guarded(async () => {
      await onEvent(event);
    }),
  };

  const sdk = await guarded(() => import("@opencode-ai/plugin"), null);
  const tool = sdk && typeof sdk.tool === "function" && sdk.tool.schema ? sdk.tool : null;
  if (tool) hooks.tool = defineTools(tool, call, config, latestRequest);
  return hooks;
};

/** memmy_memory_search/get/add; registered only when OpenCode's plugin SDK (and its schema) can be imported. */
function defineTools(tool, call, config, latestRequest) {
  const z = tool.schema;
  const layer = () => z.enum(["L1", "L2", "L3", "Skill"]);
  const unavailable = (result) => `Memmy memory is unavailable (${result.error}); continue without it.`;
  const request = (context, fallback) => latestRequest.get(text(context && context.sessionID)) || fallback;
  return {
    memmy_memory_search: tool({
      description: "Search Memmy shared memory for earlier decisions, fixes, preferences and tasks.",
      args: { query: z.string().describe("What you need to know"), layers: z.array(layer()).optional() },
      async execute(args, context) {
        const body = { query: text(args && args.query), source: SOURCE, limit: 10 };
        if (Array.isArray(args && args.layers) && args.layers.length) body.layers = args.layers;
        const result = await call("POST", "/api/v1/memory/search", body, config.toolTimeoutMs);
        if (!result.ok) return unavailable(result);
        const markdown = text(result.data.injectedContext) || "No relevant Memmy memories found.";
        return packet(markdown, "tool_search", request(context, body.query));
      },
    }),
    memmy_memory_get: tool({
      description: "Read one Memmy memory in full by its id (an id shown in recalled context).",
      args: { id: z.string().describe("Memory id, e.g. trace_...") },
      async execute(args, context) {
        const id = text(args && args.id);
        if (!id) return "Missing required parameter: id";
        const result = await call("GET", `/api/v1/memory/${encodeURIComponent(id)}`, undefined, config.toolTimeoutMs);
        if (!result.ok) return unavailable(result);
        const detail = result.data;
        const body = [`id: ${detail.id}`, `layer: ${detail.memoryLayer}`, `title: ${text(detail.title)}`, "",
          truncate(text(detail.content), TOOL_OUTPUT_MAX_CHARS)].join("\n");
        return packet(body, "tool_get", request(context, `Read Memmy memory ${id}`));
      },
    }),
    memmy_memory_add: tool({
      description: "Store a durable fact, preference, decision or procedure in Memmy (never secrets).",
      args: {
        content: z.string().describe("The fact to remember"), title: z.string().optional(),
        tags: z.array(z.string()).optional(), layer: layer().optional(),
      },
      async execute(args) {
        const content = sanitize(args && args.content);
        if (!content) return "Missing required parameter: content";
        const body = { content, source: SOURCE, layer: text(args.layer) || "L1" };
        if (text(args.title)) body.title = text(args.title);
        if (Array.isArray(args.tags)) body.tags = args.tags.filter((tag) => typeof tag === "string");
        const result = await call("POST", "/api/v1/memory/add", body, config.toolTimeoutMs);
        if (!result.ok) return unavailable(result);
        return `Stored Memmy memory ${result.data.id}: ${text(result.data.summary) || cut(content, 140)}`;
      },
    }),
  };
}
