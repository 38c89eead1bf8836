"""The history reader process: the same import as in-process, its failures recorded like in-process ones, fallbacks."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memmy.commands.imports import StartScan
from memmy.redact import DEFAULT_REDACTOR, Redactor
from memmy.service import MemoryService
from memmy.service.imports import ImportOps
from memmy.sources.adapters import ADAPTERS
from memmy.sources.model import Conversation, ScanStats, SourceAdapter
from memmy.sources.reading import (
    PROCESS_MIN_BYTES,
    PreparationError,
    ReaderMode,
    SkipRule,
    choose_mode,
    history_bytes,
    idle_cores,
    read_conversations,
)
from tests.claude_transcripts import Transcript
from tests.conftest import ServiceFactory

SECRET = "sk-ant-api03-" + "Q7x9" * 22


def write_history(home: Path, repo: Path, conversations: int = 3, turns: int = 4, waiting: bool = True) -> None:
    """Real-format Claude Code transcripts: tool calls, a secret, Chinese and an emoji, one unanswered last turn."""
    for c in range(conversations):
        transcript = Transcript(home, str(repo))
        for i in range(turns):
            transcript.user(f"conversation {c} step {i}: fix the flaky test {i} 修复测试 🙂")
            transcript.tool("Bash", {"command": f"pytest -k t{i}"}, f"FAILED t{i} token={SECRET}")
            transcript.assistant(f"Fixed test {i} in conversation {c}.")
        if waiting:
            transcript.user(f"conversation {c}: and the last one?")
        transcript.write()


def importer(service: MemoryService, home: Path, reader: ReaderMode, adapter: SourceAdapter | None = None) -> ImportOps:
    source = adapter or ADAPTERS["claude_code"]
    ops = ImportOps(
        service.settings, service.store, service.trace_writer, adapters={source.name: source}, env={"HOME": str(home)}
    )
    ops.reader = reader
    return ops


def stored(service: MemoryService) -> list[tuple[str, str, str]]:
    rows = service.store.db.query("SELECT id, memory_value, properties_json FROM memories ORDER BY id")
    return [(r["id"], r["memory_value"], r["properties_json"]) for r in rows]


def test_a_reader_process_imports_exactly_what_the_importer_reads_itself(
    make_service: ServiceFactory, isolated_home: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_history(isolated_home, repo)
    results, stores = {}, {}
    for reader in ("inline", "process"):
        service = make_service()
        job = importer(service, isolated_home, reader).run_sync(StartScan.from_json({"mode": "full", "confirm": True}))
        results[reader], stores[reader] = [dict(source) for source in job["sources"]], stored(service)
    assert results["process"][0]["turnsAdded"] == 12 and results["process"][0]["turnsWaiting"] == 3
    for part in ("inline", "process"):  # everything but the job's own times
        for source in results[part]:
            source.pop("startedAt", None), source.pop("finishedAt", None)
    assert results["process"] == results["inline"]
    assert stores["process"] == stores["inline"] and len(stores["process"]) == 12
    assert results["process"][0]["redacted"]  # the secret was found in the reader process...
    assert not any(SECRET in value or SECRET in props for _, value, props in stores["process"])  # ...and removed
    assert all("修复测试 🙂" in value for _, value, _ in stores["process"])


def test_a_second_sync_through_the_process_skips_unchanged_conversations(
    make_service: ServiceFactory, isolated_home: Path, tmp_path: Path
) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=2, waiting=False)
    service = make_service()
    ops = importer(service, isolated_home, "process")
    first = ops.run_sync(StartScan.from_json({"mode": "full", "confirm": True}))["totals"]
    newer = ops.run_sync(StartScan.from_json({}))["totals"]  # by the watermark (inclusive: the newest by checkpoint)
    assert newer["turnsAdded"] == 0 and sum(newer["skipped"].values()) == 2
    assert set(newer["skipped"]) <= {"before_watermark", "unchanged_conversation"}
    again = ops.run_sync(StartScan.from_json({"since": "2000-01-01T00:00:00Z"}))["totals"]  # by their checkpoints
    assert first["turnsAdded"] == 8 and again["turnsAdded"] == 0 and again["failed"] == 0
    assert again["skipped"] == {"unchanged_conversation": 2} and again["messagesScanned"] == first["messagesScanned"]


def test_the_process_sends_a_conversation_the_importer_skips_without_its_messages(
    isolated_home: Path, tmp_path: Path
) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=2)
    env = {"HOME": str(isolated_home)}
    first = list(read_conversations(ADAPTERS["claude_code"], env, ScanStats(), DEFAULT_REDACTOR, "inline"))
    known = {first[0].conversation.conversation_id: first[0].checkpoint}
    skip = SkipRule(known)
    reads = list(read_conversations(ADAPTERS["claude_code"], env, ScanStats(), DEFAULT_REDACTOR, "process", None, skip))
    by_id = {r.conversation.conversation_id: r for r in reads}
    unchanged, changed = by_id[first[0].conversation.conversation_id], by_id[first[1].conversation.conversation_id]
    assert unchanged.light and unchanged.conversation.messages == []
    assert unchanged.message_count == len(first[0].conversation.messages) > 0
    assert unchanged.checkpoint == first[0].checkpoint and unchanged.last_created_at == first[0].last_created_at
    with pytest.raises(PreparationError):
        unchanged.turns(DEFAULT_REDACTOR)
    assert not changed.light and len(changed.turns(DEFAULT_REDACTOR).turns) == 5
    older_than_watermark = SkipRule({}, since="9999")
    assert older_than_watermark.skips(changed)
    waiting = SkipRule({}, since="9999", waiting=frozenset({changed.conversation.conversation_id}))
    assert not waiting.skips(changed)  # a conversation waiting for its answer is read whatever the watermark


class BrokenAdapter:
    """Yields one real conversation, then its reading fails (an unreadable disk) or its process dies."""

    name = "claude_code"

    def __init__(self, how: str) -> None:
        self.how = how

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        return ADAPTERS["claude_code"].roots(env)

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        for conversation in ADAPTERS["claude_code"].conversations(env, stats):
            yield conversation
            if self.how == "raise":
                raise OSError(5, "Input/output error")
            if self.how == "bad_time":  # a conversation the adapter got wrong: its times cannot be compared
                first, second = conversation.messages[:2]
                timeless = [replace(first, created_at=None), second]  # type: ignore[arg-type]
                yield replace(conversation, conversation_id="timeless", messages=timeless, origin="timeless.jsonl")
            if self.how == "poison":  # a conversation the adapter got wrong: grouping it fails
                broken = replace(conversation.messages[0], content=123)  # type: ignore[arg-type]
                yield replace(conversation, conversation_id="poisoned", messages=[broken], origin="poisoned.jsonl")
            if self.how == "die" and os.environ.get("MEMMY_READER_TEST_CHILD") == "1":
                os._exit(9)  # the reader process is killed (out of memory) after its first conversation


@pytest.mark.parametrize("reader", ["inline", "process"])
def test_an_adapter_error_in_either_mode_is_recorded_and_holds_the_watermark(
    make_service: ServiceFactory, isolated_home: Path, tmp_path: Path, reader: ReaderMode
) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=2)
    service = make_service()
    job = importer(service, isolated_home, reader, BrokenAdapter("raise")).run_sync(
        StartScan.from_json({"mode": "full", "confirm": True})
    )
    part = job["sources"][0]
    assert part["state"] == "error" and part["errors"] == ["OSError: [Errno 5] Input/output error"]
    assert part["turnsAdded"] == 4 and part["watermarkAdvanced"] is False  # the first conversation is kept


@pytest.mark.parametrize("reader", ["inline", "process"])
def test_a_conversation_that_fails_to_group_costs_only_itself_in_either_mode(
    make_service: ServiceFactory, isolated_home: Path, tmp_path: Path, reader: ReaderMode
) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=2)
    service = make_service()
    job = importer(service, isolated_home, reader, BrokenAdapter("poison")).run_sync(
        StartScan.from_json({"mode": "full", "confirm": True})
    )
    part = job["sources"][0]
    assert part["turnsAdded"] == 8 and part["failed"] == 2 and part["watermarkAdvanced"] is False
    assert len(part["errors"]) == 2 and all(e.startswith("poisoned.jsonl: ") for e in part["errors"])
    assert all("TypeError" in e for e in part["errors"])


@pytest.mark.parametrize("reader", ["inline", "process"])
def test_a_conversation_that_cannot_even_be_read_costs_only_itself_in_either_mode(
    make_service: ServiceFactory, isolated_home: Path, tmp_path: Path, reader: ReaderMode
) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=2, waiting=False)
    service = make_service()
    ops = importer(service, isolated_home, reader, BrokenAdapter("bad_time"))
    part = ops.run_sync(StartScan.from_json({"mode": "full", "confirm": True}))["sources"][0]
    assert part["failed"] == 2 and part["watermarkAdvanced"] is False and part["turnsAdded"] == 8
    assert all(e.startswith("timeless.jsonl: PreparationError: TypeError: ") for e in part["errors"])
    later = ops.run_sync(StartScan.from_json({"since": "2999-01-01T00:00:00Z"}))["sources"][0]
    assert later["skipped"] == {"before_watermark": 2} and later["failed"] == 2  # a failure is never skipped


def test_a_killed_reader_process_is_an_error_and_loses_nothing_written(
    make_service: ServiceFactory, isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=2)
    monkeypatch.setenv("MEMMY_READER_TEST_CHILD", "1")  # only the child dies; it inherits the environment
    service = make_service()
    ops = importer(service, isolated_home, "process", BrokenAdapter("die"))
    part = ops.run_sync(StartScan.from_json({"mode": "full", "confirm": True}))["sources"][0]
    assert part["state"] == "error" and part["watermarkAdvanced"] is False
    assert part["errors"][0].startswith("ReaderProcessError: the history reader process ended before finishing")
    assert "exit code 9" in part["errors"][0]
    assert part["turnsAdded"] == 4 and len(stored(service)) == 4
    monkeypatch.delenv("MEMMY_READER_TEST_CHILD")
    healed = importer(service, isolated_home, "process", ADAPTERS["claude_code"]).run_sync(StartScan.from_json({}))
    assert healed["totals"]["turnsAdded"] == 4 and len(stored(service)) == 8  # the next sync finishes the job


def test_an_adapter_a_process_cannot_be_given_is_read_in_process(isolated_home: Path, tmp_path: Path) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=1)

    class LocalAdapter(BrokenAdapter):  # defined in a function: it does not pickle
        pass

    adapter = LocalAdapter("none")
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(adapter)
    stats = ScanStats()
    reads = list(read_conversations(adapter, {"HOME": str(isolated_home)}, stats, DEFAULT_REDACTOR, "process"))
    assert len(reads) == 1 and stats.files == 1 and len(reads[0].turns(DEFAULT_REDACTOR).turns) == 5


def test_a_configured_redactor_reaches_the_reader_process_whole() -> None:
    redactor = Redactor([("ticket", r"TICKET-[0-9]{6}")], allowlist=[r"sk-ant-api03-EXAMPLE"])
    copy: Redactor = pickle.loads(pickle.dumps(redactor))
    text = f"see TICKET-123456 and {SECRET}; the docs' sk-ant-api03-EXAMPLE stays"
    assert copy.redact(text) == redactor.redact(text)
    assert "TICKET-123456" not in copy.redact(text) and "sk-ant-api03-EXAMPLE" in copy.redact(text)


def test_auto_uses_a_process_only_for_a_large_history(isolated_home: Path, tmp_path: Path) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=1)
    adapter = ADAPTERS["claude_code"]
    env = {"HOME": str(isolated_home)}
    small = history_bytes(adapter.roots(env))
    assert 0 < small < PROCESS_MIN_BYTES
    assert choose_mode(adapter, env) == "inline" and choose_mode(adapter, env, "process") == "process"
    filler = isolated_home / ".claude" / "projects" / "-big" / "big.jsonl"
    filler.parent.mkdir(parents=True)
    filler.write_bytes(b"x" * PROCESS_MIN_BYTES)
    assert history_bytes(adapter.roots(env)) >= PROCESS_MIN_BYTES
    assert choose_mode(adapter, env) == ("process" if idle_cores() >= 1 else "inline")
    with pytest.MonkeyPatch.context() as patch:  # a busy machine: the second core would not be free
        patch.setattr(os, "getloadavg", lambda: (float(os.cpu_count() or 1), 0.0, 0.0))
        assert idle_cores() < 1 and choose_mode(adapter, env) == "inline"
        patch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert choose_mode(adapter, env) == ("process" if (os.cpu_count() or 1) >= 2 else "inline")


def test_closing_the_reading_early_stops_the_process(isolated_home: Path, tmp_path: Path) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=3, turns=200)  # more than a pipe holds: it waits
    reads = read_conversations(
        ADAPTERS["claude_code"], {"HOME": str(isolated_home)}, ScanStats(), DEFAULT_REDACTOR, "process"
    )
    first: Any = next(reads)
    assert first.grouped is not None  # prepared in the process
    assert len(reader_processes()) == 1
    reads.close()
    assert reader_processes() == [] and next(reads, None) is None


def reader_processes() -> list[int]:
    """This process's living reader processes (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        state = stat.rsplit(")", 1)[1].split()[0]
        if parent == os.getpid() and state != "Z" and b"memmy.sources.reader_process" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_reader_process_that_cannot_start_leaves_the_reading_in_process(
    isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_history(isolated_home, tmp_path / "repo", conversations=2)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    stats = ScanStats()
    env = {"HOME": str(isolated_home)}
    reads = list(read_conversations(ADAPTERS["claude_code"], env, stats, DEFAULT_REDACTOR, "process"))
    assert len(reads) == 2 and stats.files == 2
    assert all(r.grouped is None and len(r.turns(DEFAULT_REDACTOR).turns) == 5 for r in reads)  # grouped here
