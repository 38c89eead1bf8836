"""Importer text hygiene: a lone surrogate never drops a conversation; a failing conversation is reported,
keeps the others, fails the CLI's exit code and is retried on the next run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memmy.config import load_config
from memmy.embed import Embedder
from memmy.service import MemoryService
from memmy.service.imports import ImportOps
from memmy.sources.adapters import ADAPTERS
from tests.claude_transcripts import Transcript


@pytest.fixture
def importer_service(isolated_home: Path, embedder: Embedder) -> Iterator[MemoryService]:
    service = MemoryService.open(load_config(), embedder=embedder)
    service.indexer.load_index()
    service.imports = ImportOps(
        service.config,
        service.db,
        service.memories,
        service.sessions,
        service.indexer,
        adapters={"claude_code": ADAPTERS["claude_code"]},
        env={"HOME": str(isolated_home)},
    )
    yield service
    service.close()


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
    result = importer_service.imports.run_sync({"sources": ["claude_code"]})
    assert result["totals"]["turnsAdded"] == 1, result
    assert result["totals"]["failed"] == 0
    items = importer_service.panel.items({"pageSize": "10"})["items"]
    memory = importer_service.get_memory(items[0]["id"])
    assert "\ufffd and more" in json.dumps(memory, ensure_ascii=False)
