"""The Gemini provider through Google's ``google-genai`` SDK against a local server speaking the Gemini REST wire
format (tests/fake_gemini.py): a streamed turn, a tool call round trip, images in, and the primary slot's
connection test."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memmy.agent.config import ModelChoice, load_agent_config
from memmy.agent.loop import TurnEvent, TurnResult
from memmy.agent.runtime import open_runtime
from memmy.agent.slots import Slot, read_slots
from memmy.agent.slots import test_slot as check_slot
from memmy.config import read_config_file
from tests.agent_stubs import tiny_png
from tests.fake_gemini import FakeGemini, GeminiReply, function_responses, last_user_text, run_fake_gemini


def write_config(home: Path, fake: FakeGemini, key: str = "gm-test-key") -> None:
    """``$MEMMY_HOME/config.yaml`` with the Gemini provider at the fake."""
    memmy_home = home / ".memmy"
    memmy_home.mkdir(parents=True, exist_ok=True)
    (memmy_home / "config.yaml").write_text(
        "agents:\n  defaults: {provider: gemini, model: gemini-fake, maxRetries: 0, timeoutS: 20, memory: false}\n"
        f"providers:\n  gemini: {{apiBase: '{fake.url}', apiKey: {key}}}\n"
        "tools:\n  exec: {approval: allow, timeout: 5}\n",
        encoding="utf-8",
    )


def choice_at(fake: FakeGemini, key: str = "gm-test-key") -> ModelChoice:
    """The Gemini model at the fake, as the config would resolve it."""
    return ModelChoice("default", "gemini", "gemini", "gemini-fake", fake.url, key, 20, 0, 1000, 64)


def one_turn(text: str, project: str | None = None) -> tuple[TurnResult, list[TurnEvent]]:
    events: list[TurnEvent] = []

    async def main() -> TurnResult:
        runtime = await open_runtime(load_agent_config(), "cli:gemini", project, emit=events.append)
        try:
            return await runtime.agent.run_turn(text)
        finally:
            await runtime.close()

    return asyncio.run(main()), events


def tool_brain(body: dict[str, Any]) -> GeminiReply:
    """Reads notes.txt through the agent's read_file tool, then reports what it returned."""
    answered = function_responses(body)
    if answered:
        return GeminiReply(text="tool said: " + str(answered[-1]["response"]["result"]))
    if "read notes" in last_user_text(body):
        return GeminiReply(calls=[("read_file", {"path": "notes.txt"})])
    return GeminiReply(text="no tool")


def test_a_turn_streams_the_gemini_answer(isolated_home: Path) -> None:
    with run_fake_gemini() as fake:
        write_config(isolated_home, fake)
        result, events = one_turn("hello there gemini")
    assert result.answer == "gemini says: hello there gemini" and result.status == "succeeded"
    assert [e.text for e in events if e.kind == "text"] == ["gemini ", "says: ", "hello ", "there ", "gemini"]
    request = fake.requests[-1]
    assert request["path"] == "/v1beta/models/gemini-fake:streamGenerateContent?alt=sse"
    assert request["body"]["systemInstruction"]["parts"][0]["text"]  # the agent's system prompt travels apart
    assert request["body"]["generationConfig"]["maxOutputTokens"] == 4096


def test_a_tool_call_round_trip(isolated_home: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "notes.txt").write_text("the parser lives in src/parse.py\n")
    with run_fake_gemini(tool_brain) as fake:
        write_config(isolated_home, fake)
        result, events = one_turn("please read notes", str(project))
    assert result.answer == "tool said: the parser lives in src/parse.py\n"
    assert [e.kind for e in events if e.kind.startswith("tool")] == ["tool_call", "tool_result"]
    first, second = (r["body"] for r in fake.requests)
    declared = {d["name"]: d for d in first["tools"][0]["functionDeclarations"]}
    schema = declared["read_file"]["parameters_json_schema"]  # google-genai writes it snake_case (the API reads both)
    assert schema["properties"]["path"]["type"] == "string" and schema["required"] == ["path"]
    # the model's call went back as a model turn, the tool's answer as a functionResponse naming the function
    assert second["contents"][-2]["role"] == "model"
    assert second["contents"][-2]["parts"][-1]["functionCall"] == {"name": "read_file", "args": {"path": "notes.txt"}}
    assert function_responses(second)[0]["name"] == "read_file"


def test_provider_errors_say_what_happened() -> None:
    from memmy.agent.providers import ProviderError, build_provider

    message = [{"role": "user", "content": "hi"}]
    for status, kind, said in ((429, "rate_limited", "rate limiting"), (500, "error", "answered HTTP 500")):

        def refuse(body: dict[str, Any], status: int = status) -> GeminiReply:
            return GeminiReply(status=status)

        with run_fake_gemini(refuse) as fake:
            choice = choice_at(fake)
            with pytest.raises(ProviderError) as error:
                asyncio.run(build_provider(choice).stream(message, []))
        assert error.value.kind == kind and said in str(error.value), error.value


def test_images_go_in_as_inline_bytes(isolated_home: Path) -> None:
    from memmy.agent.providers import build_provider

    picture = base64.b64encode(tiny_png()).decode()
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{picture}"}},
        ],
    }
    with run_fake_gemini() as fake:
        choice = choice_at(fake)
        done = asyncio.run(build_provider(choice).stream([message], []))
    assert done.text == "gemini says: what is this"
    parts = fake.requests[-1]["body"]["contents"][0]["parts"]
    inline = parts[1]["inlineData"]  # google-genai writes the field snake_case (the API reads both)
    assert inline["data"] == picture and inline.get("mimeType", inline.get("mime_type")) == "image/png"


def test_the_primary_slot_test_passes_and_fails_clearly() -> None:
    with run_fake_gemini() as fake:
        good = Slot("primary", "gemini", "gemini-fake", fake.url, "gm-test-key")
        ok, said = asyncio.run(check_slot(good))
        assert ok and said == "gemini-fake answered (1 candidate)", said
        assert fake.requests[-1]["path"] == "/v1beta/models/gemini-fake:generateContent"
        assert fake.requests[-1]["body"]["generationConfig"] == {"maxOutputTokens": 1}
        ok, said = asyncio.run(check_slot(Slot("primary", "gemini", "gemini-fake", fake.url, "wrong-key")))
        assert not ok and "refused the API key" in said and "wrong-key" not in said, said
        offline = fake.url
    ok, said = asyncio.run(check_slot(Slot("primary", "gemini", "gemini-fake", offline, "gm-test-key"), timeout_s=3))
    assert not ok and f"cannot reach gemini ({offline})" in said, said


def test_onboarding_lists_the_gemini_models() -> None:
    from memmy.agent.onboard import probe_model

    with run_fake_gemini() as fake:
        choice = choice_at(fake)
        assert asyncio.run(probe_model(choice)) == (True, "1 models listed")
        assert fake.requests == []  # a GET: listed, not recorded as a generate call
        wrong = choice_at(fake, "nope")
        ok, said = asyncio.run(probe_model(wrong))
    assert not ok and "refused the API key" in said


def test_onboarding_a_gemini_primary_points_the_memory_models_at_its_openai_path(isolated_home: Path) -> None:
    with run_fake_gemini() as fake:
        answers = (
            f"3\ngemini-fake\n{fake.url}\n${{GEMINI_API_KEY}}\nallow\n"  # step 1: Gemini, listed through its SDK
            "1\n1\nn\nn\n"  # built-in embedding; memory models: the primary; no ASR, no images
            "y\ny\n"  # the fake speaks no Chat Completions: save the memory slots anyway
        )
        done = subprocess.run(
            [sys.executable, "-c", "from memmy.agent.cli import main; main()", "onboard"],
            input=answers,
            capture_output=True,
            text=True,
            env={**os.environ, "GEMINI_API_KEY": "gm-test-key"},
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: 1 models listed" in done.stdout
    slots = read_slots(read_config_file(isolated_home / ".memmy" / "config.yaml"))
    assert (slots["primary"].provider, slots["primary"].api_base) == ("gemini", fake.url)
    assert slots["summary"].api_base == slots["evolution"].api_base == fake.url + "/v1beta/openai"
    assert slots["summary"].model == "gemini-fake" and slots["summary"].api_key == "${GEMINI_API_KEY}"
