"""Image generation through its slot (the agent's ``generate_image`` tool and the workbench's ``/image``, against
the fake ``/images/generations``) and web_fetch's limits (characters, redirects, content types) against a local
HTTP server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memmy.agent import imagegen
from memmy.agent.config import ToolsConfig, load_agent_config
from memmy.agent.tools import ToolBox
from tests.agent_stubs import (
    ModelStub,
    Reply,
    last_user_text,
    run_model_stub,
    tiny_png,
    tool_results,
    write_agent_config,
)
from tests.workbench_client import Bench, serve_process


@pytest.fixture
def site() -> Iterator[str]:
    """/big (200,000 characters), /hop -> /big, /loop -> /loop, /pic (a PNG), /data.json."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path in ("/hop", "/loop"):
                self.send_response(302)
                self.send_header("location", "/big" if self.path == "/hop" else "/loop")
                self.send_header("content-length", "0")
                self.end_headers()
                return
            body, kind = {
                "/big": (("lorem ipsum " * 20000).encode(), "text/plain; charset=utf-8"),
                "/pic": (tiny_png(), "image/png"),
                "/data.json": (b'{"answer": 42}', "application/json"),
            }[self.path]
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_web_fetch_stops_at_its_limits(site: str, tmp_path: Path) -> None:
    box = ToolBox(ToolsConfig(fetch_max_chars=1000, fetch_max_redirects=3, fetch_timeout_s=10), tmp_path)

    def fetch(url: str) -> tuple[str, bool]:
        return asyncio.run(box.call("web_fetch", json.dumps({"url": url})))

    text, ok = fetch(site + "/hop")
    assert ok and text.startswith(f"HTTP 200 {site}/big (from {site}/hop)") and "[cut at 1000 characters]" in text
    assert len(text) < 1200
    text, ok = fetch(site + "/loop")
    assert not ok and "TooManyRedirects" in text
    text, ok = fetch(site + "/pic")
    assert not ok and "image/png, not text" in text
    assert fetch(site + "/data.json") == (f"HTTP 200 {site}/data.json\n" + '{"answer": 42}', True)
    assert not fetch("file:///etc/passwd")[1]


def _image_config(stub: ModelStub) -> str:
    return f"models:\n  image: {{provider: openai, model: img-1, apiBase: '{stub.openai_url}', apiKey: sk-img}}\n"


def test_the_image_tool_exists_only_with_its_slot(isolated_home: Path) -> None:
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub)
        box = ToolBox(ToolsConfig(), isolated_home / "work")
        imagegen.install(load_agent_config(), box)
        assert "generate_image" not in box.tools
        write_agent_config(isolated_home, stub, extra=_image_config(stub))
        imagegen.install(load_agent_config(), box)
        text, ok = asyncio.run(box.call("generate_image", json.dumps({"prompt": "A red fox, at dawn!"})))
        assert ok and text.startswith("saved images/") and "-a-red-fox-at-dawn.png" in text
        saved = isolated_home / "work" / text.split()[1]
        assert saved.read_bytes() == tiny_png()
        assert stub.requests[-1]["body"] == {
            "model": "img-1",
            "prompt": "A red fox, at dawn!",
            "size": "1024x1024",
            "n": 1,
        }
        text, ok = asyncio.run(box.call("generate_image", json.dumps({"prompt": "x", "size": "9x9"})))
        assert not ok and "size: one of" in text


def brain(body: dict[str, Any]) -> Reply:
    if "draw a cat" in last_user_text(body) and not tool_results(body):
        return Reply(tool_calls=[("generate_image", json.dumps({"prompt": "a cat"}))])
    if "draw a cat" in last_user_text(body):
        return Reply(text="Here it is: " + tool_results(body)[0])
    return Reply(text="echo: " + last_user_text(body))


def test_the_workbench_makes_pictures_with_the_agent_and_slash_image(tmp_path: Path) -> None:
    with run_model_stub(brain) as stub, serve_process(tmp_path, stub, extra=_image_config(stub)) as base:
        bench = Bench(base)
        sid = bench.send("please draw a cat")["id"]
        events = bench.wait_idle(sid)
        result = next(e for e in events if e["kind"] == "tool_result")
        assert result["text"].startswith("saved images/") and result["data"]["ok"]
        name = result["text"].split()[1].removeprefix("images/")
        picture = bench.http.get(f"/api/sessions/{sid}/image/{name}")
        assert picture.status_code == 200 and picture.headers["content-type"] == "image/png"
        assert picture.content == tiny_png()
        made = bench.send("/image a lighthouse in fog", sid)
        assert made["text"].startswith("saved images/") and made["image"].startswith(f"/api/sessions/{sid}/image/")
        assert bench.http.get(made["image"]).content == tiny_png()
        assert stub.requests[-1]["body"]["prompt"] == "a lighthouse in fog"
        # the picture is kept in the task: reopened, its answer names it as an artifact
        task = bench.task(sid)
        kept = task["messages"][-2:]
        path = made["text"].removeprefix("saved ")
        assert kept[0] == {"role": "user", "content": "/image a lighthouse in fog"}
        assert kept[1]["artifacts"] == [{"kind": "image", "path": path}]
        bench.send("and now?", sid)
        bench.wait_idle(sid, after=task["seq"])
        asked = stub.requests[-1]["body"]["messages"]
        assert any(m["content"] == f"saved {path}" for m in asked)  # the model knows the picture was made
        assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"} for m in asked)
        for bad in ("../../config.yaml", "x.txt", ".hidden.png", "nothere.png"):
            assert bench.http.get(f"/api/sessions/{sid}/image/{bad}").status_code == 404
        assert bench.send("/image", sid)["text"] == "describe the image to make"


def test_a_native_pet_without_pywebview_says_so_and_opens_the_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from memmy.agent.cli import cli
    from memmy.workbench import native

    if native.available():
        pytest.skip("pywebview is installed: this checks the message given without it")
    with run_model_stub() as stub, serve_process(tmp_path, stub) as base:
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.setenv("MEMMY_HOME", str(tmp_path / ".memmy"))
        opened = tmp_path / "opened.txt"
        browser = tmp_path / "browser.sh"
        browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {opened}\n')
        browser.chmod(0o755)
        monkeypatch.setenv("BROWSER", f"{browser} %s")  # webbrowser runs it with the link
        done = CliRunner().invoke(cli, ["workbench", "--pet", "--native", "--no-start"])
        assert done.exit_code == 0, done.output
        assert "pip install 'memmy[pet]'" in done.output and "opening the browser instead" in done.output
        link = next(line for line in done.output.splitlines() if "/signin?code=" in line)
        assert link.startswith(base) and link.endswith("&next=/pet")
        assert opened.read_text() == link
