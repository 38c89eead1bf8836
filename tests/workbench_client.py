"""Helpers for the workbench tests: a real ``memmy serve`` process (the workbench mounted, as the CLI runs it)
on a free port against a model stub, and a signed-in HTTP client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.agent_stubs import ModelStub, write_agent_config
from tests.conftest import free_port

TOKEN = "workbench-test-token"


@contextmanager
def serve_process(
    home: Path, stub: ModelStub, extra: str = "", memory: bool = False, approval: str = "allow"
) -> Iterator[str]:
    """``memmy serve`` as a child process with HOME/MEMMY_HOME under ``home``; yields its base URL."""
    port = free_port()
    serve = f"{extra}serve: {{port: {port}, token: {TOKEN}}}\n"  # extra may continue the tools: section
    write_agent_config(home, stub, extra=serve, memory=memory, approval=approval)
    env = {**os.environ, "HOME": str(home), "MEMMY_HOME": str(home / ".memmy")}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    log = open(home / "serve.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-c", "from memmy.agent.cli import main; main()", "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, (home / "serve.log").read_text()
            assert time.monotonic() < deadline, "memmy serve did not start"
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def sign_in_link(base: str) -> str:
    """A one-time sign-in link, asked for with the serve token as ``memmy workbench`` does."""
    answer = httpx.post(base + "/workbench/link", headers={"authorization": f"Bearer {TOKEN}"})
    answer.raise_for_status()
    return str(answer.json()["url"])


class Bench:
    """A signed-in client of the workbench's JSON API."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=30)
        self.http.get(sign_in_link(base).removeprefix(base))
        page = self.http.get("/").text
        boot = page.split('<script type="application/json" id="boot">', 1)[1].split("</script>", 1)[0]
        self.csrf = str(json.loads(boot)["csrf"])

    def post(self, path: str, body: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        """A POST with the CSRF token."""
        return self.http.post(path, json=body or {}, headers={"x-csrf-token": self.csrf}, **kwargs)

    def send(
        self, text: str, session: str = "", files: list[tuple[str, bytes]] | None = None, pet: bool = False
    ) -> Any:
        """``POST /api/send``; the JSON answer."""
        data = {"text": text, "session": session, "pet": "1" if pet else ""}
        upload = [("files", (name, content)) for name, content in files or []]
        answer = self.http.post("/api/send", data=data, files=upload, headers={"x-csrf-token": self.csrf})
        assert answer.status_code == 200, answer.text
        return answer.json()

    def state(self) -> Any:
        """``GET /api/state``."""
        return self.http.get("/api/state").json()

    def task(self, sid: str) -> Any:
        """``GET /api/sessions/{sid}``."""
        return self.http.get(f"/api/sessions/{sid}").json()

    def wait_idle(self, sid: str, after: int = 0, timeout_s: float = 30) -> list[dict[str, Any]]:
        """Read the event stream from ``after`` until the session's ``idle`` event; every event of it."""
        seen: list[dict[str, Any]] = []
        with self.http.stream("GET", f"/api/events?after={after}", timeout=timeout_s) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["session"] == sid:
                    seen.append(event)
                    if event["kind"] == "idle":
                        return seen
        raise AssertionError("the stream ended before the turn did")
