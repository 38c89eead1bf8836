"""The secret corpus (>= 80 secrets of >= 30 kinds) through every write path of a real daemon, then a byte search
of every file in the store directory (database, WAL, shm, logs) and of the daemon log: nothing may survive."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from collections.abc import Callable
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
from tests.answers import must
from tests.claude_transcripts import Transcript
from tests.conftest import SUITE_BACKEND, Daemon, store_dump
from tests.secret_corpus import (
    CONTEXTS,
    CORPUS,
    KINDS,
    Case,
    benign_cases,
    leaks,
    make_corpus,
    needle_forms,
    notes,
    stored_in_process,
    structured_cases,
)

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
    headers = {"headers": {"Authorization": "Basic dXNlcjpwYXNzd29yZA==", "Accept": "application/json"}}
    assert Redactor().redact_json(headers) == {
        "headers": {"Authorization": "Basic [REDACTED:authorization_bearer]", "Accept": "application/json"}
    }
    assert redact(json.dumps(headers)).startswith('{"headers": {"Authorization": "Basic [REDACTED:')


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


def _write_rollout(home: Path, payloads: list[dict[str, Any]]) -> None:
    """A Codex rollout file (``~/.codex/sessions/...``) holding ``payloads`` as its response items, in order."""
    session = str(uuid.uuid4())
    path = home / ".codex" / "sessions" / "2026" / "03" / "02" / f"rollout-2026-03-02T09-00-00-{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)

    def line(clock: int, kind: str, payload: dict[str, Any]) -> str:
        stamp = f"2026-03-02T{9 + clock // 3600:02d}:{clock // 60 % 60:02d}:{clock % 60:02d}.000Z"
        return json.dumps({"timestamp": stamp, "type": kind, "payload": payload}, ensure_ascii=False)

    meta = {"session_id": session, "timestamp": "2026-03-02T09:00:00.000Z", "cwd": "/srv/api"}
    lines = [line(0, "session_meta", meta)]
    lines += [line(n, "response_item", payload) for n, payload in enumerate(payloads, start=1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _codex_message(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _codex_call(call: str, arguments: str, output: str) -> list[dict[str, Any]]:
    return [
        {"type": "function_call", "name": "shell", "arguments": arguments, "call_id": call},
        {"type": "function_call_output", "call_id": call, "output": output},
    ]


def _write_codex(home: Path, corpus: Corpus) -> None:
    payloads: list[dict[str, Any]] = []
    for start in range(0, len(corpus), 4):
        chunk = [text for _, text, _ in corpus[start : start + 4]] + ["(none)"] * 4
        payloads.append(_codex_message("user", chunk[0]))
        payloads += _codex_call(f"call_{start}", json.dumps({"command": ["bash", "-lc", chunk[1]]}), chunk[2])
        payloads.append(_codex_message("assistant", f"ok {chunk[3]}"))
    _write_rollout(home, payloads)


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


def _remember_over_mcp(url: str, token: str, texts: list[tuple[str, str]]) -> None:
    async def main() -> None:
        transport = streamable_http_client(
            f"{url}/mcp", http_client=httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=120)
        )
        async with Client(transport, read_timeout_seconds=120) as client:
            for kind, text in texts:
                result = await client.call_tool(
                    "remember", {"content": f"remember: {text}", "keys": [kind, "credentials"]}
                )
                assert not result.is_error, result.content

    anyio.run(main)


def _needles(needle: str) -> set[bytes]:
    """The raw bytes, their lower-case form (FTS tokens are folded) and each long token of the secret."""
    return {form.encode() for form in needle_forms(needle)}


def _store_files(daemon: Daemon) -> dict[str, bytes]:
    """Every file of the store (database, -wal, -shm, logs) read while the daemon runs and after it stopped, and
    the daemon's log."""
    store = daemon.home / ".memmy"
    # Read every file twice: while the daemon runs (the WAL and shm hold the recent writes) and after it stopped.
    blobs = {f"{p} (running)": p.read_bytes() for p in store.rglob("*") if p.is_file()}
    if SUITE_BACKEND == "postgres":  # no store file: every row of the database, as text
        blobs["database rows"] = "\n".join(store_dump(daemon.home)).encode()
    else:
        assert any(name.endswith("-wal (running)") for name in blobs) and any("-shm" in name for name in blobs)
    assert daemon.stop(signal.SIGTERM) == 0
    assert daemon.log_path is not None
    blobs.update({str(p): p.read_bytes() for p in [*store.rglob("*"), daemon.log_path] if p.is_file()})
    return blobs


def _start_with_history(daemon: Daemon, *writers: Callable[[Path], object]) -> str:
    """Write the agents' history files into the daemon's home, then start it with a token (MCP needs one)."""
    for write in writers:
        write(daemon.home)
    daemon.token = token = "corpus-token-0123"
    daemon.start()
    return token


def _scan_to_done(client: httpx.Client, turns_at_least: int) -> None:
    job = client.post("/api/v1/sources/scan", json={"sources": ["claude_code", "codex"]}).json()
    for _ in range(1200):
        status = client.get(f"/api/v1/sources/scan/{job['jobId']}").json()
        if status["state"] in ("done", "stopped", "failed"):
            break
        time.sleep(0.1)
    assert status["state"] == "done" and status["totals"]["failed"] == 0, status
    assert status["totals"]["turnsAdded"] >= turns_at_least


def test_no_secret_survives_any_write_path_of_a_real_daemon(fresh_daemon: Daemon, tmp_path: Path) -> None:
    corpora = {path: make_corpus(1000 + n) for n, path in enumerate(PATHS)}
    token = _start_with_history(
        fresh_daemon,
        lambda home: _write_claude(home, corpora["import_claude_code"], str(tmp_path / "repo")),
        lambda home: _write_codex(home, corpora["import_codex"]),
    )
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
        _scan_to_done(client, 40)
    _remember_over_mcp(fresh_daemon.url, token, [(k, text) for k, text, _ in corpora["mcp_remember"]])
    fresh_daemon.drain()
    blobs = _store_files(fresh_daemon)
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
        content = service.get_memory(must(added["id"]))["content"]
        assert content == "ci uses [REDACTED:acme_token] and sk_test_" + "a1" * 12
        config_file.write_text("memmyMemory:\n  redaction:\n    extraPatterns: ['(']\n", encoding="utf-8")
        with pytest.raises(InvalidArgument, match="redaction.extraPatterns"):
            service.reload_config(ReloadConfig.from_json({}))
        config_file.write_text("memmyMemory: {}\n", encoding="utf-8")
        service.reload_config(ReloadConfig.from_json({}))
        again = service.add_memory(AddMemory.from_json({"content": "deploy with sk_test_" + "b2" * 12}), ns)
        assert service.get_memory(must(again["id"]))["content"] == "deploy with [REDACTED:stripe_key]"
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


# -- the structured generator: every kind at line start inside tool input, in heredocs, next to its partner id ----
_NESTED = re.compile(r"\[REDACTED:[^\]]*\[")


def test_structured_generator_in_process_leaks_nothing() -> None:
    """Every case through the importer's ``redact`` of the serialised input and the turn route's ``redact_json``
    of the structured call: no form of the secret survives, markers never nest, a JSON text stays JSON, and a
    second pass changes nothing."""
    cases = structured_cases(2026)
    per_context = {context: sum(case.context == context for case in cases) for context in CONTEXTS}
    assert per_context["tool_use_input"] == per_context["function_arguments"] == per_context["heredoc"] >= 100
    assert per_context["prose_partner"] >= 16 and len({case.kind for case in cases}) == len(KINDS)
    redactor = Redactor()
    missed, broken = [], []
    for case in cases:
        stored = stored_in_process(redactor, case)
        if any(leaks(case.needle, text) for text in stored):
            missed.append(f"{case.context}/{case.kind}: {stored[0][:160]}")
        if any(_NESTED.search(text) for text in stored) or redactor.redact(stored[0]) != stored[0]:
            broken.append(stored[0][:160])
        if case.value is not None:
            json.loads(stored[0])
    for chunk, note in notes(cases, 3):  # JSON inside a text that is not JSON itself
        stored_note = redactor.redact(note)
        missed += [f"note/{case.kind}: {stored_note[:160]}" for case in chunk if leaks(case.needle, stored_note)]
    print("\nstructured cases per context:", json.dumps(per_context))
    assert missed == [], "\n".join(missed)
    assert broken == [], "\n".join(broken)


def test_benign_text_is_kept_byte_for_byte_in_every_placement() -> None:
    """No false positive: git SHAs, UUIDs, lockfile hashes, hex ids in JSON, a base64 image, port flags, command
    lines that prompt for a password; alone, at line start in tool input and function arguments, in a heredoc."""
    redactor = Redactor()
    changed = [f"note: {redactor.redact(note)}" for _, note in notes(benign_cases()) if redactor.redact(note) != note]
    for case in benign_cases():
        if redactor.redact(case.text) != case.text:
            changed.append(f"{case.context}: {redactor.redact(case.text)[:200]}")
        if case.value is not None and redactor.redact_json(case.value) != case.value:
            changed.append(f"{case.context} (structured): {redactor.redact_json(case.value)}")
    assert changed == [], "\n".join(changed)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "git clone https://x-access-token:ghp_" + "a1B2c3D4e5" * 4 + "@github.com/acme/app.git",
            "git clone https://x-access-token:[REDACTED:github_token]@github.com/acme/app.git",
        ),
        (
            "https://ghp_" + "a1B2c3D4e5" * 4 + ":x-oauth-basic@github.com/acme/app",
            "https://[REDACTED:url_credentials]@github.com/acme/app",
        ),
        ("postgres://app:[REDACTED:password]@db:5432/main", "postgres://app:[REDACTED:password]@db:5432/main"),
        (
            "the key is AKIAIOSFODNN7EXAMPLE with secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "the key is [REDACTED:aws_access_key] with secret [REDACTED:aws_secret_key]",
        ),
    ],
)
def test_markers_never_nest(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


def test_json_text_is_redacted_decoded_and_stays_json() -> None:
    """A serialised tool input is redacted on its decoded strings (keys too, ``\\u`` escapes read) and re-encoded
    in its own style; a text with an escaped line break but no JSON around it still gets a line boundary."""
    key = "ghp_" + "a1B2c3D4e5" * 4
    compact = json.dumps({"command": f"cat <<EOF\n{key}\nEOF"}, separators=(",", ":"))
    assert redact(compact) == '{"command":"cat <<EOF\\n[REDACTED:github_token]\\nEOF"}'
    escaped = json.dumps({"cmd": "echo 数据库密码是hunter22x"})  # ensure_ascii: 密码 is \u5bc6\u7801 on the wire
    assert "hunter22x" not in redact(escaped) and "\\u5bc6\\u7801" in redact(escaped)
    assert redact(json.dumps({key: 1})) == '{"[REDACTED:github_token]": 1}'
    nested = {"function": {"arguments": json.dumps({"script": f"set -e\nexport X=1\n{key}"})}}
    assert key not in json.dumps(Redactor().redact_json(nested))
    assert redact(f"echo {compact[:-5]}") == 'echo {"command":"cat <<EOF\\n[REDACTED:github_token]\\n'


# -- the structured generator through a real daemon -----------------------------------------------------------------
STRUCTURED_PATHS = ("turn_http", "import_claude_code", "import_codex", "memory_add", "mcp_remember", "agent_capture")


def _tool_call(case: Case) -> dict[str, Any]:
    """The call as a host sends it at turn completion: OpenAI's shape as is, Claude Code's ``tool_use`` input."""
    if case.context == "function_arguments" and case.value is not None:
        return {**case.value, "output": "deployed"}
    return {"name": "Bash", "input": case.value, "output": "written"}


def _chunks(cases: list[Case], size: int) -> list[list[Case]]:
    return [cases[start : start + size] for start in range(0, len(cases), size)]


def _plain_texts(cases: list[Case]) -> list[str]:
    return list(dict.fromkeys(case.text for case in cases if case.value is None))


def _structured_turns(client: httpx.Client, cases: list[Case]) -> None:
    session = client.post("/api/v1/sessions/open", json={"source": "claude_code"}).json()["sessionId"]
    for n, chunk in enumerate(_chunks(cases, 8)):
        texts = _plain_texts(chunk) or ["(no text)"]
        started = client.post("/api/v1/turns/start", json={"sessionId": session, "turnId": f"s-{n}", "query": texts[0]})
        assert started.status_code == 200, started.text
        body = {
            "sessionId": session,
            "query": texts[0],
            "answer": "\n\n".join(texts[1:]) or "done",
            "status": "succeeded",
            "toolCalls": [_tool_call(case) for case in chunk if case.value is not None],
        }
        done = client.post(f"/api/v1/turns/{started.json().get('turnId', f's-{n}')}/complete", json=body)
        assert done.status_code == 200, done.text


def _structured_claude(home: Path, cases: list[Case], cwd: str) -> None:
    """A Claude Code transcript: each tool input as a ``tool_use`` (OpenAI arguments decoded, as Claude sends
    them), each plain text as a user or assistant message."""
    transcript = Transcript(home, cwd)
    for n, chunk in enumerate(_chunks(cases, 6)):
        transcript.user(f"step {n}: " + "\n".join(_plain_texts(chunk)[:1] or ["set up the service"]))
        for case in chunk:
            if case.value is not None:
                tool_input = json.loads(case.text)
                transcript.tool("Write" if "file_path" in tool_input else "Bash", tool_input, "ok")
        transcript.assistant("\n\n".join(_plain_texts(chunk)[1:]) or f"done with step {n}")
    transcript.write()


def _structured_codex(home: Path, cases: list[Case]) -> None:
    """A Codex rollout: each tool input as a ``function_call``'s ``arguments`` string, plain texts as messages."""
    payloads: list[dict[str, Any]] = []
    for n, chunk in enumerate(_chunks(cases, 6)):
        texts = _plain_texts(chunk)
        payloads.append(_codex_message("user", texts[0] if texts else f"step {n}"))
        for m, case in enumerate(chunk):
            if case.value is not None:
                payloads += _codex_call(f"call_{n}_{m}", case.text, "ok")
        payloads.append(_codex_message("assistant", "\n\n".join(texts[1:]) or "ok"))
    _write_rollout(home, payloads)


def _agent_captures(url: str, token: str, cases: list[Case]) -> None:
    """The agent's own capture (``memmy agent``'s MemoryBridge): tool inputs as the loop parses them."""
    import asyncio

    from memmy.agent.memory import MemoryBridge
    from memmy.cli.client import ClientSettings

    async def main() -> None:
        settings = ClientSettings(url=url, token=token, user_id=None, source="memmy", workspace_path=None)
        memory = MemoryBridge(settings, timeout_s=120)
        try:
            for n, chunk in enumerate(_chunks(cases, 8)):
                texts = _plain_texts(chunk) or [f"agent step {n}"]
                recall = await memory.start_turn(f"cli:secrets-{n}", texts[0])
                assert recall is not None, memory.error
                calls = [
                    {"name": "shell", "input": json.loads(case.text), "output": "ok"}
                    for case in chunk
                    if case.value is not None
                ]
                future = memory.capture_turn(recall, "\n\n".join(texts[1:]) or "done", "succeeded", calls)
                assert future is not None and await asyncio.wrap_future(future)
            assert await memory.flush()
        finally:
            await memory.aclose()

    asyncio.run(main())


def test_structured_generator_leaks_nothing_through_a_real_daemon(fresh_daemon: Daemon, tmp_path: Path) -> None:
    """Every kind at line start in tool input (Claude Code ``tool_use``, OpenAI ``function.arguments``), in
    heredocs and next to its partner id, through turn completion, both importers, memory add, MCP ``remember``
    and the agent's own capture: no byte of any secret in the database, its -wal and -shm, or the logs."""
    cases = {path: structured_cases(3000 + n) for n, path in enumerate(STRUCTURED_PATHS)}
    token = _start_with_history(
        fresh_daemon,
        lambda home: _structured_claude(home, cases["import_claude_code"], str(tmp_path / "repo")),
        lambda home: _structured_codex(home, cases["import_codex"]),
    )
    with fresh_daemon.client(**{"x-memmy-source": "claude_code"}) as client:
        for _, content in notes(cases["memory_add"]):
            response = client.post("/api/v1/memory/add", json={"content": content})
            assert response.status_code == 200, response.text
        _structured_turns(client, cases["turn_http"])
        _scan_to_done(client, 80)
    remembered = [(chunk[0].kind, note) for chunk, note in notes(cases["mcp_remember"])]
    _remember_over_mcp(fresh_daemon.url, token, remembered)
    _agent_captures(fresh_daemon.url, token, cases["agent_capture"])
    with httpx.Client(base_url=fresh_daemon.url, headers={"authorization": f"Bearer {token}"}) as slow:
        for _ in range(200):  # embed the backlog in small batches (one big one outlasts a client timeout)
            slow.post("/api/v1/worker/run", json={"limit": 64}, timeout=300).raise_for_status()
            if slow.get("/api/v1/health").json()["embeddingQueue"]["pending"] == 0:
                break
    fresh_daemon.drain()
    blobs = _store_files(fresh_daemon)
    leaked, counts = [], {}
    for path, path_cases in cases.items():
        counts[path] = len(path_cases)
        for case in path_cases:
            forms = {form.encode() for form in needle_forms(case.needle)}
            hits = [name for name, blob in blobs.items() if any(form in blob for form in forms)]
            if hits:
                leaked.append(f"{path}/{case.context}/{case.kind}: {case.needle[:24]}… in {hits}")
    print("\nstructured cases per path:", json.dumps(counts), "files searched:", len(blobs))
    assert leaked == [], "\n".join(leaked)
