"""CLI habits (issue 17) against a real daemon: ``--json`` anywhere, episodes through ``get``, ``tombstones``
alone, search across projects with this one first, clean snippets, untruncated paths, completion, service
files per platform, and the ``/docs`` page."""

from __future__ import annotations

import json
import plistlib
import subprocess
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result
from rich.table import Table

from memmy.cli.main import cli
from memmy.cli.output import clean_snippet, make_console
from tests.conftest import Daemon


def run(daemon: Daemon | None, *args: str) -> Result:
    base = ["--url", daemon.url, "--token", daemon.token or ""] if daemon else []
    return CliRunner().invoke(cli, [*base, *args], catch_exceptions=False)


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def test_json_flag_before_or_after_any_subcommand(daemon: Daemon) -> None:
    for args in (("--json", "health"), ("health", "--json"), ("health", "-j")):
        result = run(daemon, *args)
        assert result.exit_code == 0 and json.loads(result.output)["ok"] is True, args
    assert json.loads(run(daemon, "status", "--json").output)["overview"]["counts"]
    assert "hits" in json.loads(run(daemon, "search", "anything at all", "--json").output)
    literal = run(daemon, "add", "--tags", "x", "--", "--json")  # after `--` it is content, not the flag
    assert literal.exit_code == 0 and literal.output.startswith("Added ")


def test_episode_ids_from_episodes_open_with_get(daemon: Daemon) -> None:
    session_id = run(daemon, "--source", "codex", "session", "open").output.strip()
    run(daemon, "turn", "start", "--session-id", session_id, "--turn-id", "e1", "how do I rotate the logs?")
    done = run(
        daemon, "turn", "complete", "e1", "--session-id", session_id, "--query", "how do I rotate the logs?",
        "--answer", "Use logrotate with the weekly rule.", "--status", "ok",
    )
    assert done.exit_code == 0, done.output
    run(daemon, "session", "close", session_id)
    episodes = json.loads(run(daemon, "--json", "episodes").output)
    items = episodes.get("episodes") or episodes.get("items") or []
    episode_id = next(e["id"] for e in items if e.get("sessionId") == session_id)
    shown = run(daemon, "get", episode_id)
    assert shown.exit_code == 0, shown.output
    assert f"id: {episode_id}" in shown.output and "kind: episode" in shown.output
    assert "how do I rotate the logs?" in shown.output


def test_tombstones_alone_lists(daemon: Daemon) -> None:
    alone, listed = run(daemon, "tombstones"), run(daemon, "tombstones", "list")
    assert alone.exit_code == 0 and alone.output == listed.output and "Usage" not in alone.output


def test_search_covers_every_project_with_this_one_first(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop, blog = git_repo(tmp_path / "shop"), git_repo(tmp_path / "blog")
    monkeypatch.chdir(shop)
    far = run(daemon, "add", "Checkout deploys need the payments sandbox key rotated first")
    assert far.exit_code == 0, far.output
    monkeypatch.chdir(blog)
    near = run(daemon, "add", "Blog deploys need the image cache purged first")
    assert near.exit_code == 0, near.output
    daemon.drain()
    found = run(daemon, "search", "deploys need first")
    assert found.exit_code == 0, found.output
    lines = found.output.splitlines()
    assert lines[0].startswith("1. ") and near.output.split()[1] in lines[0]  # this project first
    assert any(far.output.split()[1] in line for line in lines)  # the other project too, marked as such
    assert any(line.startswith("-- from other projects (1;") for line in lines)
    assert lines[-1] == "1 in this project, 1 in other projects."
    only_here = run(daemon, "search", "deploys need first", "--scope", "project")
    assert far.output.split()[1] not in only_here.output


def test_snippets_drop_the_capture_envelope() -> None:
    raw = "Summary: why is CI red? RawTurn: raw_0123abcd TraceStep: 0 User: why is CI red? Assistant: a flaky test"
    assert clean_snippet(raw) == "why is CI red? why is CI red? a flaky test"


def test_piped_tables_keep_long_paths(capsys: pytest.CaptureFixture[str]) -> None:
    long_path = "/home/someone/" + "a-very-long-directory-name/" * 8 + "trace_0123456789abcdef0123"
    table = Table()
    table.add_column("source")
    table.add_column("paths")
    table.add_row("claude_code", long_path)
    make_console().print(table)  # stdout is captured, i.e. not a terminal
    assert long_path in capsys.readouterr().out


def test_completion_scripts() -> None:
    for shell, marker in (("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete --no-files")):
        result = run(None, "completion", shell)
        assert result.exit_code == 0 and marker in result.output and "_MEMMY_MEMORY_COMPLETE" in result.output


def test_service_files_per_platform(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(isolated_home / "empty-path"))  # no launchctl/systemctl: files only
    mac = run(None, "service", "install", "--no-start", "--platform", "darwin")
    plist_path = isolated_home / "Library" / "LaunchAgents" / "dev.memmy.memory.plist"
    assert mac.exit_code == 0 and plist_path.exists(), mac.output
    plist = plistlib.loads(plist_path.read_bytes())
    launcher = str(isolated_home / ".memmy" / "bin" / "memmy-memory")
    assert plist["Label"] == "dev.memmy.memory" and plist["ProgramArguments"] == [launcher, "serve"]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] is True
    assert plist["EnvironmentVariables"]["MEMMY_HOME"] == str(isolated_home / ".memmy")
    assert Path(launcher).exists()
    assert run(None, "service", "uninstall", "--platform", "darwin").exit_code == 0 and not plist_path.exists()
    linux = run(None, "service", "install", "--no-start", "--platform", "linux")
    unit = (isolated_home / ".config" / "systemd" / "user" / "memmy.service").read_text()
    assert linux.exit_code == 0 and f"ExecStart={launcher} serve" in unit


def test_docs_page_is_served_from_packaged_assets(daemon: Daemon) -> None:
    response = httpx.get(f"{daemon.url}/docs", headers={"Authorization": f"Bearer {daemon.token}"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "/api/v1/memory/search" in page and '"openapi"' in page and "<script>" in page
    assert "http://" not in page.split("<script id=\"openapi\"")[0]  # no CDN assets


def test_import_json_writes_progress_to_stderr_when_not_a_terminal(daemon: Daemon) -> None:
    result = run(daemon, "import", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state"] == "done"  # stdout: only the final status
    assert "import import_" in result.stderr and "messages" in result.stderr
