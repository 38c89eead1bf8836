"""The memmy-memory CLI against a real daemon (CliRunner in-process, HTTP to the daemon)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from memmy.cli.main import cli
from tests.conftest import SUITE_BACKEND, Daemon, free_port


def run(daemon: Daemon | None, *args: str, input_text: str | None = None) -> Result:
    base = ["--url", daemon.url] if daemon else []
    if daemon and daemon.token:
        base += ["--token", daemon.token]
    return CliRunner().invoke(cli, [*base, *args], input=input_text, catch_exceptions=False)


def test_help_lists_every_command() -> None:
    result = run(None, "--help")
    assert result.exit_code == 0
    for command in (
        "serve",
        "init",
        "health",
        "status",
        "search",
        "add",
        "get",
        "delete",
        "session",
        "turn",
        "raw",
        "reload-config",
    ):
        assert command in result.output


def test_add_search_get_delete(daemon: Daemon) -> None:
    added = run(
        daemon,
        "--source",
        "cursor",
        "add",
        "Run the linter with ruff check --fix before committing",
        "--tags",
        "lint,ruff",
        "--title",
        "lint before commit",
    )
    assert added.exit_code == 0, added.output
    assert added.output.startswith("Added trace_")
    memory_id = added.output.split()[1]

    again = run(daemon, "add", "run the linter with ruff check --fix before committing")
    assert again.output.startswith(f"Already stored as {memory_id}")

    found = run(daemon, "search", "how should I lint?")
    assert found.exit_code == 0 and memory_id in found.output and "[L1] lint before commit" in found.output

    as_json = run(daemon, "--json", "search", "ruff linter", "--verbose")
    payload = json.loads(as_json.output)
    assert payload["sourceMemoryIds"][0] == memory_id and "candidateMemoryIds" in payload["debug"]

    verbose = run(daemon, "search", "ruff linter", "--verbose")
    assert "candidateMemoryIds" in verbose.output and "relevance=" in verbose.output

    shown = run(daemon, "get", memory_id)
    assert shown.exit_code == 0
    assert f"id: {memory_id}" in shown.output and "source: cursor" in shown.output
    assert "Run the linter with ruff check --fix" in shown.output

    deleted = run(daemon, "delete", memory_id, "--reason", "done")
    assert deleted.exit_code == 0 and deleted.output.startswith(f"Deleted {memory_id}")
    gone = run(daemon, "get", memory_id)
    assert gone.exit_code == 1 and f"memory {memory_id} not found" in gone.output


def test_chinese_through_the_cli(daemon: Daemon) -> None:
    added = run(daemon, "add", "-", input_text="发布前必须先在预发环境跑一遍冒烟测试\n")
    memory_id = added.output.split()[1]
    found = run(daemon, "--json", "search", "冒烟测试")
    assert json.loads(found.output)["sourceMemoryIds"][0] == memory_id


def test_session_turn_raw_status_health(daemon: Daemon) -> None:
    session_id = run(daemon, "--source", "codex", "session", "open").output.strip()
    assert session_id.startswith("session_")
    started = run(daemon, "--json", "turn", "start", "--session-id", session_id, "--turn-id", "t1", "why is CI red?")
    assert json.loads(started.output)["turnId"] == "t1"
    done = run(
        daemon,
        "turn",
        "complete",
        "t1",
        "--session-id",
        session_id,
        "--query",
        "why is CI red?",
        "--answer",
        "A flaky network test; I added a retry.",
        "--status",
        "ok",
    )
    assert done.exit_code == 0 and done.output.startswith("Captured trace_")
    closed = run(daemon, "session", "close", session_id)
    assert closed.output.strip() == f"Closed {session_id}"

    raw = run(daemon, "raw", "POST", "/memory/search", "--body", '{"query": "flaky network test"}')
    assert json.loads(raw.output)["hits"][0]["snippet"].startswith("Summary: why is CI red?")

    assert "L1 traces:" in run(daemon, "status").output
    health = run(daemon, "health")
    assert health.exit_code == 0 and "memmy memory service" in health.output and ": ok" in health.output


def test_errors_and_exit_codes(daemon: Daemon, tmp_path: Path) -> None:
    usage = run(daemon, "search")
    assert usage.exit_code == 2 and "give a query" in usage.output
    bad_layer = run(daemon, "add", "x", "--layer", "L7")
    assert bad_layer.exit_code == 2
    unauthorized = CliRunner().invoke(cli, ["--url", daemon.url, "health"])
    assert unauthorized.exit_code == 0  # health is anonymous
    no_token = CliRunner().invoke(cli, ["--url", daemon.url, "status"])
    assert no_token.exit_code == 1 and "invalid memory service token" in no_token.output
    bad_body = run(daemon, "raw", "POST", "/memory/search", "--body", "{nope")
    assert bad_body.exit_code == 2 and "--body is not valid JSON" in bad_body.output


def test_daemon_down_is_one_clear_line(isolated_home: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["health"], ["search", "x"], ["add", "x"], ["get", "trace_x"], ["status"]):
        result = CliRunner().invoke(cli, ["--url", url, *args])
        assert result.exit_code == 1
        lines = result.output.strip().splitlines()
        assert lines == [f"Error: memmy memory service is not running at {url} (start it with `memmy-memory serve`)"]


def test_url_and_token_resolution_from_env_and_config(
    daemon: Daemon, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = isolated_home / ".memmy" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({"memmyMemory": {"storage": {"endpoint": daemon.url, "token": daemon.token}}}))
    assert CliRunner().invoke(cli, ["status"]).exit_code == 0
    config.write_text(yaml.safe_dump({"memmyMemory": {"storage": {"endpoint": "http://127.0.0.1:9"}}}))
    monkeypatch.setenv("MEMMY_MEMORY_URL", daemon.url)
    monkeypatch.setenv("MEMMY_MEMORY_TOKEN", str(daemon.token))
    assert CliRunner().invoke(cli, ["status"]).exit_code == 0
    broken = config.parent / "broken.yaml"
    broken.write_text("memmyMemory:\n  server:\n    port: nope\n")
    result = CliRunner().invoke(cli, ["--config", str(broken), "status"])
    assert result.exit_code == 1 and "memmyMemory.server.port: expected an integer" in result.output


def test_init_writes_config_and_database(isolated_home: Path) -> None:
    result = CliRunner().invoke(cli, ["init", "--token", "abc"], catch_exceptions=False)
    assert result.exit_code == 0 and "Configuration saved successfully" in result.output
    config = yaml.safe_load((isolated_home / ".memmy" / "config.yaml").read_text())
    assert config["memmyMemory"]["storage"]["token"] == "abc"
    # on PostgreSQL the store is the database of MEMMY_POSTGRES_DSN, and no file is made
    assert (isolated_home / ".memmy" / "memory-service" / "memory.sqlite").exists() == (SUITE_BACKEND == "sqlite")
    again = CliRunner().invoke(cli, ["init"], catch_exceptions=False)  # idempotent, keeps the token
    assert again.exit_code == 0
    assert (
        yaml.safe_load((isolated_home / ".memmy" / "config.yaml").read_text())["memmyMemory"]["storage"]["token"]
        == "abc"
    )


def test_init_says_whether_the_service_is_already_running(
    isolated_home: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    stopped = CliRunner().invoke(cli, ["init", "--no-agents", "--endpoint", down], catch_exceptions=False)
    assert stopped.exit_code == 0 and "Start the service with: memmy-memory serve" in stopped.output
    # The daemon serves another store (its own home): init must not call it "running".
    other = CliRunner().invoke(cli, ["init", "--no-agents", "--endpoint", daemon.url], catch_exceptions=False)
    assert other.exit_code == 0 and "Another memmy daemon" in other.output
    assert "The service is running" not in other.output
    monkeypatch.setenv("HOME", str(daemon.home))
    monkeypatch.setenv("MEMMY_HOME", str(daemon.home / ".memmy"))
    monkeypatch.setenv("MEMMY_MEMORY_TOKEN", str(daemon.token))
    running = CliRunner().invoke(cli, ["init", "--no-agents", "--endpoint", daemon.url], catch_exceptions=False)
    assert running.exit_code == 0 and f"The service is running at {daemon.url}" in running.output
    assert "Start the service with" not in running.output


def test_console_script_runs(isolated_home: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "memmy", "--version"], capture_output=True, text=True, env={**os.environ}, timeout=60
    )
    assert result.returncode == 0 and "memmy-memory" in result.stdout
