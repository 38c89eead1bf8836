"""OpenClaw integration: openclaw.json merge and memory-slot conflicts, and the installed plugin run by Node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memmy.integrations.agents.openclaw import INSTALLER
from tests.agent_homes import install_context, needs_node, run_node_driver, snapshot, start_with_memory
from tests.conftest import Daemon

PROMPT = "How do I rotate the billing service API keys?"
MEMORY = "Billing API keys are rotated with `scripts/rotate_billing_keys.py --env prod`; notify #billing-ops first."

# The fake host: OpenClaw's plugin `api` object, recording what the (real) plugin registers. The plugin's own
# handlers are then called with the event and context shapes OpenClaw passes (pi-style messages).
DRIVER = r"""
import { pathToFileURL } from "node:url";
const [indexPath, workspaceDir, prompt] = process.argv.slice(2);
const plugin = (await import(pathToFileURL(indexPath).href)).default;
const handlers = {}, tools = {}, commands = {}, capabilities = [];
const api = {
  id: "memmy-memory", pluginConfig: { endpoint: "http://127.0.0.1:9" },
  logger: { info() {}, warn() {}, error() {}, debug() {} },
  registerTool(definition, options) { tools[(options && options.name) || definition.name] = definition; },
  registerCommand(command) { commands[command.name] = command; },
  registerMemoryCapability(capability) { capabilities.push(capability.promptBuilder({ availableTools: [] })); },
  on(name, handler) { handlers[name] = handler; },
};
plugin.register(api);
const ctx = { agentId: "main", sessionKey: "agent:main:main", sessionId: "0f3c9a21-live", workspaceDir,
  runId: "run-1" };
const history = [{ role: "user", content: [{ type: "text", text: "hello there" }], timestamp: 1 },
  { role: "assistant", content: [{ type: "text", text: "Hi! How can I help?" }], stopReason: "stop" }];
let t0 = Date.now();
const built = await handlers.before_prompt_build({ prompt, messages: history }, ctx);
const buildMs = Date.now() - t0;
const user = { role: "user", content: [{ type: "text", text: prompt }], timestamp: 2 };
const run = [...history, user,
  { role: "assistant", content: [{ type: "text", text: "Let me check the script." },
    { type: "toolCall", id: "toolu_1", name: "exec", arguments: { command: "ls scripts" } }], stopReason: "toolUse" },
  { role: "toolResult", toolCallId: "toolu_1", toolName: "exec",
    content: [{ type: "text", text: "rotate_billing_keys.py" }], isError: false },
  { role: "assistant", stopReason: "stop",
    content: [{ type: "text", text: "Run scripts/rotate_billing_keys.py --env prod after notifying #billing-ops." }] }];
t0 = Date.now();
await handlers.agent_end({ messages: run, success: true, runId: "run-1", durationMs: 1200 }, ctx);
const endMs = Date.now() - t0;
const ctx2 = { ...ctx, runId: "run-2" };
await handlers.before_prompt_build({ prompt: "Also rotate the staging billing keys please" }, ctx2);
await handlers.agent_end({ messages: [...run, { role: "user", content: "Also rotate the staging billing keys please" }],
  success: false, error: "Request was aborted", runId: "run-2" }, ctx2);
const search = await tools.memmy_memory_search.execute("call-9", { query: "billing keys rotation" });
const resume = await commands["memmy-resume"].handler({ args: "billing keys" });
console.log(JSON.stringify({ handlers: Object.keys(handlers), tools: Object.keys(tools),
  commands: Object.keys(commands), capabilities, built, buildMs, endMs, search, resume }));
"""


def seed(home: Path, plugins: dict[str, Any]) -> Path:
    """A realistic existing OpenClaw state directory with the given ``plugins`` section."""
    root = home / ".openclaw"
    (root / "workspace").mkdir(parents=True)
    (root / "extensions" / "voice-call").mkdir(parents=True)
    (root / "extensions" / "voice-call" / "openclaw.plugin.json").write_text('{"id": "voice-call"}\n')
    config = {
        "agents": {
            "defaults": {"model": {"primary": "anthropic/claude-sonnet-4-5"}, "workspace": str(root / "workspace")}
        },
        "channels": {"telegram": {"enabled": True, "botToken": "123456:ABC", "dmPolicy": "pairing"}},
        "gateway": {"port": 18789, "auth": {"mode": "token", "token": "gw-secret"}},
        "plugins": plugins,
    }
    (root / "openclaw.json").write_text(json.dumps(config, indent=2) + "\n")
    (root / "workspace" / "AGENTS.md").write_text("# Agent notes\n\nAlways answer in English.\n")
    return root


FOREIGN: dict[str, Any] = {
    "allow": ["voice-call"],
    "entries": {"voice-call": {"enabled": True, "config": {"provider": "twilio"}}},
}


def test_install_merges_every_foreign_key_and_removal_restores_bytes(isolated_home: Path) -> None:
    root = seed(isolated_home, json.loads(json.dumps(FOREIGN)))
    original = snapshot(root)
    ctx = install_context(isolated_home, token="claw-token")
    INSTALLER.plan_install(ctx).apply()
    merged = json.loads((root / "openclaw.json").read_text())
    before = json.loads(original["openclaw.json"])
    assert {k: v for k, v in merged.items() if k != "plugins"} == {k: v for k, v in before.items() if k != "plugins"}
    plugins = merged["plugins"]
    assert plugins["enabled"] is True and plugins["slots"] == {"memory": "memmy-memory"}
    assert plugins["allow"] == ["voice-call", "memmy-memory"]
    assert plugins["entries"]["voice-call"] == FOREIGN["entries"]["voice-call"]
    entry = plugins["entries"]["memmy-memory"]
    assert entry["enabled"] is True and entry["hooks"] == {
        "allowPromptInjection": True,
        "allowConversationAccess": True,
    }
    assert "token" not in entry["config"]  # the token lives in the 0600 config file only
    assert plugins["installs"]["memmy-memory"]["installPath"] == str(root / "extensions" / "memmy-memory")
    extension = root / "extensions" / "memmy-memory"
    assert json.loads((extension / "openclaw.plugin.json").read_text())["kind"] == "memory"
    assert json.loads((extension / "package.json").read_text())["openclaw"]["extensions"] == ["./index.mjs"]
    assert (extension / "memmy-memory-config.json").stat().st_mode & 0o777 == 0o600
    assert "<!-- memmy:start v=1 -->" in (root / "workspace" / "AGENTS.md").read_text()
    assert "do not run the session or turn commands" in (root / "skills" / "memmy-memory" / "SKILL.md").read_text()
    assert INSTALLER.plan_install(ctx).effective == []
    INSTALLER.plan_remove(ctx).apply()
    assert snapshot(root) == original


def test_memory_slot_held_by_another_plugin_is_kept_unless_confirmed(isolated_home: Path) -> None:
    plugins: dict[str, Any] = {
        "enabled": False,
        "slots": {"memory": "memory-lancedb"},
        "deny": ["memmy-memory", "shell-exec"],
        "entries": {"memory-lancedb": {"enabled": True, "config": {"dbPath": "~/.openclaw/lancedb"}}},
    }
    root = seed(isolated_home, plugins)
    original = snapshot(root)
    assert INSTALLER.memory_conflict(install_context(isolated_home).env) == "memory-lancedb"

    plan = INSTALLER.plan_install(install_context(isolated_home))
    assert any("memory-lancedb" in note and "MEMMY_REPLACE_MEMORY_PLUGIN" in note for note in plan.notes)
    assert {c.path.name for c in plan.effective} == {"AGENTS.md", "SKILL.md"}
    plan.apply()
    assert (root / "openclaw.json").read_bytes() == original["openclaw.json"]
    assert "At the start of a task run" in (root / "skills" / "memmy-memory" / "SKILL.md").read_text()
    INSTALLER.plan_remove(install_context(isolated_home)).apply()
    assert snapshot(root) == original

    confirmed = install_context(isolated_home, MEMMY_REPLACE_MEMORY_PLUGIN="1")
    plan = INSTALLER.plan_install(confirmed)
    assert any("replaces 'memory-lancedb'" in note for note in plan.notes)
    plan.apply()
    merged = json.loads((root / "openclaw.json").read_text())["plugins"]
    assert merged["slots"]["memory"] == "memmy-memory" and merged["enabled"] is True
    assert merged["deny"] == ["shell-exec"]
    assert merged["entries"]["memory-lancedb"] == plugins["entries"]["memory-lancedb"]
    assert INSTALLER.plan_install(confirmed).effective == []
    INSTALLER.plan_remove(confirmed).apply()
    restored = json.loads((root / "openclaw.json").read_text())
    assert restored == json.loads(original["openclaw.json"])
    assert snapshot(root) == original


def test_config_created_by_install_is_removed_again(isolated_home: Path) -> None:
    ctx = install_context(isolated_home)
    INSTALLER.plan_install(ctx).apply()
    root = isolated_home / ".openclaw"
    assert json.loads((root / "openclaw.json").read_text())["plugins"]["slots"]["memory"] == "memmy-memory"
    INSTALLER.plan_remove(ctx).apply()
    assert snapshot(isolated_home) == {}


def run_driver(tmp_path: Path, index: Path, workspace: Path) -> dict[str, Any]:
    """Run the installed plugin in Node through the fake host in ``DRIVER``."""
    return run_node_driver(tmp_path, "drive_openclaw.mjs", DRIVER, str(index), str(workspace), PROMPT)


@needs_node
def test_plugin_recalls_and_captures_against_live_daemon(
    isolated_home: Path, tmp_path: Path, fresh_daemon: Daemon
) -> None:
    start_with_memory(fresh_daemon, "claw-token-1", MEMORY, ["billing"])
    root = seed(isolated_home, json.loads(json.dumps(FOREIGN)))
    INSTALLER.plan_install(install_context(isolated_home, fresh_daemon.url, fresh_daemon.token, timeout_s=5.0)).apply()
    project = isolated_home / "repos" / "billing"
    (project / ".git").mkdir(parents=True)

    result = run_driver(tmp_path, root / "extensions" / "memmy-memory" / "index.mjs", project)

    assert result["handlers"] == ["before_prompt_build", "agent_end"]
    assert result["tools"] == ["memmy_memory_search", "memmy_memory_get", "memmy_memory_add"]
    assert result["commands"] == ["memmy-resume"] and result["capabilities"]
    context_text = result["built"]["prependContext"]
    assert context_text.startswith('<memmy_memory_context source="turn_start">\nThe following is historical memory')
    assert "rotate_billing_keys.py" in context_text
    assert context_text.endswith(f"<current_user_request>\n{PROMPT}\n</current_user_request>")
    assert "rotate_billing_keys.py" in result["search"]["content"][0]["text"]
    assert "rotate_billing_keys.py" in result["resume"]["text"]

    with fresh_daemon.client() as client:
        items = client.get("/api/v1/panel/items", params={"sourceAgent": "openclaw", "layer": "L1"}).json()["items"]
        details = {d["turnId"]: d for d in (client.get(f"/api/v1/memory/{i['id']}").json() for i in items)}
    first, second = details["openclaw-run-1"], details["openclaw-run-2"]
    assert first["sourceAgent"] == "openclaw" and first["sessionId"] == "openclaw-memory-0f3c9a21-live"
    assert first["projectId"] == str(project)
    raw = first["refs"]["rawTurn"]
    assert raw["userText"] == PROMPT
    assert raw["assistantText"].endswith("Run scripts/rotate_billing_keys.py --env prod after notifying #billing-ops.")
    assert raw["toolCalls"][0]["name"] == "exec" and raw["toolCalls"][0]["output"] == "rotate_billing_keys.py"
    assert first["properties"]["trace"]["status"] == "succeeded"
    assert second["properties"]["trace"]["status"] == "cancelled"


@needs_node
def test_plugin_fails_open_within_budget(isolated_home: Path, tmp_path: Path, dead_endpoint: str) -> None:
    root = seed(isolated_home, {})
    INSTALLER.plan_install(install_context(isolated_home, dead_endpoint, timeout_s=0.4)).apply()
    config_file = root / "extensions" / "memmy-memory" / "memmy-memory-config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "captureTimeoutMs": 600, "toolTimeoutMs": 600}))

    result = run_driver(tmp_path, root / "extensions" / "memmy-memory" / "index.mjs", tmp_path)

    assert result.get("built") is None  # JSON.stringify drops undefined: nothing is prepended
    assert result["buildMs"] < 400 + 600
    assert result["endMs"] < 600 + 600
    assert result["search"]["content"][0]["text"].startswith("Memmy memory is unavailable")
