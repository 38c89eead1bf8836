"""Config writes by ``memmy onboard`` and ``memmy serve`` (``serve.token``) keep the user's file: comments, key
order, quoting and every other section survive; the file stays 0600."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from memmy.agent.config import load_agent_config, write_agent_sections
from memmy.errors import ConfigError

MEMMY = str(Path(sys.executable).parent / "memmy")

USER_FILE = """\
# My memmy setup -- hand written, please keep this comment
memmyMemory:
  storage:
    endpoint: http://127.0.0.1:18960   # the daemon
    token: 'quoted-token'

# Models
agents:
  defaults:
    provider: deepseek  # cheap and good
    model: deepseek-chat
providers:
  deepseek:
    apiKey: ${DEEPSEEK_API_KEY}   # from the environment, never inline
tools:
  exec:
    approval: ask
    # timeout: 120   <- commented-out setting the user keeps for later
"""


def config_file(home: Path) -> Path:
    path = home / ".memmy" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(USER_FILE, encoding="utf-8")
    return path


def test_serve_token_write_keeps_comments_order_and_quotes(isolated_home: Path) -> None:
    path = config_file(isolated_home)
    write_agent_sections(path, {"serve": {"token": "tok-123"}})
    text = path.read_text(encoding="utf-8")
    assert text.startswith(USER_FILE)  # every byte of the user's file is still there, in order
    assert text[len(USER_FILE) :] == "serve:\n  token: tok-123\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = load_agent_config()
    assert config.serve_token == "tok-123" and config.default is not None and config.default.provider == "deepseek"


def test_updating_a_nested_key_changes_only_that_line(isolated_home: Path) -> None:
    path = config_file(isolated_home)
    write_agent_sections(path, {"tools": {"exec": {"approval": "allow"}}, "agents": {"defaults": {"maxRetries": 1}}})
    expected = USER_FILE.replace("    approval: ask\n", "    approval: allow\n").replace(
        "    model: deepseek-chat\n", "    model: deepseek-chat\n    maxRetries: 1\n"
    )
    assert path.read_text(encoding="utf-8") == expected


def test_onboard_defaults_keeps_the_users_comments(isolated_home: Path) -> None:
    path = config_file(isolated_home)
    done = subprocess.run([MEMMY, "onboard", "--defaults"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = path.read_text(encoding="utf-8")
    for line in USER_FILE.splitlines():
        assert line in text, line
    assert text.index("# Models") < text.index("agents:") < text.index("providers:") < text.index("serve:")
    config = load_agent_config()
    assert config.serve_token and config.default is not None and config.default.model == "deepseek-chat"


def test_a_broken_file_is_refused_not_overwritten(isolated_home: Path) -> None:
    path = isolated_home / ".memmy" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("agents: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        write_agent_sections(path, {"serve": {"token": "x"}})
    assert path.read_text(encoding="utf-8") == "agents: [unclosed\n"


def test_a_new_file_is_created(isolated_home: Path) -> None:
    path = isolated_home / ".memmy" / "config.yaml"
    write_agent_sections(path, {"serve": {"token": "fresh"}, "agents": {"defaults": {"model": "m"}}})
    assert path.read_text(encoding="utf-8") == "serve:\n  token: fresh\nagents:\n  defaults:\n    model: m\n"


def test_settings_written_at_once_are_all_kept(tmp_path: Path) -> None:
    """Two settings saved at the same moment (the workbench writes each from a thread) both land: each write reads,
    merges and writes the file in turn, so none overwrites the file with a copy read before another's write."""
    path = tmp_path / "config.yaml"
    path.write_text("# mine\nworkbench:\n  language: en\n", encoding="utf-8")
    start = threading.Barrier(8)

    def save(n: int) -> None:
        start.wait()
        for k in range(5):
            write_agent_sections(path, {"workbench": {f"key{n}_{k}": n * 10 + k}})

    threads = [threading.Thread(target=save, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = yaml.safe_load(path.read_text(encoding="utf-8"))["workbench"]
    assert {key: kept[key] for key in kept if key != "language"} == {
        f"key{n}_{k}": n * 10 + k for n in range(8) for k in range(5)
    }
    assert kept["language"] == "en" and path.read_text(encoding="utf-8").startswith("# mine")
