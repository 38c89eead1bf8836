"""Dream: a pass merges twins (exact and by vector, English and Chinese), archives stale and contradicted memories,
records every change, and ``restore`` puts the store back byte for byte (rows, full-text index, vector index)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memmy.cli.main import cli
from memmy.commands.dream import DreamGet, DreamLog, DreamRestore, DreamRun
from memmy.commands.memory import AddMemory, DeleteMemory, SearchMemory
from memmy.domain import Memory, content_hash, new_id
from memmy.dream.plan import compatible, iso
from memmy.errors import Conflict, NotFound
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.memories import MemoryFilter
from tests.answers import must
from tests.conftest import Daemon, ServiceFactory

NS = Namespace(source="claude_code")
NOW = datetime.now(UTC)


@pytest.fixture
def make_service(make_service: ServiceFactory, backend: str) -> ServiceFactory:
    """conftest's factory (one store per service, on each backend) taking just the ``dream`` config section."""
    return lambda dream=None: make_service({"dream": dream or {}})


def put(
    svc: MemoryService,
    content: str,
    layer: str = "L1",
    *,
    days_ago: float = 0,
    tags: list[str] | None = None,
    properties: dict[str, Any] | None = None,
    valid_to: str | None = None,
    superseded_by: str | None = None,
) -> str:
    """Insert a memory as capture and imports do (no add-time dedup), with chosen age and properties."""
    stamp = iso(NOW - timedelta(days=days_ago))
    memory = Memory(
        id=new_id({"L1": "trace", "L2": "policy", "L3": "world"}[layer]),
        layer=layer,  # type: ignore[arg-type]
        content=content,
        tags=tags or [],
        content_hash=content_hash(content),
        properties=properties if properties is not None else {"summary": content[:80], "priority": 0.5},
        created_at=stamp,
        updated_at=stamp,
        valid_from=stamp,
        valid_to=valid_to,
        superseded_by=superseded_by,
        source_agent="claude_code",
    )
    svc.memories.insert(memory, source="test")
    svc.indexer.enqueue(memory.id, layer, f"{content}")
    return memory.id


def export(svc: MemoryService) -> str:
    """Every column of every memories row, as JSON ordered by id."""
    rows = svc.db.query("SELECT * FROM memories ORDER BY id")
    return json.dumps([dict(r) for r in rows], ensure_ascii=False, sort_keys=True)


def fts_export(svc: MemoryService) -> list[tuple[str, ...]]:
    return sorted(tuple(r) for r in svc.db.query("SELECT id, identifier, memory_value, tags FROM memories_fts"))


def index_state(svc: MemoryService) -> dict[str, bytes]:
    index = svc.indexer.index
    assert index is not None
    ids = [r["id"] for r in svc.db.query("SELECT id FROM memories")]
    return {i: vector.tobytes() for i in ids if (vector := index.vector(i)) is not None}


def status(svc: MemoryService, memory_id: str) -> tuple[str, str | None]:
    row = svc.db.query_one("SELECT status, superseded_by FROM memories WHERE id = ?", (memory_id,))
    assert row is not None
    return row["status"], row["superseded_by"]


def recalled_ids(svc: MemoryService, query: str) -> list[str]:
    return list(
        svc.search(SearchMemory.from_json({"query": query, "limit": 20, "scope": "pooled"}), NS)["sourceMemoryIds"]
    )


@pytest.fixture
def seeded(make_service: Any) -> tuple[MemoryService, dict[str, str]]:
    """A store with twins, stale and contradicted memories, and look-alikes that must survive."""
    svc: MemoryService = make_service()
    ids = {
        # exact twins (case and spacing differ); the older one has more value, so it is the keeper
        "lint_old": put(
            svc,
            "Run the linter with ruff check --fix before committing",
            days_ago=30,
            tags=["lint"],
            properties={"summary": "lint", "value": 0.8, "priority": 0.5},
        ),
        "lint_new": put(svc, "run the linter with  RUFF check --fix before committing", days_ago=1, tags=["ruff"]),
        "zh_old": put(svc, "部署之前先运行数据库迁移脚本", days_ago=2, tags=["部署"]),
        "zh_new": put(svc, "部署之前先运行数据库迁移脚本 ", days_ago=1, tags=["部署"]),
        # near twins by vector (cosine ~0.99)
        "pytest_a": put(svc, "Always run pytest with the -q flag in this repository", days_ago=3, tags=["pytest"]),
        "pytest_b": put(svc, "Always run pytest with -q flag in this repository", days_ago=1),
        "pnpm_a": put(svc, "用 pnpm 安装这个仓库的依赖", days_ago=40),
        "pnpm_b": put(svc, "用 pnpm 来安装这个仓库的依赖", days_ago=1, tags=["依赖"]),
        # look-alike with the opposite meaning: never merged
        "pytest_never": put(svc, "Never run pytest with the -q flag in this repository", days_ago=1),
        # stale
        "stale_trace": put(
            svc,
            "Checked the weather widget colour once",
            days_ago=200,
            properties={"summary": "weather", "trace": {"priority": 0.01}},
        ),
        "stale_recalled": put(
            svc,
            "Looked at the flaky cron schedule for backups",
            days_ago=200,
            properties={"summary": "cron", "priority": 0.02},
        ),
        "old_but_valued": put(svc, "The staging server lives at staging.internal.example", days_ago=200),
        "policy_archived": put(
            svc,
            "When tests fail twice, rerun with verbose output",
            "L2",
            days_ago=30,
            properties={"policy": {"status": "archived", "gain": 0.1}},
        ),
        "policy_losing": put(
            svc,
            "Prefer rewriting the migration over patching it",
            "L2",
            days_ago=30,
            properties={"policy": {"status": "active", "gain": -0.2}},
        ),
        # grace period: a young policy (or one never injected) is not archived whatever its gain
        "policy_young": put(
            svc,
            "Prefer squashing fixup commits before the review",
            "L2",
            days_ago=2,
            properties={"policy": {"status": "active", "gain": -0.2}},
        ),
        "policy_good": put(
            svc,
            "Pin dependency versions in the lock file",
            "L2",
            properties={"policy": {"status": "active", "gain": 0.3}},
        ),
        # contradicted
        "expired": put(svc, "The release freeze lasts until Friday", valid_to=iso(NOW - timedelta(days=1))),
        "current": put(svc, "缓存服务现在使用 Redis 7", days_ago=1),
        # not L1/L2: untouched even when duplicated
        "world_a": put(svc, "The monorepo has three services", "L3", days_ago=1),
        "world_b": put(svc, "The monorepo has three services", "L3", days_ago=1),
    }
    ids["replaced"] = put(svc, "缓存服务使用 Redis 6", days_ago=5, superseded_by=ids["current"])
    svc.logs.recall_event(
        session_id=None,
        turn_id=None,
        user_id="local-user",
        query="cron",
        query_hash="h",
        layers=["L1"],
        candidate_ids=[],
        hit_ids=[ids["stale_recalled"]],
        injected_ids=[ids["policy_archived"], ids["policy_losing"], ids["policy_young"]],
        request={},
    )
    svc.indexer.drain()
    return svc, ids


def test_negation_and_numbers_block_vector_merges() -> None:
    assert compatible("Always run pytest -q", "always run pytest -q!")
    assert not compatible("Always run pytest -q", "Never run pytest -q")
    assert not compatible("部署前运行迁移", "部署前不要运行迁移")
    assert not compatible("serve on port 8080", "serve on port 8081")


def test_run_then_restore_returns_the_store_byte_for_byte(seeded: tuple[MemoryService, dict[str, str]]) -> None:
    svc, ids = seeded
    before, fts_before, vectors_before = export(svc), fts_export(svc), index_state(svc)
    assert ids["pytest_b"] in recalled_ids(svc, "run pytest with the -q flag")

    result = svc.dream_run(DreamRun.from_json({}))
    dream_id = must(result["id"])
    stats = result["stats"]
    assert dream_id.startswith("dream_") and result["status"] == "succeeded" and stats["vectorDuplicates"]
    assert (stats["supersede"], stats["archive_stale"], stats["archive_contradicted"]) == (4, 3, 2), stats
    assert stats["merge"] == 2 and stats["changes"] == len(result["changes"]) == 11

    assert status(svc, ids["lint_new"]) == ("archived", ids["lint_old"])  # higher value beats newer
    assert status(svc, ids["zh_old"]) == ("archived", ids["zh_new"])  # equal rank: the newest is kept
    assert status(svc, ids["pytest_a"]) == ("archived", ids["pytest_b"])
    assert status(svc, ids["pnpm_a"]) == ("archived", ids["pnpm_b"])  # an older twin outside the lookback
    for name in ("stale_trace", "policy_archived", "policy_losing", "expired", "replaced"):
        assert status(svc, ids[name])[0] == "archived", name
    survivors = (
        "lint_old",
        "zh_new",
        "pytest_b",
        "pnpm_b",
        "pytest_never",
        "stale_recalled",
        "old_but_valued",
        "policy_good",
        "policy_young",
        "current",
        "world_a",
        "world_b",
    )
    for name in survivors:
        assert status(svc, ids[name]) == ("activated", None), name
    keeper = svc.memories.get(ids["lint_old"])
    assert keeper is not None and keeper.tags == ["lint", "ruff"] and keeper.version == 2
    pnpm = svc.memories.get(ids["pnpm_b"])
    assert pnpm is not None and pnpm.tags == ["依赖"]  # nothing to take: no merge change for it

    index = svc.indexer.index
    assert index is not None and not index.contains(ids["pytest_a"]) and index.contains(ids["pytest_b"])
    recalled = recalled_ids(svc, "run pytest with the -q flag")
    assert ids["pytest_b"] in recalled and ids["pytest_a"] not in recalled
    assert ids["pnpm_a"] not in recalled_ids(svc, "用 pnpm 安装依赖")
    sources = {
        r["source"]
        for r in svc.db.query("SELECT source FROM memory_change_log WHERE memory_id = ?", (ids["lint_new"],))
    }
    assert f"dream:{dream_id}" in sources

    shown = svc.dream_get(dream_id)
    assert [c["seq"] for c in shown["changes"]] == list(range(1, 12))
    first = shown["changes"][0]
    assert set(first["before"]) == {"status", "version", "tags", "supersededBy", "validTo", "updatedAt"}
    verbose = svc.dream_get(dream_id, DreamGet.from_json({"verbose": "true"}))["changes"][0]
    assert "memory_value" in verbose["before"] and "properties_json" in verbose["after"]
    logged = svc.dream_log(DreamLog.from_json({}))["dreams"]
    assert [d["id"] for d in logged] == [dream_id] and logged[0]["stats"]["supersede"] == 4

    restored = svc.dream_restore(dream_id, DreamRestore.from_json({}))
    assert restored["status"] == "restored" and restored["memories"] == 11 and restored["skipped"] == []
    assert export(svc) == before
    assert fts_export(svc) == fts_before
    live = index_state(svc)
    # the vector index is what a restart would load from the restored rows: every live, unexpired memory
    assert live == {k: v for k, v in vectors_before.items() if k != ids["expired"]}
    svc.indexer.load_index()
    assert index_state(svc) == live
    assert ids["pytest_a"] in recalled_ids(svc, "run pytest with the -q flag")
    hits = [i for i, _ in svc.memories.fts_search("数据库迁移脚本", 10, MemoryFilter())]
    assert set(hits) >= {ids["zh_old"], ids["zh_new"]}
    restore_log = svc.db.query(
        "SELECT COUNT(*) FROM memory_change_log WHERE source = ?", (f"dream-restore:{dream_id}",)
    )
    assert restore_log[0][0] == 11
    assert svc.dream_get(dream_id)["status"] == "restored"

    with pytest.raises(Conflict, match="already restored"):
        svc.dream_restore(dream_id, DreamRestore.from_json({}))
    with pytest.raises(NotFound):
        svc.dream_restore("dream_nope", DreamRestore.from_json({}))


def test_restore_is_refused_after_a_later_edit_unless_forced(seeded: tuple[MemoryService, dict[str, str]]) -> None:
    svc, ids = seeded
    before = json.loads(export(svc))
    dream_id = must(svc.dream_run(DreamRun.from_json({}))["id"])
    svc.add_memory(
        AddMemory.from_json(
            {"content": "Run the linter with ruff check --fix before committing", "tags": ["pre-commit"]}
        ),
        NS,
    )
    svc.delete_memory(ids["pytest_a"], DeleteMemory.from_json({"reason": "wrong"}), NS)
    after_edit = export(svc)

    with pytest.raises(Conflict, match=ids["lint_old"]) as refused:
        svc.dream_restore(dream_id, DreamRestore.from_json({}))
    assert "force" in refused.value.message and ids["pytest_a"] in refused.value.message
    assert export(svc) == after_edit  # a refused restore writes nothing

    forced = svc.dream_restore(dream_id, DreamRestore.from_json({"force": True}))
    assert forced["overwritten"] == [ids["lint_old"]]
    assert forced["skipped"] == [{"memoryId": ids["pytest_a"], "reason": "deleted after the dream; not brought back"}]
    rows = {r["id"]: r for r in json.loads(export(svc))}
    original = {r["id"]: r for r in before}
    assert rows[ids["lint_old"]] == original[ids["lint_old"]]  # the later tag edit was overwritten
    assert rows[ids["pytest_a"]]["status"] == "deleted"
    assert rows[ids["stale_trace"]] == original[ids["stale_trace"]]


def test_dry_run_writes_nothing(seeded: tuple[MemoryService, dict[str, str]]) -> None:
    svc, ids = seeded
    before = export(svc)
    changes_before = svc.db.query_one("SELECT COUNT(*) FROM memory_change_log")[0]  # type: ignore[index]
    dry = svc.dream_run(DreamRun.from_json({"dryRun": True}))
    assert dry["dryRun"] and dry["id"] is None and dry["stats"]["changes"] == 11
    planned = {(c["memoryId"], c["action"]) for c in dry["changes"]}
    assert (ids["pytest_a"], "supersede") in planned and (ids["expired"], "archive_contradicted") in planned
    assert export(svc) == before
    assert svc.db.query_one("SELECT COUNT(*) FROM memory_change_log")[0] == changes_before  # type: ignore[index]
    assert svc.db.query_one("SELECT COUNT(*) FROM dreams")[0] == 0  # type: ignore[index]
    index = svc.indexer.index
    assert index is not None and index.contains(ids["pytest_a"])


def test_run_if_due_follows_the_schedule_and_max_changes_caps(make_service: Any) -> None:
    off = make_service()
    put(off, "Old note", valid_to=iso(NOW - timedelta(hours=1)))
    assert off.dreams.run_if_due(NOW) is None
    assert off.db.query_one("SELECT COUNT(*) FROM dreams")[0] == 0

    svc = make_service({"enabled": True, "intervalHours": 12, "maxChanges": 2})
    expired = [put(svc, f"Temporary note number {n}", valid_to=iso(NOW - timedelta(hours=1))) for n in range(3)]
    first = svc.dreams.run_if_due(NOW)
    assert first is not None
    shown = svc.dream_get(first)
    assert shown["trigger"] == "scheduled" and shown["stats"]["capped"] and len(shown["changes"]) == 2
    assert svc.dreams.run_if_due(NOW + timedelta(hours=1)) is None  # not due yet
    second = svc.dreams.run_if_due(NOW + timedelta(hours=13))
    assert second is not None and second != first
    assert all(status(svc, i)[0] == "archived" for i in expired)
    schedule = svc.dream_log(DreamLog.from_json({"limit": 5}))["schedule"]
    assert schedule["enabled"] and schedule["intervalHours"] == 12 and schedule["nextDueAt"] > schedule["lastRunAt"]


def run_cli(daemon: Daemon, *args: str) -> Result:
    base = ["--url", daemon.url, "--token", daemon.token or ""]
    return CliRunner().invoke(cli, [*base, *args], catch_exceptions=False)


def test_http_routes_and_cli_through_the_daemon(daemon: Daemon) -> None:
    with daemon.client() as client:
        twins = [
            client.post("/api/v1/memory/add", json={"content": text}).json()["id"]
            for text in ("Always use uv run to start the dev server here", "Always use uv run to start the dev server")
        ]
        daemon.drain()
        assert client.post("/api/v1/dream/run", json={}, headers={"authorization": ""}).status_code == 401

        dry = run_cli(daemon, "dream", "run", "--dry-run", "--json")
        assert dry.exit_code == 0, dry.output
        planned = json.loads(dry.output)
        assert planned["dryRun"] and {c["memoryId"] for c in planned["changes"]} & set(twins)

        ran = run_cli(daemon, "dream", "run")
        assert ran.exit_code == 0 and ran.output.startswith("Dream dream_"), ran.output
        dream_id = ran.output.split()[1].rstrip(":")
        assert "supersede" in ran.output

        shown = client.get(f"/api/v1/dream/{dream_id}").json()
        loser = next(c["memoryId"] for c in shown["changes"] if c["action"] == "supersede")
        assert client.get(f"/api/v1/memory/{loser}").json()["status"] == "archived"
        hits = client.post("/api/v1/memory/search", json={"query": "start the dev server", "scope": "pooled"}).json()
        assert loser not in hits["sourceMemoryIds"]
        assert client.get("/api/v1/dream/dream_missing").status_code == 404

        logged = run_cli(daemon, "dream", "log", "--limit", "5")
        assert dream_id in logged.output and "Scheduled runs are off" in logged.output
        human = run_cli(daemon, "dream", "show", dream_id)
        assert loser in human.output and "activated v1 -> archived v2" in human.output

        restored = run_cli(daemon, "dream", "restore", dream_id)
        assert restored.exit_code == 0 and restored.output.startswith(f"Restored {dream_id}"), restored.output
        assert client.get(f"/api/v1/memory/{loser}").json()["status"] == "activated"
        again = client.post(f"/api/v1/dream/{dream_id}/restore", json={})
        assert again.status_code == 409 and "already restored" in again.json()["error"]["message"]
        refused = run_cli(daemon, "dream", "restore", dream_id)
        assert refused.exit_code == 1 and "already restored" in refused.output


def test_cli_reports_a_stopped_daemon() -> None:
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "dream", "log"], catch_exceptions=False)
    assert result.exit_code == 1 and "not running" in result.output
