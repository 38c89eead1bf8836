"""The six model slots: edited on the Settings page of a real ``memmy serve`` (the file's comments kept, ``${ENV}``
keys written as given and never shown resolved), a real connection test per slot against the local fake provider
(chat, embeddings, transcriptions, image models), the microphone's transcription endpoint, voice notes of chats
through the same ASR slot, general settings kept in the config, and ``memmy onboard``'s three steps."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memmy.agent.asr import AsrError, audio_name, hear_voice_notes, transcribe
from memmy.agent.channels.base import Attachment, Inbound
from memmy.agent.channels.router import compose_prompt
from memmy.agent.config import load_agent_config
from memmy.agent.slots import read_slots, silent_wav
from memmy.config import read_config_file
from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, write_agent_config
from tests.conftest import Daemon, free_port
from tests.workbench_client import TOKEN, Bench, serve_process

SPOKEN = silent_wav(0.1) + b"SAY:turn on the lights"


def brain(body: dict[str, Any]) -> Reply:
    text = last_user_text(body)
    return Reply(text="echo: " + text, cost=0.0015 if "costly" in text else None)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ModelStub, Path]]:
    home = tmp_path_factory.mktemp("slots-home")
    os.environ["STUB_ASR_KEY"] = "sk-asr-from-env"  # the serve process inherits it; the file keeps the reference
    try:
        extra = "# the user's own note, kept by every edit\nmodels: {}\n"
        with run_model_stub(brain) as stub, serve_process(home, stub, extra=extra) as base:
            yield base, stub, home
    finally:
        del os.environ["STUB_ASR_KEY"]


def _slots(bench: Bench) -> dict[str, Any]:
    return {s["slot"]: s for s in bench.http.get("/api/settings").json()["slots"]}


def test_slots_are_listed_tested_and_asr_is_optional(served: tuple[str, ModelStub, Path]) -> None:
    base, stub, _ = served
    bench = Bench(base)
    slots = _slots(bench)
    assert list(slots) == ["primary", "embedding", "summary", "evolution", "asr", "image"]
    assert (slots["primary"]["provider"], slots["primary"]["model"], slots["primary"]["key"]) == (
        "openai",
        "stub-model",
        "set",
    )
    assert slots["embedding"]["provider"] == "local" and slots["asr"]["enabled"] is False
    assert bench.post("/api/settings/test", {"slot": "primary"}).json() == {"ok": True, "message": "1 models listed"}
    assert bench.post("/api/settings/test", {"slot": "asr"}).json() == {"ok": True, "message": "off"}
    refused = bench.http.post(
        "/api/transcribe", files={"audio": ("v.webm", SPOKEN, "audio/webm")}, headers={"x-csrf-token": bench.csrf}
    )
    assert refused.status_code == 400 and "speech-to-text" in refused.json()["error"]
    bench.send("chat works without an ASR slot")  # optional slots block nothing


def test_editing_slots_keeps_comments_and_env_references(served: tuple[str, ModelStub, Path]) -> None:
    base, stub, home = served
    bench = Bench(base)
    path = home / ".memmy" / "config.yaml"
    asr = {"slot": "asr", "provider": "openai", "model": "whisper-1", "apiBase": stub.openai_url}
    saved = bench.post("/api/settings/slot", {**asr, "apiKey": "${STUB_ASR_KEY}"}).json()
    assert saved["slot"]["key"] == "${STUB_ASR_KEY}" and saved["message"] == "saved"
    text = path.read_text()
    assert "# the user's own note, kept by every edit" in text and "${STUB_ASR_KEY}" in text
    assert "sk-asr-from-env" not in text
    assert bench.post("/api/settings/test", {"slot": "asr"}).json() == {
        "ok": True,
        "message": "transcribed (0 characters)",
    }
    heard = bench.http.post(
        "/api/transcribe",
        files={"audio": ("voice.webm", SPOKEN, "audio/webm;codecs=opus")},
        headers={"x-csrf-token": bench.csrf},
    )
    assert heard.json() == {"text": "turn on the lights"}
    request = stub.requests[-1]
    assert request["path"] == "/v1/audio/transcriptions" and request["body"]["model"] == "whisper-1"
    assert request["body"]["file"][0] == "voice.webm" and request["body"]["file"][2] == SPOKEN
    assert request["headers"]["authorization"] == "Bearer sk-asr-from-env"  # resolved for the call only

    image = {"slot": "image", "provider": "openai", "model": "img-1", "apiBase": stub.openai_url}
    assert bench.post("/api/settings/slot", {**image, "apiKey": "sk-literal-image-key"}).json()["slot"]["key"] == "set"
    again = bench.post("/api/settings/slot", {**image, "model": "img-2"}).json()  # an empty key keeps the key
    assert again["slot"]["model"] == "img-2" and read_slots(read_config_file(path))["image"].api_key == (
        "sk-literal-image-key"
    )
    assert bench.post("/api/settings/test", {"slot": "image"}).json()["ok"] is True
    embedding = {"slot": "embedding", "provider": "openai_compatible", "model": "emb", "apiBase": stub.openai_url}
    answer = bench.post("/api/settings/slot", embedding).json()
    assert "restart the memory daemon" in answer["message"]
    assert bench.post("/api/settings/test", {"slot": "embedding"}).json() == {"ok": True, "message": "8 dimensions"}
    summary = {"slot": "summary", "provider": "openai_compatible", "model": "stub-sum", "apiBase": stub.openai_url}
    bench.post("/api/settings/slot", {**summary, "apiKey": "${STUB_ASR_KEY}"})
    assert bench.post("/api/settings/test", {"slot": "summary"}).json()["ok"] is True
    memory = read_config_file(path)["memmyMemory"]
    assert memory["summary"]["apiKey"] == "${STUB_ASR_KEY}" and memory["embedding"]["endpoint"] == stub.openai_url

    before = path.read_text()
    for bad, status in (
        ({**asr, "provider": "whisperer"}, 400),
        ({**asr, "apiBase": "ftp://x"}, 400),
        ({**asr, "apiBase": ""}, 400),
        ({**asr, "slot": "tts"}, 404),
        ({**asr, "apiKey": "a\nb"}, 400),
    ):
        assert bench.post("/api/settings/slot", bad).status_code == status, bad
    assert path.read_text() == before  # a refused edit writes nothing

    settings = bench.http.get("/api/settings").text
    report = bench.http.get("/api/diagnostics").text
    for secret in ("sk-literal-image-key", "sk-asr-from-env", "sk-test-key", TOKEN):
        assert secret not in settings and secret not in report


def test_the_primary_slot_applies_to_the_next_turn(served: tuple[str, ModelStub, Path]) -> None:
    base, stub, _ = served
    bench = Bench(base)
    seq = bench.state()["seq"]
    sid = bench.send("who answers before?")["id"]
    bench.wait_idle(sid, seq)
    primary = {"slot": "primary", "provider": "openai", "model": "stub-fast", "apiBase": stub.openai_url}
    assert bench.post("/api/settings/slot", primary).json()["slot"]["model"] == "stub-fast"
    for question, task in (("which model answers?", ""), ("and in the task begun before?", sid)):
        seq = bench.state()["seq"]
        bench.wait_idle(bench.send(question, task)["id"], seq)
        chats = [r for r in stub.requests if r["path"].endswith("/chat/completions")]
        assert chats[-1]["body"]["model"] == "stub-fast" and last_user_text(chats[-1]["body"]) == question
    bench.post("/api/settings/slot", {**primary, "model": "stub-model"})


def test_general_settings_and_the_log_level_are_kept(served: tuple[str, ModelStub, Path]) -> None:
    base, _, home = served
    bench = Bench(base)
    assert bench.post("/api/settings/general", {"language": "zh", "notifications": True}).json() == {
        "language": "zh",
        "notifications": True,
        "logLevel": "",
    }
    assert bench.post("/api/settings/general", {"language": "fr"}).status_code == 400
    assert bench.post("/api/settings/log-level", {"level": "warning"}).json() == {"logLevel": "WARNING"}
    assert '"language": "zh"' in Bench(base).http.get("/").text  # the page boots in Chinese
    tree = read_config_file(home / ".memmy" / "config.yaml")["workbench"]
    assert tree == {"language": "zh", "notifications": True, "logLevel": "WARNING"}
    assert bench.post("/api/settings/general", {"language": "en", "notifications": False}).status_code == 200


def test_the_usage_meter_and_the_daily_cap(served: tuple[str, ModelStub, Path]) -> None:
    base, _, home = served
    bench = Bench(base)
    before = {u["slot"]: u for u in bench.http.get("/api/usage").json()["slots"]}
    sid = bench.send("a costly question")["id"]
    bench.wait_idle(sid)
    usage = bench.http.get("/api/usage").json()
    after = {u["slot"]: u for u in usage["slots"]}
    assert list(after) == ["primary", "embedding", "summary", "evolution", "asr", "image"]
    assert after["primary"]["calls"] == before["primary"]["calls"] + 1
    assert after["primary"]["tokens"] == before["primary"]["tokens"] + 18  # the stub's usage
    assert after["primary"]["cost"] == pytest.approx(before["primary"]["cost"] + 0.0015)
    assert after["asr"]["calls"] >= 1  # the microphone's transcription above
    assert usage["cap"] == {"dailyCalls": 2000, "dailyTokens": 2_000_000, "exhausted": False, "memory": False}
    saved = bench.post("/api/settings/cap", {"dailyCalls": 50, "dailyTokens": 0}).json()
    assert saved["dailyCalls"] == 50 and "restart the memory daemon" in saved["message"]  # no daemon here
    assert read_config_file(home / ".memmy" / "config.yaml")["memmyMemory"]["llmBudget"] == {
        "dailyCalls": 50,
        "dailyTokens": 0,
    }
    for bad in ({"dailyCalls": -1, "dailyTokens": 0}, {"dailyCalls": "9", "dailyTokens": 0}, {"dailyCalls": 1}):
        assert bench.post("/api/settings/cap", bad).status_code == 400
    assert bench.http.get("/api/usage").json()["cap"]["dailyCalls"] == 50


def test_voice_notes_of_chats_go_through_the_asr_slot(isolated_home: Path) -> None:
    voice = Attachment("note.oga", "audio/ogg", SPOKEN)
    message = Inbound("telegram", "1", "1", "see this", attachments=(voice,))
    text, _, notes = compose_prompt(message, None)
    assert text == "see this" and "speech-to-text" in notes[0]
    with run_model_stub() as stub:
        write_agent_config(
            isolated_home, stub, extra=f"models:\n  asr: {{provider: openai, model: w, apiBase: '{stub.openai_url}'}}\n"
        )
        config = load_agent_config()
        heard, problems = asyncio.run(hear_voice_notes(config, [(voice.name, voice.mime, voice.data)]))
        assert heard == {"note.oga": "turn on the lights"} and problems == []
        assert stub.requests[-1]["body"]["file"][:2] == ("voice.ogg", "audio/ogg")
        text, _, notes = compose_prompt(message, heard)
        assert text == "see this\n[voice note] turn on the lights" and notes == []
        assert compose_prompt(message, {"note.oga": ""})[2] == ["note.oga: no speech was heard"]
        with pytest.raises(AsrError, match="empty"):
            asyncio.run(transcribe(config, b"", "audio/ogg"))
    heard, problems = asyncio.run(hear_voice_notes(config, [(voice.name, voice.mime, voice.data)]))
    assert heard == {} and problems == ["note.oga: the ASR endpoint failed (APIConnectionError)"]  # the stub is gone
    assert audio_name("audio/webm;codecs=opus") == "voice.webm" and audio_name("audio/x-m4a") == "voice.m4a"


def test_onboard_sets_up_the_slots_in_three_steps(isolated_home: Path) -> None:
    with run_model_stub() as stub:
        url = stub.openai_url
        answers = (
            f"1\nstub-model\n{url}\n${{OPENAI_API_KEY}}\nallow\n"  # step 1: the primary model
            f"2\nemb-small\n{url}\n\n"  # embedding: an endpoint, the primary's key
            "1\n"  # step 2: the memory models use the primary model
            f"y\nwhisper-1\n{url}\n${{STUB_ASR_KEY}}\n"  # step 3: ASR yes
            "n\n"  # image generation no
        )
        env = {**os.environ, "OPENAI_API_KEY": "sk-primary", "STUB_ASR_KEY": "sk-asr"}
        done = subprocess.run(
            [sys.executable, "-c", "from memmy.agent.cli import main; main()", "onboard"],
            input=answers,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("Step 1/3", "Step 2/3", "Step 3/3", "ok: 8 dimensions", "ok: transcribed"):
        assert step in done.stdout
    raw = read_config_file(isolated_home / ".memmy" / "config.yaml")
    slots = read_slots(raw)
    assert (slots["embedding"].provider, slots["embedding"].model) == ("openai_compatible", "emb-small")
    assert slots["summary"].model == slots["evolution"].model == "stub-model"
    assert slots["summary"].api_key == "${OPENAI_API_KEY}" and slots["asr"].api_key == "${STUB_ASR_KEY}"
    assert not slots["image"].enabled
    assert [r["path"] for r in stub.requests] == [
        "/v1/embeddings",
        "/v1/chat/completions",
        "/v1/chat/completions",
        "/v1/audio/transcriptions",
    ]
    assert stub.requests[-1]["headers"]["authorization"] == "Bearer sk-asr"


def test_a_memory_slot_edit_is_applied_by_the_running_daemon(tmp_path: Path) -> None:
    port = free_port()
    storage = f"memmyMemory:\n  storage: {{endpoint: 'http://127.0.0.1:{port}', token: slot-token}}\n"
    with run_model_stub() as stub, serve_process(tmp_path, stub, storage, memory=True) as base:
        daemon = Daemon(home=tmp_path, port=port, token="slot-token")  # the same config.yaml as memmy serve
        daemon.start()
        try:
            bench = Bench(base)
            summary = {
                "slot": "summary",
                "provider": "openai_compatible",
                "model": "stub-sum",
                "apiBase": stub.openai_url,
            }
            answer = bench.post("/api/settings/slot", summary).json()
            assert answer["message"] == "saved and applied by the memory daemon"
            with daemon.client() as http:
                health = http.get("/api/v1/health").json()
                assert health["models"]["summary"]["model"] == "stub-sum"
                assert bench.post("/api/settings/cap", {"dailyCalls": 7, "dailyTokens": 900}).json()["message"] == (
                    "saved and applied by the memory daemon"
                )
                limits = http.get("/api/v1/health").json()["evolution"]["llmUsage"]["limits"]
            assert limits == {"dailyCalls": 7, "dailyTokens": 900}
            assert bench.http.get("/api/usage").json()["cap"]["memory"] is True
        finally:
            daemon.stop()
