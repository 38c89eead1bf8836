"""Scripts' side of the CLI: under ``--json`` every error is one JSON object on stderr with a non-zero exit, and
``memmy-memory token`` gives the token with nothing but memmy (the README's curl lines use it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Daemon, refused_endpoint

README = Path(__file__).resolve().parents[1] / "README.md"


def memmy_memory(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in a process of its own, with ``home`` as HOME."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMY_", "MEMORY_SERVICE_"))}
    base.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), **env})
    return subprocess.run(
        [sys.executable, "-m", "memmy", *args], env=base, capture_output=True, text=True, timeout=120, check=False
    )


def json_error(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one error object a failed ``--json`` command wrote on stderr (stdout stays empty)."""
    assert result.returncode != 0 and result.stdout == "", (result.returncode, result.stdout)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    error = json.loads(lines[0])["error"]
    assert isinstance(error, dict) and error["message"]
    return error


def test_json_errors_from_the_daemon_are_json_on_stderr(daemon: Daemon, tmp_path: Path) -> None:
    common = ("--url", daemon.url, "--token", str(daemon.token), "--json")
    missing = memmy_memory(*common, "get", "nope", home=tmp_path)
    assert missing.returncode == 1
    error = json_error(missing)
    assert error["code"] == "not_found" and error["status"] == 404 and "nope" in error["message"]
    after = memmy_memory("--url", daemon.url, "--token", "wrong", "search", "x", "--json", home=tmp_path)
    assert json_error(after) | {"message": ""} == {"code": "unauthorized", "status": 401, "message": ""}
    plain = memmy_memory("--url", daemon.url, "--token", str(daemon.token), "get", "nope", home=tmp_path)
    assert plain.returncode == 1 and plain.stderr.strip() == "Error: memory nope not found"  # text without --json


def test_json_errors_without_a_daemon_and_for_bad_command_lines(tmp_path: Path) -> None:
    down = memmy_memory("--url", refused_endpoint(), "-j", "health", home=tmp_path)
    assert down.returncode == 1 and json_error(down)["code"] == "unavailable"
    no_id = memmy_memory("--json", "get", home=tmp_path)
    assert no_id.returncode == 2 and json_error(no_id)["code"] == "usage_error"
    bad_value = memmy_memory("search", "x", "--limit", "0", "--json", home=tmp_path)
    assert bad_value.returncode == 2 and "--limit" in json_error(bad_value)["message"]
    unknown = memmy_memory("--json", "no-such-command", home=tmp_path)
    assert unknown.returncode == 2 and json_error(unknown)["code"] == "usage_error"
    usage = memmy_memory("get", home=tmp_path)
    assert usage.returncode == 2 and usage.stderr.startswith("Usage: ")  # click's own text without --json


def test_token_prints_the_token_serve_created(fresh_daemon: Daemon) -> None:
    fresh_daemon.start()
    created = fresh_daemon.config_token()
    assert created
    printed = memmy_memory("token", home=fresh_daemon.home)
    assert printed.returncode == 0 and printed.stdout == f"{created}\n" and printed.stderr == ""
    as_json = memmy_memory("token", "--json", home=fresh_daemon.home)
    assert json.loads(as_json.stdout) == {"token": created}
    assert memmy_memory("token", home=fresh_daemon.home, MEMMY_MEMORY_TOKEN="from-env").stdout == "from-env\n"
    answer = httpx.post(
        f"{fresh_daemon.url}/api/v1/memory/add",
        headers={"authorization": f"Bearer {printed.stdout.strip()}"},
        json={"content": "Use uv, not pip, in this repo"},
    )
    assert answer.status_code == 200, answer.text


def test_token_before_any_token_exists_says_what_to_run(tmp_path: Path) -> None:
    result = memmy_memory("token", home=tmp_path)
    assert result.returncode == 1 and result.stdout == "" and "memmy-memory init" in result.stderr


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_readme_curl_lines_run_as_written(fresh_daemon: Daemon, tmp_path: Path) -> None:
    block = re.search(r"```bash\n(T=\$\(memmy-memory token\)\n.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert block, "the README's curl block starts with T=$(memmy-memory token)"
    script = block.group(1)
    assert "python3" not in script and "yaml" not in script  # nothing but memmy and curl
    fresh_daemon.start()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "memmy-memory"  # what the install puts on PATH: this interpreter's memmy
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m memmy "$@"\n')
    launcher.chmod(0o755)
    env = {k: v for k, v in fresh_daemon.env().items() if k != "MEMMY_MEMORY_TOKEN"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace("http://127.0.0.1:18960", fresh_daemon.url)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    answers, decoder, at = [], json.JSONDecoder(), 0
    while at < len(run.stdout.rstrip()):  # curl prints the three answers back to back
        answer, end = decoder.raw_decode(run.stdout, at)
        answers.append(answer)
        at = end + len(run.stdout[end:]) - len(run.stdout[end:].lstrip())
    assert answers[0]["ok"] is True and answers[1]["id"] and answers[2]["hits"], answers
