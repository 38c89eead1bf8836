"""Import watermarks start at the first conversation actually read; history that appears after a sync with older
timestamps (a restored ``~/.claude``, an agent installed later) is found, said so and imported once."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.commands.answers import ImportJob
from memmy.commands.imports import StartScan
from memmy.service import MemoryService
from tests.claude_transcripts import Transcript
from tests.conftest import Daemon


def sync(service: MemoryService, **body: object) -> ImportJob:
    return service.imports.run_sync(StartScan.from_json({"sources": ["claude_code"], **body}))


def conversation(home: Path, cwd: Path, topic: str, turns: int, *, now: bool = False) -> Transcript:
    """A Claude Code session (dated March 2026 unless ``now``)."""
    transcript = Transcript(home, str(cwd))
    if now:
        transcript.jump_to_now()
    for i in range(turns):
        transcript.user(f"{topic} question {i}: why does the {topic} job fail?")
        transcript.assistant(f"The {topic} job {i} failed because its cache was stale; cleared it.")
    transcript.write()
    return transcript


def test_a_source_with_nothing_gets_no_cursor_so_older_history_found_later_comes_in(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    empty = sync(importer_service)  # `init`, then `import`, before Claude Code wrote any history
    assert empty["totals"]["turnsAdded"] == 0 and empty["sources"][0]["watermarkAdvanced"] is True
    watermark = importer_service.store.imports.watermark("claude_code")
    assert watermark is not None and watermark.cursor is None  # not "now"

    conversation(isolated_home, tmp_path / "repo", "billing", 3)  # history dated before that sync appears
    later = sync(importer_service)
    assert later["totals"]["turnsAdded"] == 3 and not later["totals"]["skipped"].get("before_watermark")
    assert sync(importer_service)["totals"]["turnsAdded"] == 0


def test_restored_older_history_is_named_and_imported_once(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    conversation(isolated_home, tmp_path / "a", "deploy", 2, now=True)
    first = sync(importer_service)
    assert first["totals"]["turnsAdded"] == 2

    conversation(isolated_home, tmp_path / "b", "search", 3)  # a restored folder: older than the watermark
    restored = sync(importer_service)
    assert restored["totals"]["turnsAdded"] == 3 and restored["totals"]["lateConversations"] == 1
    again = sync(importer_service)
    assert again["totals"]["turnsAdded"] == 0 and again["totals"]["lateConversations"] == 0
    deep = sync(importer_service, mode="full", confirm=True)
    assert deep["totals"]["turnsAdded"] == 0 and deep["totals"]["turnsExisting"] == 5  # nothing imported twice
    since = sync(importer_service, since="2030-01-01T00:00:00Z")  # a --since the user gave still skips
    assert since["totals"]["lateConversations"] == 0 and since["totals"]["skipped"]["before_watermark"] == 2


def test_cli_says_it_found_older_history(fresh_daemon: Daemon, tmp_path: Path) -> None:
    conversation(fresh_daemon.home, tmp_path / "a", "deploy", 1, now=True)
    fresh_daemon.start()
    base = ["--url", fresh_daemon.url, "--token", str(fresh_daemon.token), "import", "--source", "claude_code"]
    assert CliRunner().invoke(cli, base).exit_code == 0
    conversation(fresh_daemon.home, tmp_path / "b", "search", 2)
    result = CliRunner().invoke(cli, base)
    assert result.exit_code == 0, result.output
    assert "Added 2 turns" in result.output
    assert "Found 1 conversation(s) older than the last sync that were never read before" in result.output
