"""Service rules that are easy to get wrong: sessions, write gates, reload, idempotency scope, panel filters."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
import yaml

from memmy.commands.admin import ReloadConfig
from memmy.commands.imports import StartScan
from memmy.commands.memory import CHANNEL_NAMES, AddMemory, ArchiveMemory, Mode, SearchMemory
from memmy.commands.panel import PanelItems
from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn
from memmy.config import load_config
from memmy.embed import Embedder
from memmy.errors import Conflict, Forbidden
from memmy.namespace import Namespace
from memmy.recall.channels import CHANNELS
from memmy.recall.pipeline import MODE_LAYERS
from memmy.service import MemoryService
from tests.answers import must
from tests.conftest import only_sqlite

NS = Namespace(source="codex")


def write_config(home: Path, tree: dict) -> Path:  # type: ignore[type-arg]
    path = home / ".memmy" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"memmyMemory": tree}))
    return path


def test_header_source_is_normalised_like_the_body() -> None:
    ns = Namespace.from_headers({"x-memmy-source": "Claude-Code"}, "local-user")
    assert ns.source == "claude_code"
    assert ns.with_body("claude").source == "claude_code"


def test_requested_session_id_wins_over_host_key(service: MemoryService) -> None:
    keyed = Namespace(source="codex", session_key="host-1")
    first = service.open_session(OpenSession.from_json({}), keyed)["sessionId"]
    again = service.open_session(OpenSession.from_json({}), keyed)
    assert again["sessionId"] == first and again["resumed"] is True
    wanted = service.open_session(OpenSession.from_json({"sessionId": "session_mine"}), keyed)
    assert wanted["sessionId"] == "session_mine" and wanted["resumed"] is False


def test_a_turn_start_arriving_after_the_completion_leaves_the_turn_completed(service: MemoryService) -> None:
    """An agent that gave up waiting for a slow turn start completes the turn anyway; the start the daemon then
    processes late must not set the completed turn back to ``started`` (the panel would hide its answer)."""
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    body = {"sessionId": session, "query": "which port does the osprey proxy use?", "turnId": "turn-late-start"}
    completed = service.complete_turn(
        CompleteTurn.from_json({**body, "answer": "The osprey proxy listens on 9311."}, "turn-late-start"), NS
    )
    service.start_turn(StartTurn.from_json(body), NS)
    row = service.store.sessions.get_raw_turn(session, "turn-late-start")
    assert row is not None and row["id"] == completed["rawTurnId"]
    assert row["status"] == "succeeded" and "9311" in str(row["assistant_text"])


def test_completion_after_close_only_for_started_turns(service: MemoryService) -> None:
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    started = service.start_turn(StartTurn.from_json({"sessionId": session, "query": "rename the package"}), NS)
    service.close_session(CloseSession(session))
    late = service.complete_turn(
        CompleteTurn.from_json(
            {"sessionId": session, "query": "rename the package", "answer": "Renamed to memmy."}, started["turnId"]
        ),
        NS,
    )
    assert late["captured"] is True
    with pytest.raises(Conflict, match="never started"):
        service.complete_turn(
            CompleteTurn.from_json({"sessionId": session, "query": "q", "answer": "a"}, "turn_unknown"), NS
        )


def test_completion_keeps_the_ids_turn_start_injected(service: MemoryService) -> None:
    added = service.add_memory(AddMemory.from_json({"content": "The package is published with twine upload"}), NS)
    target = added["id"]
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    started = service.start_turn(
        StartTurn.from_json({"sessionId": session, "query": "how is the package published?"}), NS
    )
    assert started["sourceMemoryIds"] == [target]
    done = service.complete_turn(
        CompleteTurn.from_json(
            {"sessionId": session, "query": "how is the package published?", "answer": "With twine."}, started["turnId"]
        ),
        NS,
    )
    raw = service.get_memory(must(done["l1MemoryId"]))["refs"]["rawTurn"]
    assert raw["sourceMemoryIds"] == [target]


def test_write_gate_covers_capture_and_archive(isolated_home: Path, embedder: Embedder) -> None:
    write_config(isolated_home, {"algorithm": {"enableMemoryAdd": False}})
    service = MemoryService.open(load_config(), embedder=embedder)
    try:
        session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
        done = service.complete_turn(
            CompleteTurn.from_json({"sessionId": session, "query": "q", "answer": "a"}, "t1"), NS
        )
        assert done["captured"] is False and done["l1MemoryId"] is None
        assert service.panel.items(PanelItems.from_json({}))["total"] == 0
        with pytest.raises(Forbidden):
            service.add_memory(AddMemory.from_json({"content": "x"}), NS)
        with pytest.raises(Forbidden):
            service.archive_memory("trace_x", ArchiveMemory.from_json({}), NS)
        with pytest.raises(Forbidden, match="only --dry-run"):
            service.imports.start(StartScan.from_json({}))
        started = service.start_turn(StartTurn.from_json({"sessionId": session, "query": "anything stored?"}), NS)
        assert service.sessions.get_raw_turn(session, started["turnId"]) is None
    finally:
        service.close()


def test_reload_keeps_a_db_override(isolated_home: Path, embedder: Embedder) -> None:
    write_config(isolated_home, {})
    service = MemoryService.open(load_config(db_override=isolated_home / "custom.sqlite"), embedder=embedder)
    try:
        reloaded = service.reload_config(ReloadConfig.from_json({}))
        assert reloaded["requiresRestart"] is False and reloaded["changed"] == []
        assert service.config.storage.sqlite_path == isolated_home / "custom.sqlite"
    finally:
        service.close()


def test_unknown_keys_warn_and_profile_errors_name_the_profile(isolated_home: Path) -> None:
    write_config(isolated_home, {"algorithm": {"retrieval": {"tier1TopKK": 3}}})
    assert any("memmyMemory.algorithm.retrieval.tier1TopKK is not a known setting" in w for w in load_config().warnings)
    write_config(isolated_home, {"activeProfile": "byok", "profiles": {"byok": {"embedding": {"batchSize": "x"}}}})
    with pytest.raises(Exception, match=r"memmyMemory\.profiles\.byok\.embedding\.batchSize: expected an integer"):
        load_config()


def test_tags_filter_and_panel_exclusions(service: MemoryService) -> None:
    tagged = service.add_memory(
        AddMemory.from_json({"content": "Deploys go through ArgoCD", "tags": ["deploy", "k8s"]}), NS
    )["id"]
    service.add_memory(
        AddMemory.from_json({"content": "Deploys used to go through Jenkins", "tags": ["deploy"]}),
        Namespace(source="cursor"),
    )
    result = service.search(SearchMemory.from_json({"query": "how do deploys work", "tags": ["deploy", "k8s"]}), NS)
    assert result["sourceMemoryIds"] == [tagged]
    page = service.panel.items(PanelItems.from_json({"excludedSourceAgents": "cursor"}))
    assert page["total"] == 1 and [i["id"] for i in page["items"]] == [tagged]


def test_request_modes_and_channels_match_the_pipeline() -> None:
    assert set(get_args(Mode)) == set(MODE_LAYERS)
    assert set(CHANNEL_NAMES) == set(CHANNELS)


@only_sqlite
def test_the_sqlite_database_file_is_private(service: MemoryService) -> None:
    assert service.config.storage.sqlite_path.stat().st_mode & 0o777 == 0o600
