"""Shared set-up for the source-adapter and agent-integration tests.

Source adapters read a fixture home copied from ``tests/fixtures/<agent>/home``. The repository keeps every SQLite
database there as SQL text (``<name>.sql`` becomes ``<name>``), so it holds no binary blobs; the built files use
SQLite's default rollback journal, so a writer's lock blocks readers (Cursor's locked-database test relies on that).
Fixture files may say ``@HOME@`` where the copied home's absolute path belongs.

Integrations install into a temporary HOME (:func:`install_context`) and run the installed plugin in its host's
runtime (:func:`run_node_driver`, :func:`run_json_driver`) against a live daemon (:func:`start_with_memory`) or an
unreachable one (the ``dead_endpoint`` fixture in ``tests/conftest.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from memmy.integrations.base import InstallContext
from memmy.sources.model import Conversation, ScanStats, SourceAdapter
from tests.conftest import Daemon

FIXTURES = Path(__file__).parent / "fixtures"
HOME_PLACEHOLDER = "@HOME@"
_TEXT_SUFFIXES = (".json", ".jsonl", ".sql")

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


# --- source adapters -------------------------------------------------------------------------------------------


def build_sqlite(sql_file: Path, db_file: Path) -> Path:
    """Create ``db_file`` from the SQL script ``sql_file``; return ``db_file``."""
    with closing(sqlite3.connect(db_file)) as conn:
        conn.execute("PRAGMA synchronous = OFF")  # a throwaway test file: no fsync
        conn.executescript(sql_file.read_text(encoding="utf-8"))
        conn.commit()
    return db_file


def fixture_home(tmp_path: Path, agent: str, *, repo: bool = True) -> Path:
    """Copy ``tests/fixtures/<agent>/home`` to ``tmp_path / "fixture-home"`` and return that path.

    ``@HOME@`` in the ``.json``/``.jsonl``/``.sql`` files becomes the copy's path, each ``<name>.sql`` is built
    into the database ``<name>`` (and removed), and with ``repo`` an empty git repository is made at
    ``work/repo`` (the workspace the fixtures' sessions ran in).
    """
    home = tmp_path / "fixture-home"
    shutil.copytree(FIXTURES / agent / "home", home)
    for path in sorted(home.rglob("*")):
        if path.suffix in _TEXT_SUFFIXES and path.is_file():
            text = path.read_text(encoding="utf-8")
            if HOME_PLACEHOLDER in text:
                path.write_text(text.replace(HOME_PLACEHOLDER, str(home)), encoding="utf-8")
    for sql_file in sorted(home.rglob("*.sql")):
        build_sqlite(sql_file, sql_file.with_suffix(""))
        sql_file.unlink()
    if repo:
        (home / "work" / "repo" / ".git").mkdir(parents=True)
    return home


def scan(adapter: SourceAdapter, env: Mapping[str, str]) -> tuple[dict[str, Conversation], ScanStats]:
    """Run ``adapter`` over ``env``: its conversations by id (in the order found) and the scan's stats."""
    stats = ScanStats()
    return {c.conversation_id: c for c in adapter.conversations(env, stats)}, stats


# --- integrations ----------------------------------------------------------------------------------------------


def install_context(
    home: Path, endpoint: str = "http://127.0.0.1:18960", token: str | None = None, timeout_s: float = 1.5, **env: str
) -> InstallContext:
    """An install context for a temporary HOME; ``env`` adds variables to the installer's environment."""
    environ = {"HOME": str(home), "PATH": os.environ.get("PATH", ""), **env}
    return InstallContext(
        env=environ,
        home=home,
        python=sys.executable,
        endpoint=endpoint,
        token=token,
        config_path=home / ".memmy" / "config.yaml",
        timeout_s=timeout_s,
    )


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def start_with_memory(daemon: Daemon, token: str, content: str, tags: list[str]) -> None:
    """Start ``daemon`` with ``token``, add one memory and wait until it is embedded (searchable)."""
    daemon.token = token
    daemon.start()
    with daemon.client() as client:
        client.post("/api/v1/memory/add", json={"content": content, "tags": tags}).raise_for_status()
    daemon.drain()


def run_json_driver(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> dict[str, Any]:
    """Run a driver process; assert it exits 0 and return the JSON object on the last line of its stdout."""
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=60, env=dict(env))
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_node_driver(tmp_path: Path, name: str, source: str, *args: str) -> dict[str, Any]:
    """Write the ES-module driver ``source`` to ``tmp_path / name`` and run it under Node (HOME is ``tmp_path``)."""
    script = tmp_path / name
    script.write_text(source)
    assert NODE is not None
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    return run_json_driver([NODE, str(script), *args], env)
