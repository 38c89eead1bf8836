"""Adding another agent through a saved recipe (JSONL, JSON and SQLite), then importing it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.sources.model import ScanStats
from memmy.sources.recipe import Recipe, RecipeAdapter, discover_installation, load_recipes, normalise_name
from tests.conftest import Daemon


def kimi_history(root: Path) -> Path:
    sessions = root / "sessions"
    sessions.mkdir(parents=True)
    lines = [
        {"id": "m1", "session": "s1", "who": "human", "msg": {"text": "add a retry to the uploader"}, "ts": 1780305834},
        {
            "id": "m2",
            "session": "s1",
            "who": "ai",
            "msg": {"text": "Added exponential retry to upload()."},
            "ts": 1780305840,
        },
        {"id": "m3", "session": "s1", "who": "human", "msg": {"text": "now log the attempts"}, "ts": 1780305900},
        {"id": "m4", "session": "s1", "who": "narrator", "msg": {"text": "ignored"}, "ts": 1780305901},
    ]
    path = sessions / "s1.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return sessions


def test_name_matching_ignores_only_case_spaces_hyphens_underscores(tmp_path: Path) -> None:
    assert normalise_name("Kimi Code") == normalise_name("kimi-code") == normalise_name("KIMI_CODE") == "kimicode"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "kimi-code"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    assert discover_installation("Kimi Code", env) == str(tool)
    assert discover_installation("kimi", env) is None  # no prefix or alias matching


def test_recipe_formats(tmp_path: Path) -> None:
    jsonl = RecipeAdapter(
        Recipe.from_json(
            {
                "name": "kimicode",
                "format": "jsonl",
                "path": str(kimi_history(tmp_path / "k")),
                "fields": {
                    "role": "who",
                    "content": "msg.text",
                    "createdAt": "ts",
                    "conversationId": "session",
                    "messageId": "id",
                },
                "roleMap": {"human": "user", "ai": "assistant"},
                "timestampFormat": "unix_seconds",
            }
        )
    )
    stats = ScanStats()
    [conversation] = list(jsonl.conversations({}, stats))
    assert [m.role for m in conversation.messages] == ["user", "assistant", "user"]
    assert conversation.messages[0].created_at.startswith("2026-") and stats.skipped["unknown_role"] == 1
    db = tmp_path / "chat.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id, thread, role, body, at)")
        conn.executemany(
            "INSERT INTO t VALUES (?,?,?,?,?)",
            [(1, "a", "user", "hi there, fix it", 1780305834000), (2, "a", "assistant", "Fixed.", 1780305835000)],
        )
    sql = RecipeAdapter(
        Recipe.from_json(
            {
                "name": "dbagent",
                "format": "sqlite",
                "path": str(db),
                "query": "SELECT id, thread, role, body, at FROM t ORDER BY id",
                "fields": {
                    "role": "role",
                    "content": "body",
                    "conversationId": "thread",
                    "messageId": "id",
                    "createdAt": "at",
                },
                "timestampFormat": "unix_milliseconds",
            }
        )
    )
    [conv] = list(sql.conversations({}, ScanStats()))
    assert [m.content for m in conv.messages] == ["hi there, fix it", "Fixed."]
    with pytest.raises(ValueError, match="one SELECT statement"):
        Recipe.from_json(
            {
                "name": "x",
                "format": "sqlite",
                "path": str(db),
                "query": "DELETE FROM t",
                "fields": {"role": "role", "content": "body"},
            }
        )


def test_sources_add_saves_recipe_and_imports(fresh_daemon: Daemon, tmp_path: Path) -> None:
    history = kimi_history(tmp_path / "kimi")
    fresh_daemon.start()
    env = {"HOME": str(fresh_daemon.home), "MEMMY_HOME": str(fresh_daemon.home / ".memmy"), "PATH": str(tmp_path)}
    runner = CliRunner()
    missing = runner.invoke(cli, ["--url", fresh_daemon.url, "sources", "add", "Kimi Code"], env=env)
    assert missing.exit_code == 1 and "was not found on this machine" in missing.output
    added = runner.invoke(
        cli,
        [
            "--url",
            fresh_daemon.url,
            "sources",
            "add",
            "Kimi Code",
            "--history",
            str(history),
            "--map",
            "role=who",
            "--map",
            "content=msg.text",
            "--map",
            "createdAt=ts",
            "--map",
            "conversationId=session",
            "--map",
            "messageId=id",
            "--role-map",
            "human=user",
            "--role-map",
            "ai=assistant",
            "--timestamp-format",
            "unix_seconds",
        ],
        env=env,
        catch_exceptions=False,
    )
    assert added.exit_code == 0, added.output
    assert "Added 1 turns from kimicode" in added.output  # the last turn has no answer yet: it waits
    assert list(load_recipes(fresh_daemon.home / ".memmy")) == ["kimicode"]
    listed = runner.invoke(cli, ["--url", fresh_daemon.url, "--json", "sources"], env=env)
    assert "kimicode" in [s["source"] for s in json.loads(listed.output)["sources"]]
    removed = runner.invoke(cli, ["--url", fresh_daemon.url, "sources", "remove", "kimi-code"], env=env)
    assert removed.exit_code == 0 and not load_recipes(fresh_daemon.home / ".memmy")
