"""OpenCode integration: installer merge, idempotency and removal; the installed plugin run by Node on a live daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memmy.integrations.agents.opencode import INSTALLER
from tests.agent_homes import install_context, needs_node, run_node_driver, snapshot, start_with_memory
from tests.conftest import Daemon

PROMPT = "How do I deploy the falcon service to production?"
MEMORY = "The falcon service deploys with `make ship-falcon` from the ops/ directory; the VPN must be up first."

# A stand-in for OpenCode's plugin SDK (`@opencode-ai/plugin`), which OpenCode installs into its config directory:
# `tool(def)` returns the definition and `tool.schema` is a zod-like builder. Only the host's SDK is faked.
FAKE_SDK = """
const chain = (kind, extra = {}) => ({ kind, ...extra, optional() { return { ...this, optional: true }; },
  describe(d) { return { ...this, description: d }; } });
export const schema = { string: () => chain("string"), array: (of) => chain("array", { of }),
  enum: (values) => chain("enum", { values }) };
export function tool(definition) { return definition; }
tool.schema = schema;
"""

DRIVER = r"""
import { pathToFileURL } from "node:url";
const [pluginPath, directory, prompt] = process.argv.slice(2);
const mod = await import(pathToFileURL(pluginPath).href);
const hooks = await mod.MemmyMemory({ client: {}, project: {}, directory, worktree: directory, $: null });
const sessionID = "ses_live1";
const userPart = (id, messageID, text) => ({ id, sessionID, messageID, type: "text", text });
const output = { message: { id: "msg_user1", sessionID, role: "user" },
  parts: [{ id: "prt_syn", sessionID, messageID: "msg_user1", type: "text", text: "file list", synthetic: true },
          userPart("prt_u1", "msg_user1", prompt)] };
let t0 = Date.now();
await hooks["chat.message"]({ sessionID, agent: "build", messageID: "msg_user1",
  model: { providerID: "anthropic", modelID: "claude-sonnet-4-5" } }, output);
const chatMs = Date.now() - t0;
await hooks["tool.execute.before"]({ tool: "bash", sessionID, callID: "call_1" },
  { args: { command: "make ship-falcon" } });
await hooks["tool.execute.after"]({ tool: "bash", sessionID, callID: "call_1" },
  { title: "make ship-falcon", output: "deployed ".repeat(3000), metadata: { exit: 0 } });
await hooks.event({ event: { type: "message.updated",
  properties: { info: { id: "msg_a1", role: "assistant", sessionID } } } });
await hooks.event({ event: { type: "message.part.updated",
  properties: { part: { id: "prt_a1", sessionID, messageID: "msg_a1", type: "text", text: "Deploying" } } } });
await hooks["experimental.text.complete"]({ sessionID, messageID: "msg_a1", partID: "prt_a1" },
  { text: "Deployed falcon with make ship-falcon after checking the VPN." });
await hooks.event({ event: { type: "message.part.updated", properties: { part: output.parts[1] } } });
t0 = Date.now();
await hooks.event({ event: { type: "session.idle", properties: { sessionID } } });
const idleMs = Date.now() - t0;
const second = { message: { id: "msg_user2", sessionID, role: "user" },
  parts: [userPart("prt_u2", "msg_user2", "Now migrate the falcon database schema")] };
await hooks["chat.message"]({ sessionID, agent: "build", messageID: "msg_user2" }, second);
await hooks.event({ event: { type: "session.error",
  properties: { sessionID, error: { name: "UnknownError", data: { message: "provider overloaded" } } } } });
await hooks.event({ event: { type: "session.idle", properties: { sessionID } } });
const tools = hooks.tool ? {
  search: await hooks.tool.memmy_memory_search.execute({ query: "falcon deploy" }, { sessionID }),
  add: await hooks.tool.memmy_memory_add.execute({ content: "Falcon releases happen on Tuesdays.", tags: ["falcon"] },
    { sessionID }),
} : null;
console.log(JSON.stringify({ exports: Object.keys(mod), hooks: Object.keys(hooks), parts: output.parts,
  second: second.parts, chatMs, idleMs, tools }));
"""


def seed(home: Path) -> Path:
    """A realistic existing OpenCode config directory."""
    root = home / ".config" / "opencode"
    (root / "plugins").mkdir(parents=True)
    (root / "commands").mkdir()
    (root / "opencode.json").write_text(
        json.dumps(
            {
                "$schema": "https://opencode.ai/config.json",
                "theme": "tokyonight",
                "model": "anthropic/claude-sonnet-4-5",
                "plugin": ["opencode-wakatime"],
                "mcp": {"github": {"type": "local", "command": ["gh-mcp"]}},
            },
            indent=2,
        )
        + "\n"
    )
    (root / "AGENTS.md").write_text("# My rules\n\n- Prefer small commits.\n- Run the tests before pushing.\n")
    (root / "plugins" / "notify.js").write_text("export const Notify = async () => ({});\n")
    (root / "commands" / "review.md").write_text("---\ndescription: Review the diff\n---\nReview $ARGUMENTS\n")
    return root


def install_fake_sdk(root: Path) -> None:
    package = root / "node_modules" / "@opencode-ai" / "plugin"
    package.mkdir(parents=True)
    (package / "package.json").write_text(
        json.dumps({"name": "@opencode-ai/plugin", "type": "module", "main": "index.js"})
    )
    (package / "index.js").write_text(FAKE_SDK)


def run_driver(tmp_path: Path, plugin: Path, directory: Path, prompt: str = PROMPT) -> dict[str, Any]:
    """Run the installed plugin in Node through the fake host in ``DRIVER``."""
    return run_node_driver(tmp_path, "drive_opencode.mjs", DRIVER, str(plugin), str(directory), prompt)


def test_install_merges_is_idempotent_and_removal_restores(isolated_home: Path) -> None:
    root = seed(isolated_home)
    original = snapshot(root)
    ctx = install_context(isolated_home, token="s3cret")
    plan = INSTALLER.plan_install(ctx)
    assert INSTALLER.root(ctx.env) == root
    plan.apply()
    plugin = root / "plugins" / "memmy-memory.js"
    assert "export const MemmyMemory" in plugin.read_text()
    config_file = root / "plugins" / "memmy-memory-config.json"
    assert config_file.stat().st_mode & 0o777 == 0o600
    assert json.loads(config_file.read_text())["token"] == "s3cret"
    agents = (root / "AGENTS.md").read_text()
    assert agents.startswith("# My rules\n\n- Prefer small commits.") and "<!-- memmy:start v=1 -->" in agents
    assert "memmy-memory --source opencode" in (root / "skills" / "memmy-memory" / "SKILL.md").read_text()
    assert "$ARGUMENTS" in (root / "commands" / "memmy-resume.md").read_text()
    after = snapshot(root)
    for name in ("opencode.json", "plugins/notify.js", "commands/review.md"):
        assert after[name] == original[name]
    assert INSTALLER.plan_install(ctx).effective == []
    INSTALLER.plan_remove(ctx).apply()
    assert snapshot(root) == original
    assert INSTALLER.plan_remove(ctx).effective == []


def test_root_honours_env_overrides(tmp_path: Path) -> None:
    assert INSTALLER.root({"HOME": "/h", "OPENCODE_CONFIG_DIR": str(tmp_path)}) == tmp_path
    assert INSTALLER.root({"HOME": "/h", "XDG_CONFIG_HOME": "/x"}) == Path("/x/opencode")
    assert INSTALLER.root({"HOME": "/h"}) == Path("/h/.config/opencode")
    assert INSTALLER.detected({"HOME": str(tmp_path), "PATH": ""}) is False


@needs_node
def test_plugin_recalls_and_captures_against_live_daemon(
    isolated_home: Path, tmp_path: Path, fresh_daemon: Daemon
) -> None:
    start_with_memory(fresh_daemon, "opencode-token-1", MEMORY, ["deploy"])
    root = seed(isolated_home)
    install_fake_sdk(root)
    # A generous budget: this test is about what is injected and captured (the budget has its own test).
    INSTALLER.plan_install(install_context(isolated_home, fresh_daemon.url, fresh_daemon.token, timeout_s=5.0)).apply()
    project = isolated_home / "work" / "falcon"
    (project / ".git").mkdir(parents=True)
    (project / "services").mkdir()

    result = run_driver(tmp_path, root / "plugins" / "memmy-memory.js", project / "services")

    assert result["exports"] == ["MemmyMemory"]
    assert {"chat.message", "tool.execute.before", "tool.execute.after", "event", "tool"} <= set(result["hooks"])
    synthetic, user = result["parts"]
    assert synthetic["text"] == "file list"
    assert user["text"].startswith('<memmy_memory_context source="turn_start">\nThe following is historical memory')
    assert "make ship-falcon" in user["text"]
    assert user["text"].endswith(
        f"</memmy_memory_context>\n\n<current_user_request>\n{PROMPT}\n</current_user_request>"
    )
    assert result["chatMs"] < 5000
    assert "make ship-falcon" in result["tools"]["search"]
    assert result["tools"]["add"].startswith("Stored Memmy memory ")

    with fresh_daemon.client() as client:
        items = client.get("/api/v1/panel/items", params={"sourceAgent": "opencode", "layer": "L1"}).json()["items"]
        details = {
            d["turnId"]: d for d in (client.get(f"/api/v1/memory/{i['id']}").json() for i in items) if d.get("turnId")
        }
    first, second = details["opencode-msg_user1"], details["opencode-msg_user2"]
    assert first["sourceAgent"] == "opencode" and first["sessionId"] == "opencode-memory-ses_live1"
    assert first["projectId"] == str(project)
    raw = first["refs"]["rawTurn"]
    assert raw["userText"] == PROMPT
    assert raw["assistantText"] == "Deployed falcon with make ship-falcon after checking the VPN."
    assert first["properties"]["trace"]["status"] == "succeeded"
    call = raw["toolCalls"][0]
    assert call["name"] == "bash" and call["input"] == {"command": "make ship-falcon"}
    assert len(call["output"]) <= 12_000 + len("\n...[truncated]")
    assert second["properties"]["trace"]["status"] == "failed"
    assert "provider overloaded" in second["refs"]["rawTurn"]["assistantText"]


@needs_node
def test_plugin_fails_open_within_budget(isolated_home: Path, tmp_path: Path, dead_endpoint: str) -> None:
    root = seed(isolated_home)
    install_fake_sdk(root)
    INSTALLER.plan_install(install_context(isolated_home, dead_endpoint, timeout_s=0.4)).apply()
    config_file = root / "plugins" / "memmy-memory-config.json"
    config = json.loads(config_file.read_text())
    assert config["timeoutMs"] == 400
    config_file.write_text(json.dumps({**config, "captureTimeoutMs": 600, "toolTimeoutMs": 600}))

    result = run_driver(tmp_path, root / "plugins" / "memmy-memory.js", tmp_path)

    assert result["parts"][1]["text"] == PROMPT  # nothing injected, prompt untouched
    assert result["chatMs"] < 400 + 600
    assert result["idleMs"] < 600 + 600
    assert result["tools"]["search"].startswith("Memmy memory is unavailable")
