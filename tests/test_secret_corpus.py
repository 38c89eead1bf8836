"""The secret corpus (>= 80 secrets of >= 30 kinds) through every write path of a real daemon, then a byte search
of every file in the store directory (database, WAL, shm, logs) and of the daemon log: nothing may survive."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memmy.commands.admin import ReloadConfig
from memmy.commands.memory import AddMemory
from memmy.config import load_config
from memmy.embed import Embedder
from memmy.errors import ConfigError, InvalidArgument
from memmy.mcp.transcripts import get_conversation
from memmy.namespace import Namespace
from memmy.redact import RedactionReport, Redactor, redact
from memmy.service import MemoryService
from tests.claude_transcripts import Transcript
from tests.conftest import Daemon
from tests.secret_corpus import CORPUS, KINDS, make_corpus

Corpus = list[tuple[str, str, str]]
PATHS = ("memory_add", "turn_http", "import_claude_code", "import_codex", "mcp_remember", "search_and_feedback")


def test_corpus_size_and_every_rule_example() -> None:
    assert len(CORPUS) >= 80 and len(KINDS) >= 30
    for kind, text, needle in CORPUS:
        report = RedactionReport()
        cleaned = redact(text, report)
        assert needle not in cleaned, (kind, cleaned)
        assert f"[REDACTED:{kind}]" in cleaned, (kind, cleaned)


def test_ordinary_text_and_code_stay_as_they_are() -> None:
    keep = [
        "The password policy is stored in the wiki; rotate tokens every 90 days.",
        "def compute(tokens): return len(tokens)  # sk-learn is not a key",
        "max_tokens: 4096",
        'tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")',
        "api_key = os.environ['OPENAI_API_KEY']",
        "password = getpass.getpass()",
        'DB_PASSWORD="${DB_PASSWORD}"',
        "curl -H 'Authorization: Bearer YOUR_TOKEN' https://api.example.com",
        "postgres://localhost:5432/app",
        "git commit -m 'fix the flaky redis test'",
        "数据库连接池的大小改成 20",
        "The secret to fast tests is fewer fixtures.",
    ]
    for text in keep:
        assert redact(text) == text


def test_allowlist_and_extra_patterns_from_config() -> None:
    redactor = Redactor.from_config(
        {
            "extraPatterns": [{"name": "acme_token", "pattern": r"acme_[a-z0-9]{16}"}],
            "allowlist": ["AKIAIOSFODNN7EXAMPLE"],
        }
    )
    text = "docs key AKIAIOSFODNN7EXAMPLE, real key AKIAZZZZZZZZZZZZZZZZ, internal acme_0123456789abcdef"
    assert redactor.redact(text) == (
        "docs key AKIAIOSFODNN7EXAMPLE, real key [REDACTED:aws_access_key], internal [REDACTED:acme_token]"
    )


def test_redact_json_redacts_values_under_secret_keys() -> None:
    body = {"toolCalls": [{"name": "http", "input": {"password": "hunter22", "api_key": "k3y-0123456789abcdef"}}]}
    cleaned = Redactor().redact_json(body)
    assert cleaned["toolCalls"][0]["input"] == {
        "password": "[REDACTED:password]",
        "api_key": "[REDACTED:secret_assignment]",
    }


# -- the corpus through a real daemon ---------------------------------------------------------------------------
def _write_claude(home: Path, corpus: Corpus, cwd: str) -> Transcript:
    transcript = Transcript(home, cwd)
    for start in range(0, len(corpus), 4):
        chunk = [text for _, text, _ in corpus[start : start + 4]] + ["(none)"] * 4
        transcript.user(f"step {start}: {chunk[0]}")
        transcript.tool("Bash", {"command": f"echo {chunk[1]}"}, f"output: {chunk[2]}")
        transcript.assistant(f"done with step {start}; noted {chunk[3]}")
    transcript.write()
    return transcript


def _write_codex(home: Path, corpus: Corpus) -> None:
    session = str(uuid.uuid4())
    path = home / ".codex" / "sessions" / "2026" / "03" / "02" / f"rollout-2026-03-02T09-00-00-{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    clock = 0

    def line(kind: str, payload: dict[str, Any]) -> str:
        nonlocal clock
        clock += 1
        stamp = f"2026-03-02T09:{clock // 60:02d}:{clock % 60:02d}.000Z"
        return json.dumps({"timestamp": stamp, "type": kind, "payload": payload}, ensure_ascii=False)

    lines = [line("session_meta", {"session_id": session, "timestamp": "2026-03-02T09:00:00.000Z", "cwd": "/srv/api"})]
    for start in range(0, len(corpus), 4):
        chunk = [text for _, text, _ in corpus[start : start + 4]] + ["(none)"] * 4
        call = f"call_{start}"
        lines += [
            line(
                "response_item",
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": chunk[0]}]},
            ),
            line(
                "response_item",
                {
                    "type": "function_call",
                    "name": "shell",
                    "arguments": json.dumps({"command": ["bash", "-lc", chunk[1]]}),
                    "call_id": call,
                },
            ),
            line("response_item", {"type": "function_call_output", "call_id": call, "output": chunk[2]}),
            line(
                "response_item",
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": f"ok {chunk[3]}"}],
                },
            ),
        ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _turns_over_http(client: httpx.Client, corpus: Corpus) -> None:
    session = client.post("/api/v1/sessions/open", json={"source": "claude_code"}).json()["sessionId"]
    for start in range(0, len(corpus), 5):
        chunk = [text for _, text, _ in corpus[start : start + 5]] + ["(none)"] * 5
        turn_id = f"turn-{start}"
        started = client.post("/api/v1/turns/start", json={"sessionId": session, "turnId": turn_id, "query": chunk[0]})
        assert started.status_code == 200, started.text
        done = client.post(
            f"/api/v1/turns/{started.json().get('turnId', turn_id)}/complete",
            json={
                "sessionId": session,
                "query": chunk[0],
                "answer": f"answered with {chunk[1]}",
                "status": "failed",
                "toolCalls": [
                    {"name": "Bash", "input": {"command": chunk[2]}, "output": chunk[3], "error": chunk[4]},
                ],
            },
        )
        assert done.status_code == 200, done.text


def _remember_over_mcp(url: str, token: str, corpus: Corpus) -> None:
    async def main() -> None:
        transport = streamable_http_client(
            f"{url}/mcp", http_client=httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=120)
        )
        async with Client(transport, read_timeout_seconds=120) as client:
            for kind, text, _ in corpus:
                result = await client.call_tool(
                    "remember", {"content": f"remember: {text}", "keys": [kind, "credentials"]}
                )
                assert not result.is_error, result.content

    anyio.run(main)


def _needles(needle: str) -> set[bytes]:
    """The raw bytes, their lower-case form (FTS tokens are folded) and each long token of the secret."""
    forms = {needle, needle.lower()}
    forms |= {token.lower() for token in re.findall(r"[A-Za-z0-9]{12,}", needle)}
    return {form.encode() for form in forms}


def test_no_secret_survives_any_write_path_of_a_real_daemon(fresh_daemon: Daemon, tmp_path: Path) -> None:
    corpora = {path: make_corpus(1000 + n) for n, path in enumerate(PATHS)}
    _write_claude(fresh_daemon.home, corpora["import_claude_code"], str(tmp_path / "repo"))
    _write_codex(fresh_daemon.home, corpora["import_codex"])
    fresh_daemon.token = "corpus-token-0123"
    fresh_daemon.start()
    with fresh_daemon.client(**{"x-memmy-source": "claude_code"}) as client:
        added = []
        for kind, text, _ in corpora["memory_add"]:
            response = client.post("/api/v1/memory/add", json={"content": text, "title": f"note about {kind}"})
            assert response.status_code == 200, response.text
            added.append(response.json()["id"])
        _turns_over_http(client, corpora["turn_http"])
        for n, (_, text, _) in enumerate(corpora["search_and_feedback"]):
            if n % 2:
                assert client.post("/api/v1/memory/search", json={"query": text}).status_code == 200
            else:
                feedback = {"id": added[n], "polarity": "negative", "note": text}
                assert client.post("/api/v1/feedback", json=feedback).status_code == 200
        job = client.post("/api/v1/sources/scan", json={"sources": ["claude_code", "codex"]}).json()
        for _ in range(600):
            status = client.get(f"/api/v1/sources/scan/{job['jobId']}").json()
            if status["state"] in ("done", "stopped", "failed"):
                break
            time.sleep(0.1)
        assert status["state"] == "done" and status["totals"]["failed"] == 0, status
        assert status["totals"]["turnsAdded"] >= 40
    _remember_over_mcp(fresh_daemon.url, fresh_daemon.token, corpora["mcp_remember"])
    fresh_daemon.drain()
    store = fresh_daemon.home / ".memmy"
    # Read every file twice: while the daemon runs (the WAL and shm hold the recent writes) and after it stopped.
    blobs = {f"{p} (running)": p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert any(name.endswith("-wal (running)") for name in blobs) and any("-shm" in name for name in blobs)
    assert fresh_daemon.stop(signal.SIGTERM) == 0
    assert fresh_daemon.log_path is not None
    blobs.update({str(p): p.read_bytes() for p in [*store.rglob("*"), fresh_daemon.log_path] if p.is_file()})
    rates, leaks = {}, []
    for path, corpus in corpora.items():
        found = 0
        for kind, _, needle in corpus:
            hits = [name for name, blob in blobs.items() if any(form in blob for form in _needles(needle))]
            if hits:
                found += 1
                leaks.append(f"{path}/{kind}: {needle[:24]}… in {hits}")
        rates[path] = f"{len(corpus) - found}/{len(corpus)}"
    print("\nredaction rate per path:", json.dumps(rates), "files searched:", len(blobs))
    assert leaks == [], "\n".join(leaks)


def test_transcript_tool_output_is_redacted(isolated_home: Path, tmp_path: Path) -> None:
    corpus = make_corpus(77)
    transcript = _write_claude(isolated_home, corpus, str(tmp_path / "proj"))
    result = get_conversation({"HOME": str(isolated_home)}, transcript.session_id)
    dumped = json.dumps(result, ensure_ascii=False)
    assert result["turns"] and "[REDACTED:" in dumped
    # get_conversation returns user and assistant text (tool traffic is dropped): every secret placed there is gone.
    shown = [needle for n, (_, _, needle) in enumerate(corpus) if n % 4 in (0, 3)]
    assert [needle for needle in shown if needle in dumped] == []


def test_config_rules_apply_to_service_writes_and_reload(isolated_home: Path, embedder: Embedder) -> None:
    config_file = isolated_home / ".memmy" / "config.yaml"
    config_file.parent.mkdir(parents=True)
    config_file.write_text(
        "memmyMemory:\n  redaction:\n    extraPatterns:\n      - {name: acme_token, pattern: 'acme_[a-z0-9]{16}'}\n"
        "    allowlist: ['^sk_test_']\n",
        encoding="utf-8",
    )
    service = MemoryService.open(load_config(), embedder=embedder)
    try:
        ns = Namespace(source="claude_code")
        added = service.add_memory(
            AddMemory.from_json({"content": "ci uses acme_0123456789abcdef and sk_test_" + "a1" * 12}), ns
        )
        content = service.get_memory(added["id"])["content"]
        assert content == "ci uses [REDACTED:acme_token] and sk_test_" + "a1" * 12
        config_file.write_text("memmyMemory:\n  redaction:\n    extraPatterns: ['(']\n", encoding="utf-8")
        with pytest.raises(InvalidArgument, match="redaction.extraPatterns"):
            service.reload_config(ReloadConfig.from_json({}))
        config_file.write_text("memmyMemory: {}\n", encoding="utf-8")
        service.reload_config(ReloadConfig.from_json({}))
        again = service.add_memory(AddMemory.from_json({"content": "deploy with sk_test_" + "b2" * 12}), ns)
        assert service.get_memory(again["id"])["content"] == "deploy with [REDACTED:stripe_key]"
    finally:
        service.close()
    config_file.write_text("memmyMemory:\n  redaction:\n    allowlist: ['[']\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="redaction.allowlist"):
        MemoryService.open(load_config(), embedder=embedder)


def test_hook_state_files_never_hold_a_secret(isolated_home: Path) -> None:
    from memmy.hook.runtime import TurnStates

    corpus = make_corpus(4242)
    state = TurnStates("claude_code", "session-1", None)
    for kind, text, needle in corpus[:40]:
        state.save({"sessionId": "s", "turnId": "t", "query": f"please use {text}", "answer": text})
        saved = Path(state.latest.path).read_text(encoding="utf-8")
        assert needle not in saved and "[REDACTED:" in saved, kind
    state.save({"sessionId": "s", "turnId": "t", "query": "why is the build slow?"})
    assert state.load()["query"] == "why is the build slow?"


def test_every_built_in_kind_has_a_tested_example() -> None:
    from memmy.redact.rules import RULES
    from tests.test_redact import SECRETS

    assert {rule.kind for rule in RULES} <= set(KINDS) | set(SECRETS)
