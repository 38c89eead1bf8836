"""The hook starts lean (no urllib/email/http.client/hashlib/typing/pathlib) and its raw-socket HTTP client
speaks enough HTTP/1.1 to a real server: JSON bodies, chunked replies, error statuses, the bearer token."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from memmy.hook.runtime import Client, HTTPError, http_request, short_hash

HEAVY = (
    *("urllib", "email", "http", "hashlib", "typing", "pathlib", "threading"),
    *("json", "re", "runpy", "__future__", "stringprep"),  # stringprep: getaddrinfo's idna codec for a str host
)


def test_the_hook_runtime_does_not_import_the_slow_modules() -> None:
    code = f"import sys; import memmy.hook.runtime; print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}])"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, env=_env())
    assert done.stdout.strip() == "[]"


def _env() -> dict[str, str]:
    from memmy.integrations.launcher import package_dir

    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": package_dir()}


def test_a_plain_prompt_round_trip_imports_nothing_slow(server: str, tmp_path: Path) -> None:
    """The whole prompt path (settings, state files, the request, the answer) stays off json/re/runpy."""
    code = (
        "import sys; from memmy.hook.runtime import handle; import time; "
        "out = handle('claude_code', 'UserPromptSubmit', sys.stdin.read(), time.monotonic() + 10); "
        f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}])"
    )
    env = {**_env(), "HOME": str(tmp_path), "MEMMY_HOME": str(tmp_path / ".memmy"), "MEMMY_MEMORY_URL": server}
    payload = {"session_id": "s", "prompt": "how do I fix the flaky test in the orders module", "cwd": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], input=json.dumps(payload), capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert list((tmp_path / ".memmy" / "hooks" / "state").glob("claude_code-*.json"))  # the turn state was saved


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, None, True, False, "x\u00e9\n\"", -3], "b": {}, "数据库": "迁移 \U0001f600"},
        [],
        "text",
        0,
        {"nested": [{"deep": [[], {}]}], "big": 10**20, "neg": -0.5e-7},
    ],
)
def test_lean_json_matches_the_json_module(value: object) -> None:
    from memmy.hook import lean_json

    for ascii_only in (True, False):
        text = lean_json.dumps(value, ensure_ascii=ascii_only)
        assert text == json.dumps(value, ensure_ascii=ascii_only)
        assert lean_json.loads(f"  {text}\n") == value
        assert lean_json.loads(text.encode("utf-8")) == value


@pytest.mark.parametrize("bad", ["", "  ", "{", '{"a": }', "[1] 2", "nope"])
def test_lean_json_rejects_what_json_rejects(bad: str) -> None:
    from memmy.hook import lean_json

    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        lean_json.loads(bad)
    with pytest.raises(TypeError):
        lean_json.dumps({"a": object()})


def test_short_hash_is_the_sha256_prefix_it_always_was() -> None:
    import hashlib

    assert short_hash("claude_code", "s1") == hashlib.sha256(b"claude_code\x00s1").hexdigest()[:20]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, str]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, body: bytes, chunked: bool = False) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        if chunked:
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for part in (body[:5], body[5:]):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("content-length", "0"))
        payload = json.loads(self.rfile.read(length) or b"{}")
        _Handler.seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.path == "/base/api/v1/missing":
            self._reply(404, b'{"error": "no"}')
        else:
            self._reply(200, json.dumps({"echo": payload, "path": self.path}).encode(), chunked=self.path.endswith("c"))


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/base"
    httpd.shutdown()
    httpd.server_close()


def test_raw_client_round_trips_json_chunked_replies_errors_and_the_token(server: str) -> None:
    import time

    client = Client(server, "tok-123", "claude_code", "/work/repo", time.monotonic() + 10)
    answer = client.call("POST", "/api/v1/turns/start", {"query": "数据库 migration"})
    assert answer == {"echo": {"query": "数据库 migration"}, "path": "/base/api/v1/turns/start"}
    assert client.call("POST", "/api/v1/c", {"n": 1})["echo"] == {"n": 1}  # chunked transfer encoding
    headers = _Handler.seen[-1]
    assert headers["authorization"] == "Bearer tok-123"
    assert headers["x-memmy-source"] == "claude_code" and headers["x-memmy-workspace-path"] == "/work/repo"
    with pytest.raises(HTTPError) as err:
        client.call("POST", "/api/v1/missing", {})
    assert err.value.code == 404
    status, body = http_request(server, "POST", "/api/v1/x", {}, b"{}", 5)
    assert status == 200 and json.loads(body)["path"] == "/base/api/v1/x"


def _run_launcher(tmp_path: Path, package: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run a launcher written for ``package`` whose interpreter records its arguments, then runs Python."""
    from memmy.integrations.launcher import shim_text

    recorder = tmp_path / "python"
    recorder.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\nexec "{sys.executable}" "$@"\n')
    recorder.chmod(0o755)
    shim = tmp_path / "memmy-hook"
    shim.write_text(shim_text(str(recorder), "memmy.hook", True, package))
    shim.chmod(0o755)
    env = {
        "HOME": str(tmp_path),
        "MEMMY_HOME": str(tmp_path / ".memmy"),
        "MEMMY_MEMORY_URL": "http://127.0.0.1:9",  # nothing listens: the hook fails open
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [str(shim), "claude_code", "UserPromptSubmit"],
        input=json.dumps({"session_id": "s", "prompt": "how do I fix the flaky test", "cwd": str(tmp_path)}),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return done, (tmp_path / "args").read_text().strip()


def test_the_hook_launcher_starts_python_without_site_and_still_works(tmp_path: Path) -> None:
    from memmy.integrations.launcher import FAST_HOOK_CODE, package_dir

    done, args = _run_launcher(tmp_path, package_dir())
    assert args == f"-S -P -c {FAST_HOOK_CODE} claude_code UserPromptSubmit"
    assert done.returncode == 0 and done.stderr == "", done.stderr  # memmy found without site-packages


def test_the_hook_launcher_falls_back_to_a_normal_start_without_the_package_dir(tmp_path: Path) -> None:
    done, args = _run_launcher(tmp_path, str(tmp_path / "gone"))
    assert args == "-m memmy.hook claude_code UserPromptSubmit"
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_secret_gate_passes_every_text_the_redactor_would_change() -> None:
    """The hook imports the redactor only for texts ``maybe_secret`` flags: it must flag every text the redactor
    changes (the secret corpus, framed as prompts), and let plain prompts that merely name a secret-like word pass."""
    from memmy.hook.runtime import maybe_secret
    from memmy.redact import redact
    from tests.secret_corpus import CORPUS, make_corpus
    from tests.test_redact import SECRETS

    texts = [text for _, text, _ in CORPUS + make_corpus(7)] + list(SECRETS.values())
    texts += ["Authorization: Basic dXNlcjpwYXNz", "password=hunter2", "口令为abc123", "xoxb-1234567890", "a://u:p@h"]
    texts += ["-----BEGIN RSA PRIVATE KEY-----", "data:image/png;base64,iVBO RwAA AAAA AAAA"]
    changed = [t for text in texts for t in (text, f"please use {text}", f"密钥是 {text} 谢谢") if redact(t) != t]
    assert len(changed) > 3 * len(CORPUS)
    assert [t for t in changed if not maybe_secret(t)] == []
    plain = ["what port does the auth service use", "a key decision for beginners", "the password policy is here"]
    assert not any(maybe_secret(p) for p in plain)


def test_every_resume_prompt_passes_the_resume_gate() -> None:
    """The runtime reads the resume module only for prompts ``might_resume`` flags: each form it handles must pass."""
    from memmy.hook.resume import COMMAND, SENTINEL_END, SENTINEL_START, resume_request
    from memmy.hook.runtime import might_resume

    handled = [f"{COMMAND} the flaky test", COMMAND, f"run {SENTINEL_START} x {SENTINEL_END}", " 3 ", "Cancel", "取消"]
    assert all(might_resume(p) for p in handled)
    assert all(resume_request(p) is not None for p in handled[:3])
    assert not any(might_resume(p) for p in ("how do I fix the flaky test", "/memmy-remember x", "12 apples"))


def test_a_prompt_that_may_hold_a_secret_loads_the_redactor_without_typing_or_dataclasses() -> None:
    """The redactor a hook imports for such a prompt compiles only the rules the text selects."""
    code = (
        "import sys; from memmy.hook.runtime import scrub; print(scrub('use password: hunter2x please')); "
        "from memmy.redact.rules import RULES; print(sum(isinstance(r._pattern, str) for r in RULES) > 40); "
        "print([m for m in ('typing', 'dataclasses', 'inspect') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, env=_env())
    assert done.stdout.split("\n")[:3] == ["use password: [REDACTED:password] please", "True", "[]"]
