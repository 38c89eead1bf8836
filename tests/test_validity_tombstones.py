"""Validity time (correct -> version chain, freshness decay) and forgetting that sticks (tombstones on every
write path: memory/add, turn capture, history import, remember; restore lets the value back)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.commands.governance import ListTombstones, RestoreTombstone
from memmy.commands.imports import StartScan
from memmy.commands.memory import AddMemory, SearchMemory
from memmy.commands.turn_requests import CompleteTurn, OpenSession
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.recall.freshness import freshness_factor, validity_payload
from memmy.service import MemoryService
from tests.answers import must
from tests.claude_transcripts import Transcript
from tests.conftest import Daemon

NS = Namespace(source="mcp")


def call(service: MemoryService, op: str, **body: Any) -> Any:
    return service.keys_call(key_args(op, body), NS)


def memory_count(service: MemoryService) -> int:
    row = service.db.query_one("SELECT COUNT(*) FROM memories")
    return int(row[0]) if row else 0


def ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_correct_closes_the_old_version_and_keeps_the_chain(service: MemoryService) -> None:
    first = call(service, "remember", content="The user lives in Seoul", keys=["home", "Seoul"], decay_profile="stable")
    second = call(service, "correct", memory_id=first["saved"], content="The user moved to Busan")
    assert second["superseded"] == first["saved"]
    third = call(
        service, "correct", memory_id=second["new_id"], content="The user moved to Jeju island", keys=["home", "Jeju"]
    )
    service.indexer.drain()
    with pytest.raises(Exception, match="already corrected"):
        call(service, "correct", memory_id=first["saved"], content="again")

    recalled = call(service, "recall", query="home")
    assert recalled["memories"][0]["id"] == third["new_id"]
    handles = call(service, "read_key", key_id=recalled["keys"][0]["key_id"])["memories"]
    assert [h["id"] for h in handles] == [third["new_id"]]  # superseded versions are not recalled
    assert call(service, "recall", query="Seoul")["status"] == "no_match"
    searched = service.search(
        SearchMemory.from_json({"query": "where does the user live Seoul Busan Jeju", "scope": "pooled"}), NS
    )
    assert searched["sourceMemoryIds"] == [third["new_id"]]

    chain = service.memory_history(first["saved"])
    assert [c["id"] for c in chain["chain"]] == [first["saved"], second["new_id"], third["new_id"]]
    assert chain["currentId"] == third["new_id"] and [c["current"] for c in chain["chain"]] == [False, False, True]
    assert chain["chain"][0]["validTo"] and chain["chain"][0]["supersededBy"] == second["new_id"]
    assert chain["chain"][1]["validFrom"] >= chain["chain"][0]["validFrom"]
    assert service.memory_history(third["new_id"])["length"] == 3  # the same chain from any version
    middle = service.get_memory(second["new_id"])
    assert middle["supersededBy"] == third["new_id"] and middle["validity"]["decay_profile"] == "stable"
    kept = call(service, "read_memory", memory_id=second["new_id"])  # read by id still works, marked old
    assert kept["current"] is False and {k["concept"] for k in kept["connected_keys"]} == {"home", "Seoul"}


def test_freshness_decays_ranking_and_confirmation_refreshes_it(service: MemoryService) -> None:
    fresh = call(
        service,
        "remember",
        content="The team standup is at 10:00 in room Ada",
        keys=["standup"],
        decay_profile="transient",
    )
    old = call(
        service,
        "remember",
        content="The team standup is at 09:30 in room Ada",
        keys=["standup"],
        decay_profile="transient",
    )
    memory = service.memories.get(old["saved"])
    assert memory is not None
    before = memory.snapshot()
    memory.properties["validity"]["lastConfirmedAt"] = ago(30)
    service.memories.update(memory, before, "test-age", "test")
    service.indexer.drain()
    payload = validity_payload(memory)
    assert payload["status"] == "stale" and payload["verification_required"] and payload["age_days"] >= 29.9
    assert freshness_factor(memory) == pytest.approx(0.2 + 0.8 * 0.5 ** (30 / 7), abs=1e-3)

    def scores() -> dict[str, float]:
        hits = service.search(SearchMemory.from_json({"query": "when is the team standup", "scope": "pooled"}), NS)[
            "hits"
        ]
        return {h["id"]: h["score"] for h in hits}

    aged = scores()
    assert aged[fresh["saved"]] > 3 * aged[old["saved"]]
    handles = call(service, "read_key", key_id=call(service, "recall", query="standup")["keys"][0]["key_id"])
    assert handles["memories"][0]["id"] == fresh["saved"]
    read = call(service, "read_memory", memory_id=old["saved"])
    assert read["validity"]["status"] == "stale"  # a read never refreshes
    confirmed = call(service, "confirm_memory", memory_id=old["saved"], evidence="user confirmed the new time")
    assert confirmed["validity"]["status"] == "fresh" and confirmed["confirmation_count"] == 1
    assert scores()[old["saved"]] == pytest.approx(aged[fresh["saved"]], rel=0.2)
    plain = service.add_memory(AddMemory.from_json({"content": "A plain memory without a decay profile"}), NS)
    detail = service.get_memory(must(plain["id"]))
    assert detail["validity"]["decay_profile"] == "standard" and detail["item"]["validity"]["status"] == "fresh"


def test_forgotten_content_is_refused_by_memory_add_and_remember(service: MemoryService) -> None:
    added = service.add_memory(AddMemory.from_json({"content": "The staging password rotates weekly"}), NS)
    forgot = call(service, "forget", memory_id=added["id"], reason="wrong")
    deleted = {"tombstoneId": forgot["tombstone_id"]}
    assert deleted["tombstoneId"].startswith("tomb_")
    count = memory_count(service)
    again = service.add_memory(AddMemory.from_json({"content": "the staging  password rotates WEEKLY"}), NS)
    assert again["tombstoned"] is True and again["id"] is None and again["tombstoneId"] == deleted["tombstoneId"]
    remembered = call(service, "remember", content="The staging password rotates weekly", keys=["staging"])
    assert remembered == {**remembered, "saved": None, "tombstoned": True}
    assert memory_count(service) == count and call(service, "memory_stats")["keys"] == 0  # nothing written
    listed = service.list_tombstones(ListTombstones.from_json({}))
    assert listed["tombstones"][0]["id"] == deleted["tombstoneId"]
    assert set(listed["tombstones"][0]) >= {"id", "contentHash", "memoryKey", "reason", "createdAt"}
    assert listed["tombstones"][0]["reason"] == "wrong"
    service.restore_tombstone(deleted["tombstoneId"], RestoreTombstone.from_json({}), NS)
    back = service.add_memory(AddMemory.from_json({"content": "The staging password rotates weekly"}), NS)
    assert back["id"] and not back.get("tombstoned")

    kept = call(service, "remember", content="Mina owns the billing service", keys=["Mina", "billing"])
    gone = call(service, "forget", memory_id=kept["saved"], reason="not true")
    assert gone["deleted"] is True and gone["tombstone_id"]
    assert call(service, "recall", query="billing")["status"] == "no_match"
    assert call(service, "forget", memory_id=kept["saved"])["tombstone_id"] == gone["tombstone_id"]  # idempotent
    with pytest.raises(Exception, match="not found"):
        call(service, "forget", memory_id="mem_missing")
    assert call(service, "remember", content="Mina owns the billing service", keys=["billing"])["tombstoned"]


def test_turn_capture_of_a_forgotten_turn_writes_nothing(service: MemoryService) -> None:
    session = service.open_session(OpenSession.from_json({"source": "codex"}), NS)["sessionId"]
    body = {"sessionId": session, "query": "what port does the API use", "answer": "It listens on 8080."}
    first = service.complete_turn(CompleteTurn.from_json(body, "turn-1"), NS)
    call(service, "forget", memory_id=first["l1MemoryId"])
    count = memory_count(service)
    again = service.complete_turn(CompleteTurn.from_json(body, "turn-1"), NS)
    assert again["tombstoned"] is True and again["captured"] is False and again["l1MemoryId"] is None
    other_session = service.open_session(OpenSession.from_json({"source": "codex"}), NS)["sessionId"]
    copy = service.complete_turn(CompleteTurn.from_json({**body, "sessionId": other_session}, "turn-9"), NS)
    assert copy["tombstoned"] is True  # the same content under another key: refused by the content hash
    assert memory_count(service) == count


def test_forget_survives_reimport_until_restored(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    service = importer_service
    transcript = Transcript(isolated_home, str(tmp_path / "repo"))
    transcript.user("which database does billing use?")
    transcript.assistant("Billing runs on the Oracle cluster ORA-7.")
    transcript.user("and the cache?")
    transcript.assistant("The cache is Redis 7.")
    transcript.write()
    first = service.imports.run_sync(StartScan.from_json({"sources": ["claude_code"]}))
    assert first["totals"]["turnsAdded"] == 2
    service.indexer.drain()
    query = {"query": "billing database Oracle cluster", "scope": "pooled"}
    hit = service.search(SearchMemory.from_json(query), NS)["sourceMemoryIds"][0]
    assert "Oracle" in service.get_memory(hit)["content"]
    forgotten = call(service, "forget", memory_id=hit, reason="never true")

    again = service.imports.run_sync(StartScan.from_json({"sources": ["claude_code"], "mode": "full", "confirm": True}))
    assert again["totals"]["turnsAdded"] == 0 and again["totals"]["skipped"].get("tombstoned") == 1
    service.indexer.drain()
    assert all(
        "Oracle" not in service.get_memory(i)["content"]
        for i in service.search(SearchMemory.from_json(query), NS)["sourceMemoryIds"]
    )

    service.restore_tombstone(
        forgotten["tombstone_id"], RestoreTombstone.from_json({"reason": "it was true after all"}), NS
    )
    restored = service.imports.run_sync(
        StartScan.from_json({"sources": ["claude_code"], "mode": "full", "confirm": True})
    )
    assert restored["totals"]["turnsAdded"] == 1 and not restored["totals"]["skipped"].get("tombstoned")
    service.indexer.drain()
    assert service.search(SearchMemory.from_json(query), NS)["sourceMemoryIds"][0] == hit
    assert service.get_memory(hit)["status"] == "activated"


def test_history_forget_and_tombstones_over_http_and_cli(daemon: Daemon) -> None:
    base = ["--url", daemon.url, "--token", str(daemon.token)]

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, [*base, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    saved = run("--json", "keys", "remember", "The office is on floor 3", "--key", "office", "--key", "floor")
    import json

    first = json.loads(saved)["saved"]
    corrected = run("correct", first, "The office moved to floor 5")
    second = corrected.split("-> ")[1].strip()
    assert "Confirmed" in run("confirm", second, "--evidence", "badge reader log")
    stale = CliRunner().invoke(cli, [*base, "confirm", first, "--evidence", "x"])
    assert stale.exit_code == 1 and "superseded" in stale.output
    history = run("history", first)
    assert first in history and second in history and history.index(first) < history.index(second)
    with daemon.client() as client:
        chain = client.get(f"/api/v1/memory/{second}/history").json()["chain"]
        assert [c["id"] for c in chain] == [first, second] and chain[1]["validity"]["status"] == "fresh"
        assert client.get("/api/v1/memory/trace_missing/history").status_code == 404
        forgot_second = client.post("/api/v1/keys/forget", json={"memory_id": second, "reason": "typo"}).json()
        deleted = {"tombstoneId": forgot_second["tombstone_id"]}
        tombstones = client.get("/api/v1/tombstones").json()["tombstones"]
        assert tombstones[0]["id"] == deleted["tombstoneId"] and tombstones[0]["reason"] == "typo"
        refused = client.post("/api/v1/memory/add", json={"content": "The office moved to floor 5"}).json()
        assert refused["tombstoned"] is True
        assert client.post("/api/v1/tombstones/tomb_missing/restore", json={}).status_code == 404
    assert deleted["tombstoneId"] in run("tombstones", "list")
    run("tombstones", "restore", deleted["tombstoneId"])
    forgot = run("forget", first, "--reason", "obsolete")
    assert forgot.startswith(f"Forgot {first}")
