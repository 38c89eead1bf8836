"""Hermes integration: config.yaml merge and provider conflicts, and the installed MemoryProvider run by Python."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from memmy.integrations.agents.hermes import INSTALLER
from tests.agent_homes import install_context, run_json_driver, snapshot, start_with_memory
from tests.conftest import Daemon

SESSION = "20260801_101500_ab12cd"
PROMPT = "Where is the incident runbook for the payments queue?"
MEMORY = "The payments queue incident runbook is docs/runbooks/payments-queue.md; page the on-call via PagerDuty first."
ANSWER = "The runbook is docs/runbooks/payments-queue.md; page the on-call first."
CONFIG = """# Hermes Agent configuration
model:
  default: anthropic/claude-sonnet-4.5
  provider: openrouter   # routed through OpenRouter

toolsets:
  - hermes-cli

memory:
  memory_enabled: true
  user_profile_enabled: true
{provider}  nudge_interval: 10

display:
  skin: default
"""

# Hermes' MemoryProvider ABC as the host defines it (agent/memory_provider.py, abstract members only): the plugin
# subclasses it when it can be imported, exactly as inside Hermes.
HOST_ABC = """
from abc import ABC, abstractmethod
class MemoryProvider(ABC):
    @property
    @abstractmethod
    def name(self): ...
    @abstractmethod
    def is_available(self): ...
    @abstractmethod
    def initialize(self, session_id, **kwargs): ...
    @abstractmethod
    def get_tool_schemas(self): ...
    def prefetch(self, query, *, session_id=""): return ""
    def sync_turn(self, user_content, assistant_content, *, session_id="", messages=None): ...
"""

# Loads the installed plugin the way Hermes' loader does (spec_from_file_location + register(ctx)) and drives a turn.
DRIVER = r"""
import importlib.util, json, sys, time
plugin_dir, prompt, answer, session = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("_hermes_user_memory.memmy-memory", plugin_dir + "/__init__.py",
                                              submodule_search_locations=[plugin_dir])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
class Collector:
    provider = None
    def register_memory_provider(self, provider):
        self.provider = provider
collector = Collector()
module.register(collector)
p = collector.provider
p.initialize(session, hermes_home=plugin_dir, platform="cli", agent_context="primary")
t0 = time.monotonic()
context = p.prefetch(prompt, session_id=session)
prefetch_ms = (time.monotonic() - t0) * 1000
repeated = p.prefetch(prompt, session_id=session)  # Hermes may prefetch again before the next API call
messages = [
    {"role": "user", "content": prompt},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "terminal", "arguments": "{\"command\": \"ls docs/runbooks\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "tool_name": "terminal", "content": "payments-queue.md"},
    {"role": "assistant", "content": answer},
]
t0 = time.monotonic()
p.sync_turn(prompt, answer, session_id=session, messages=messages)
sync_ms = (time.monotonic() - t0) * 1000
p.on_memory_write("add", "user", "The user prefers answers that start with the command to run.")
search = json.loads(p.handle_tool_call("memmy_memory_search", {"query": "payments queue runbook"}))
t0 = time.monotonic()
p.shutdown()
shutdown_ms = (time.monotonic() - t0) * 1000
print(json.dumps({"name": p.name, "available": p.is_available(), "bases": [b.__name__ for b in type(p).__mro__],
                  "tools": [t["name"] for t in p.get_tool_schemas()], "context": context, "repeated": repeated,
                  "prefetchMs": prefetch_ms,
                  "syncMs": sync_ms, "shutdownMs": shutdown_ms, "search": search}))
"""


def seed(home: Path, config: str | None) -> Path:
    """A realistic Hermes home: config.yaml, SOUL.md, another (non-memory) plugin, a skill."""
    root = home / ".hermes"
    (root / "plugins" / "weather").mkdir(parents=True)
    (root / "plugins" / "weather" / "plugin.yaml").write_text("name: weather\nversion: 1.0.0\n")
    (root / "skills" / "git-helper").mkdir(parents=True)
    (root / "skills" / "git-helper" / "SKILL.md").write_text("---\nname: git-helper\n---\nUse git wisely.\n")
    (root / "SOUL.md").write_text("You are Hermes, a careful assistant.\n")
    if config is not None:
        (root / "config.yaml").write_text(config)
    return root


@pytest.mark.parametrize(
    "config",
    [
        CONFIG.format(provider=""),
        CONFIG.format(provider="  provider: ''   # empty: built-in memory only\n"),
        "# only model settings\nmodel:\n  default: openai/gpt-5\n",
        None,
    ],
    ids=["memory-without-provider", "empty-provider", "no-memory-key", "no-config"],
)
def test_install_keeps_comments_is_idempotent_and_removal_restores_bytes(
    isolated_home: Path, config: str | None
) -> None:
    root = seed(isolated_home, config)
    original = snapshot(root)
    ctx = install_context(isolated_home, token="hermes-secret")
    plan = INSTALLER.plan_install(ctx)
    assert not any("plain YAML" in note for note in plan.notes)
    plan.apply()
    text = (root / "config.yaml").read_text()
    data = yaml.safe_load(text)
    assert data["memory"]["provider"] == "memmy-memory"
    if config is not None:
        before = yaml.safe_load(config)
        assert {k: v for k, v in data.items() if k != "memory"} == {k: v for k, v in before.items() if k != "memory"}
        assert {k: v for k, v in data["memory"].items() if k != "provider"} == {
            k: v for k, v in (before.get("memory") or {}).items() if k != "provider"
        }
        assert "# only model settings" in text or "# routed through OpenRouter" in text
    plugin = root / "plugins" / "memmy-memory"
    assert "MemoryProvider" in (plugin / "__init__.py").read_text()
    assert yaml.safe_load((plugin / "plugin.yaml").read_text())["name"] == "memmy-memory"
    assert (plugin / "memmy-memory-config.json").stat().st_mode & 0o777 == 0o600
    assert "<!-- memmy:start v=1 -->" in (root / "SOUL.md").read_text()
    assert INSTALLER.plan_install(ctx).effective == []
    INSTALLER.plan_remove(ctx).apply()
    assert snapshot(root) == original


def test_other_provider_is_kept_unless_confirmed(isolated_home: Path) -> None:
    root = seed(isolated_home, CONFIG.format(provider="  provider: honcho  # cloud memory\n"))
    original = snapshot(root)
    assert INSTALLER.memory_conflict(install_context(isolated_home).env) == "honcho"
    plan = INSTALLER.plan_install(install_context(isolated_home))
    assert any("honcho" in note and "MEMMY_REPLACE_MEMORY_PLUGIN" in note for note in plan.notes)
    assert {c.path.name for c in plan.effective} == {"SOUL.md", "SKILL.md"}
    plan.apply()
    assert (root / "config.yaml").read_bytes() == original["config.yaml"]
    INSTALLER.plan_remove(install_context(isolated_home)).apply()
    assert snapshot(root) == original

    confirmed = install_context(isolated_home, MEMMY_REPLACE_MEMORY_PLUGIN="1")
    INSTALLER.plan_install(confirmed).apply()
    assert yaml.safe_load((root / "config.yaml").read_text())["memory"]["provider"] == "memmy-memory"
    assert INSTALLER.plan_install(confirmed).effective == []
    INSTALLER.plan_remove(confirmed).apply()
    assert snapshot(root) == original


def test_flow_style_memory_falls_back_to_plain_yaml(isolated_home: Path) -> None:
    config = "model: {default: openai/gpt-5}\nmemory: {memory_enabled: true}\n"
    root = seed(isolated_home, config)
    plan = INSTALLER.plan_install(install_context(isolated_home))
    assert any("plain YAML" in note for note in plan.notes)
    plan.apply()
    assert yaml.safe_load((root / "config.yaml").read_text())["memory"] == {
        "memory_enabled": True,
        "provider": "memmy-memory",
    }
    INSTALLER.plan_remove(install_context(isolated_home)).apply()
    assert yaml.safe_load((root / "config.yaml").read_text()) == yaml.safe_load(config)


def run_driver(tmp_path: Path, plugin_dir: Path, cwd: Path) -> dict[str, Any]:
    host = tmp_path / "hermes-host"
    (host / "agent").mkdir(parents=True)
    (host / "agent" / "__init__.py").write_text("")
    (host / "agent" / "memory_provider.py").write_text(HOST_ABC)
    script = tmp_path / "drive_hermes.py"
    script.write_text(DRIVER)
    # -S: no site-packages, so the plugin can only use the standard library (and the host's own modules).
    return run_json_driver(
        [sys.executable, "-S", str(script), str(plugin_dir), PROMPT, ANSWER, SESSION],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(host)},
        cwd=cwd,
    )


def test_provider_recalls_and_captures_against_live_daemon(
    isolated_home: Path, tmp_path: Path, fresh_daemon: Daemon
) -> None:
    start_with_memory(fresh_daemon, "hermes-token-1", MEMORY, ["payments"])
    root = seed(isolated_home, CONFIG.format(provider=""))
    INSTALLER.plan_install(install_context(isolated_home, fresh_daemon.url, fresh_daemon.token, timeout_s=5.0)).apply()
    project = isolated_home / "src" / "payments"
    (project / ".git").mkdir(parents=True)

    result = run_driver(tmp_path, root / "plugins" / "memmy-memory", project)

    assert result["name"] == "memmy-memory" and result["available"] is True
    assert "MemoryProvider" in result["bases"]
    assert result["tools"] == ["memmy_memory_search", "memmy_memory_get", "memmy_memory_add"]
    assert result["context"].startswith('<memmy_memory_context source="turn_start">\nThe following is historical')
    assert "docs/runbooks/payments-queue.md" in result["context"]
    assert result["context"].endswith(f"<current_user_request>\n{PROMPT}\n</current_user_request>")
    assert result["repeated"] == result["context"]  # the same turn, replayed by the daemon
    assert result["syncMs"] < 200  # sync_turn only starts a thread
    assert "payments-queue.md" in result["search"]["result"]

    with fresh_daemon.client() as client:
        items = client.get("/api/v1/panel/items", params={"sourceAgent": "hermes"}).json()["items"]
        details = [client.get(f"/api/v1/memory/{i['id']}").json() for i in items]
    turn = next(d for d in details if d.get("turnId"))
    assert turn["sessionId"] == f"hermes-memory-{SESSION}" and turn["projectId"] == str(project)
    raw = turn["refs"]["rawTurn"]
    assert raw["userText"] == PROMPT and raw["assistantText"] == ANSWER
    assert raw["toolCalls"][0]["name"] == "terminal" and raw["toolCalls"][0]["input"] == {"command": "ls docs/runbooks"}
    assert raw["toolCalls"][0]["output"] == "payments-queue.md"
    assert turn["properties"]["trace"]["status"] == "succeeded"
    mirrored = next(d for d in details if "start with the command" in d["content"])
    assert "hermes" in mirrored["tags"]


def test_provider_fails_open_within_budget(isolated_home: Path, tmp_path: Path, dead_endpoint: str) -> None:
    root = seed(isolated_home, None)
    INSTALLER.plan_install(install_context(isolated_home, dead_endpoint, timeout_s=0.4)).apply()
    config_file = root / "plugins" / "memmy-memory" / "memmy-memory-config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "captureTimeoutMs": 600, "toolTimeoutMs": 600}))

    result = run_driver(tmp_path, root / "plugins" / "memmy-memory", tmp_path)

    assert result["context"] == ""
    assert result["prefetchMs"] < 400 + 600
    assert result["syncMs"] < 200
    assert result["shutdownMs"] < 600 + 600
    assert "unavailable" in result["search"]["error"]
