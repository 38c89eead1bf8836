"""A chat that ends unanswered does not hold a source's position back: the next sync reads only that chat (and
what is new), not the whole history again; once the answer arrives the turn is imported."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from memmy.commands.imports import StartScan
from memmy.config import load_config
from memmy.embed import Embedder
from memmy.service import MemoryService
from memmy.service.imports import ImportOps
from memmy.sources.adapters import ADAPTERS

ANSWERED, UNANSWERED = "11111111-aaaa-4aaa-8aaa-111111111111", "22222222-bbbb-4bbb-8bbb-222222222222"


class CursorStore:
    """Cursor's global ``state.vscdb`` with composers and bubbles, as Cursor writes them (``cursorDiskKV``)."""

    def __init__(self, home: Path) -> None:
        self.user_dir = home / ".config" / "Cursor" / "User"
        self.path = self.user_dir / "globalStorage" / "state.vscdb"
        self.path.parent.mkdir(parents=True)
        with closing(sqlite3.connect(self.path)) as conn, conn:
            conn.execute("CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
        self.bubbles: dict[str, list[dict[str, Any]]] = {}

    def say(self, composer: str, kind: int, text: str, when: str) -> None:
        """Append a bubble (1 user, 2 assistant) to a composer and write both rows."""
        bubbles = self.bubbles.setdefault(composer, [])
        bubble = {"type": kind, "bubbleId": f"{composer[:8]}-b{len(bubbles)}", "text": text, "createdAt": when}
        bubbles.append(bubble)
        headers = [{"bubbleId": b["bubbleId"], "type": b["type"]} for b in bubbles]
        data = {"composerId": composer, "createdAt": 1764748800000, "fullConversationHeadersOnly": headers}
        with closing(sqlite3.connect(self.path)) as conn, conn:
            conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (f"composerData:{composer}", json.dumps(data)))
            conn.execute(
                "INSERT INTO cursorDiskKV VALUES (?, ?)",
                (f"bubbleId:{composer}:{bubble['bubbleId']}", json.dumps(bubble)),
            )


@pytest.fixture
def cursor_service(isolated_home: Path, embedder: Embedder) -> Iterator[tuple[MemoryService, CursorStore]]:
    """An in-process service whose importer reads only Cursor's history under the isolated HOME."""
    store = CursorStore(isolated_home)
    service = MemoryService.open(load_config(), embedder=embedder)
    service.imports = ImportOps(
        service.settings,
        service.store,
        service.trace_writer,
        adapters={"cursor": ADAPTERS["cursor"]},
        env={"HOME": str(isolated_home), "MEMMY_CURSOR_USER_DIR": str(store.user_dir)},
    )
    yield service, store
    service.close()


def test_cursor_position_advances_past_a_chat_that_ends_unanswered(
    cursor_service: tuple[MemoryService, CursorStore],
) -> None:
    service, cursor = cursor_service
    cursor.say(ANSWERED, 1, "why is the nightly build red?", "2026-11-30T09:00:00.000Z")
    cursor.say(ANSWERED, 2, "The lockfile drifted; I regenerated it.", "2026-11-30T09:01:00.000Z")
    cursor.say(UNANSWERED, 1, "draft the release notes for 2.4", "2026-11-30T10:00:00.000Z")

    first = service.imports.run_sync(StartScan.from_json({}))["sources"][0]
    assert first["turnsAdded"] == 1 and first["turnsWaiting"] == 1
    assert first["watermarkAdvanced"] is True  # the unanswered chat does not hold the position back

    second = service.imports.run_sync(StartScan.from_json({}))["sources"][0]
    assert second["skipped"].get("before_watermark") == 1  # the answered chat is not read again
    assert second["turnsWaiting"] == 1 and second["turnsAdded"] == 0  # only the waiting chat is

    cursor.say(UNANSWERED, 2, "Release notes drafted in CHANGELOG.md.", "2026-11-30T10:00:00.000Z")  # same time
    third = service.imports.run_sync(StartScan.from_json({}))["sources"][0]
    assert third["turnsAdded"] == 1 and third["turnsWaiting"] == 0
    fourth = service.imports.run_sync(StartScan.from_json({}))["sources"][0]
    skipped = fourth["skipped"]  # the watermark is inclusive: the newest chat is skipped by its checkpoint
    assert skipped.get("before_watermark") == 1 and skipped.get("unchanged_conversation") == 1
    assert fourth["turnsAdded"] == 0
