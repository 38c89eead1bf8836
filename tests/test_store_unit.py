"""The one Store (every repository once, the unit of work), the bootstrap wiring and typed settings shared by
reference: real SQLite, a real service, a real config file and reload."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from memmy.commands.admin import ReloadConfig
from memmy.commands.memory import AddMemory
from memmy.config import (
    AlgorithmFlags,
    AuditSettings,
    CaptureSettings,
    DreamSettings,
    FeedbackSettings,
    L2InductionSettings,
    L3AbstractionSettings,
    RetrievalSettings,
    RewardSettings,
    SessionSettings,
    SkillSettings,
    load_config,
)
from memmy.config_defaults import default_tree
from memmy.errors import Forbidden
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.db import Database
from memmy.store.unit import Store

NS = Namespace(source="claude_code")


def write_config(home: Path, tree: dict[str, Any]) -> None:
    path = home / ".memmy" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"memmyMemory": tree}), encoding="utf-8")


def count(store: Store) -> int:
    return int(store.query("SELECT COUNT(*) FROM runtime_kv")[0][0])


def put(store: Store, key: str) -> None:
    with store.transaction() as conn:
        conn.execute("INSERT INTO runtime_kv(key, value_json, updated_at) VALUES (?, '1', 'now')", (key,))


@pytest.fixture
def store(database: Database) -> Store:
    return Store(database)


def test_a_transaction_commits_and_an_error_rolls_it_back(store: Store) -> None:
    put(store, "a")
    with pytest.raises(RuntimeError), store.transaction():
        put(store, "b")
        raise RuntimeError("boom")
    assert count(store) == 1


def test_a_nested_transaction_joins_the_outer_one(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        put(store, "inner")  # its own `with store.transaction()` joins this one: nothing is committed yet
        assert store.db.conn.in_transaction
        raise RuntimeError("the outer unit fails after the inner one finished")
    assert count(store) == 0  # the inner write went with the outer rollback
    with store.transaction():
        put(store, "one")
        put(store, "two")
    assert count(store) == 2 and not store.db.conn.in_transaction


def test_a_savepoint_undoes_only_its_own_part(store: Store) -> None:
    with store.transaction():
        put(store, "kept")
        with pytest.raises(RuntimeError), store.savepoint("part"):
            put(store, "undone")
            raise RuntimeError("this part fails")
    assert [r[0] for r in store.query("SELECT key FROM runtime_kv")] == ["kept"]


def test_a_skills_trials_count_its_passes_and_its_resolved_attempts(store: Store) -> None:
    trials = [store.evolution.add_trial("skill_1", f"ep{i}", session_id=None, user_id=None) for i in range(4)]
    resolved = [("pass", "success"), ("fail", "failure"), ("pass", "success")]
    for trial, (status, outcome) in zip(trials[:3], resolved, strict=True):
        store.evolution.resolve_trial(trial, status, outcome)
    assert store.evolution.trial_counts("skill_1") == (2, 3)  # the fourth is still pending
    assert store.evolution.trial_counts("skill_2") == (0, 0)


def test_every_ops_group_shares_the_store_and_its_repositories(service: MemoryService) -> None:
    store = service.store
    assert service.memories is store.memories and service.db is store.db
    assert service.memory_ops.tombstones is store.tombstones is service.keys.tombstones
    assert service.validity.tombstones is store.tombstones
    assert service.indexer.keys is store.keys is service.keys.keys
    assert service.dreams.repo is store.dreams and service.governance.audit_log is store.audit
    assert all(group.writer.store is store for group in service.evolution_groups)
    assert service.worker.store is store and service.worker.jobs is store.jobs


def test_reload_swaps_one_settings_object_that_every_ops_group_sees(
    isolated_home: Path, service: MemoryService
) -> None:
    settings = service.settings
    groups = [service.memory_ops, service.recall_ops, service.episode_ops, service.keys, service.governance]
    groups += list(service.evolution_groups)
    assert all(group.settings is settings for group in groups)
    service.add_memory(AddMemory.from_json({"content": "writes are on"}), NS)
    write_config(isolated_home, {"algorithm": {"enableMemoryAdd": False, "retrieval": {"tier1TopK": 9}}})
    service.reload_config(ReloadConfig.from_json({}))
    assert service.settings is settings and not settings.current.flags.enable_memory_add
    assert all(group.config is settings.current for group in groups)
    assert service.recall_ops.config.retrieval.tier1_top_k == 9
    with pytest.raises(Forbidden):
        service.add_memory(AddMemory.from_json({"content": "writes are off now"}), NS)
    with pytest.raises(Forbidden):
        service.keys_call(key_args("remember", {"content": "no key writes either", "keys": ["x"]}), NS)


SECTIONS: dict[tuple[str, ...], type[Any]] = {
    ("algorithm",): AlgorithmFlags,
    ("algorithm", "capture"): CaptureSettings,
    ("algorithm", "reward"): RewardSettings,
    ("algorithm", "feedback"): FeedbackSettings,
    ("algorithm", "l2Induction"): L2InductionSettings,
    ("algorithm", "l3Abstraction"): L3AbstractionSettings,
    ("algorithm", "skill"): SkillSettings,
    ("algorithm", "session"): SessionSettings,
    ("algorithm", "retrieval"): RetrievalSettings,
    ("dream",): DreamSettings,
    ("audit",): AuditSettings,
}


@pytest.mark.parametrize("path", list(SECTIONS), ids=".".join)
def test_each_typed_section_has_a_field_for_every_default_key(path: tuple[str, ...]) -> None:
    node: dict[str, Any] = default_tree()
    for key in path:
        node = node[key]
    keys = {k for k, v in node.items() if not isinstance(v, dict)}
    fields = {f.name for f in dataclasses.fields(SECTIONS[path])}
    camel = {name.rstrip("_").split("_")[0] + "".join(p.title() for p in name.split("_")[1:] if p) for name in fields}
    assert camel == keys


def test_typed_sections_read_the_file_and_the_defaults(isolated_home: Path) -> None:
    write_config(
        isolated_home,
        {
            "algorithm": {"reward": {"lambda": 0.25}, "retrieval": {"mmrLambda": 1, "tagFilter": "off"}},
            "dream": {"enabled": True},
            "evolution": {"review": "required"},
        },
    )
    config = load_config()
    assert config.reward.lambda_ == 0.25 and config.reward.gamma == 0.9
    assert config.retrieval.mmr_lambda == 1.0 and isinstance(config.retrieval.mmr_lambda, float)
    assert config.retrieval.tag_filter == "off" and config.retrieval.tier1_top_k == 3
    assert config.dream.enabled and config.dream.interval_hours == 24.0
    assert config.evolution.review == "required" and config.summary.review == "off"
    assert config.skill.outcome_r_task_failure_threshold == -0.15
