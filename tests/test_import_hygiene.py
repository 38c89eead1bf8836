"""Importer text hygiene: a lone surrogate never drops a conversation; a failing conversation is reported,
keeps the others, fails the CLI's exit code and is retried on the next run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.commands.imports import StartScan
from memmy.commands.panel import PanelItems
from memmy.service import MemoryService
from tests.claude_transcripts import Transcript
from tests.conftest import Daemon


def test_lone_surrogate_in_a_transcript_keeps_the_conversation(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    transcript = Transcript(isolated_home, str(tmp_path))
    transcript.user("an emoji cut in half: \ud83d and more")
    transcript.assistant("noted \udc00 the broken half")
    # Node's JSON.stringify writes a lone surrogate as a \uXXXX escape, as json.dumps does with ensure_ascii.
    transcript.path.parent.mkdir(parents=True, exist_ok=True)
    transcript.path.write_text("".join(json.dumps(line) + "\n" for line in transcript.lines), encoding="utf-8")
    assert "\\ud83d" in transcript.path.read_text(encoding="utf-8")
    result = importer_service.imports.run_sync(StartScan.from_json({"sources": ["claude_code"]}))
    assert result["totals"]["turnsAdded"] == 1, result
    assert result["totals"]["failed"] == 0
    items = importer_service.panel.items(PanelItems.from_json({"pageSize": "10"}))["items"]
    memory = importer_service.get_memory(items[0]["id"])
    assert "\ufffd and more" in json.dumps(memory, ensure_ascii=False)


def test_a_failing_conversation_keeps_the_others_fails_the_exit_code_and_is_retried(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = Transcript(isolated_home, str(tmp_path / "good"))
    good.user("the good conversation asks about the CI cache")
    good.assistant("the CI cache key now includes the lockfile hash")
    good.write()
    bad = Transcript(isolated_home, str(tmp_path / "bad"))
    bad.user("POISON conversation that breaks grouping")
    bad.assistant("answer of the poisoned conversation")
    bad.write()

    from memmy.sources import reading as importer_module  # where conversations are grouped
    from memmy.sources.imported_turns import group_turns as real_group

    def group_or_fail(conversation: object) -> object:
        if any("POISON" in m.content for m in conversation.messages):  # type: ignore[attr-defined]
            raise RuntimeError("grouping exploded")
        return real_group(conversation)  # type: ignore[arg-type]

    monkeypatch.setattr(importer_module, "group_turns", group_or_fail)
    first = importer_service.imports.run_sync(StartScan.from_json({"sources": ["claude_code"]}))
    assert first["totals"]["turnsAdded"] == 1
    assert first["totals"]["failed"] == 1
    part = first["sources"][0]
    assert part["watermarkAdvanced"] is False
    assert any("grouping exploded" in e and str(bad.path) in e for e in part["errors"])

    monkeypatch.setattr(importer_module, "group_turns", real_group)
    second = importer_service.imports.run_sync(StartScan.from_json({"sources": ["claude_code"]}))
    assert second["totals"]["turnsAdded"] == 1 and second["totals"]["failed"] == 0
    assert second["sources"][0]["watermarkAdvanced"] is True
    summaries = {i["summary"] for i in importer_service.panel.items(PanelItems.from_json({"pageSize": "10"}))["items"]}
    assert any("POISON" in s for s in summaries) and any("CI cache" in s for s in summaries)


def test_cli_reports_a_failed_file_in_the_table_and_exit_code(fresh_daemon: Daemon) -> None:
    broken = fresh_daemon.home / ".hermes" / "sessions" / "20260301_unreadable.jsonl"
    broken.mkdir(parents=True)  # opening it fails the way an unreadable session file does
    fresh_daemon.start()
    runner = CliRunner()
    auth = ["--url", fresh_daemon.url, "--token", str(fresh_daemon.token)]
    result = runner.invoke(cli, [*auth, "import", "--source", "hermes"])
    assert result.exit_code == 1, result.output
    words = " ".join(result.output.split())
    assert "1 failed)" in words and "20260301_unreadable.jsonl: Is a directory" in words
    broken.rmdir()
    again = runner.invoke(cli, [*auth, "--json", "import", "--source", "hermes"])
    assert again.exit_code == 0, again.output
    status = json.loads(again.output[again.output.index("{") :])
    assert status["totals"]["failed"] == 0 and status["sources"][0]["watermarkAdvanced"] is True
