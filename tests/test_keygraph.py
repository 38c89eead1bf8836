"""The associative key graph: 2-hop association, key merging (cross-lingual via aliases), Hebbian edges,
dismiss, related_to, TTL cleanup, and the HTTP contract of ``POST /api/v1/keys/<op>`` on a real daemon."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from numpy.typing import NDArray

from memmy.cli.main import cli
from memmy.commands.memory import AddMemory, SearchMemory
from memmy.config import load_config
from memmy.embed import Embedder, EmbeddingFingerprint
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.service import MemoryService
from tests.conftest import Daemon

NS = Namespace(source="mcp")


def call(service: MemoryService, op: str, **body: Any) -> Any:
    return service.keys_call(key_args(op, body), NS)


def key_id(service: MemoryService, concept: str) -> str:
    keys = call(service, "browse_keys", limit=500)["keys"]
    return str(next(k["key_id"] for k in keys if k["concept"] == concept))


def weights(service: MemoryService, memory_id: str) -> dict[str, float]:
    rows = service.db.query(
        "SELECT k.canonical, l.weight FROM memory_key_links l JOIN memory_keys k ON k.id = l.key_id "
        "WHERE l.memory_id = ?",
        (memory_id,),
    )
    return {r[0]: r[1] for r in rows}


def newton_store(service: MemoryService) -> dict[str, str]:
    ids = {
        "newton": call(
            service,
            "remember",
            content="Newton worked out gravity after watching an apple fall",
            keys=["Newton", "apple", "gravity"],
            key_types={"Newton": "name"},
        )["saved"],
        "apple": call(service, "remember", content="Apples are a red fruit", keys=["apples", "fruit", "red"])["saved"],
        "strawberry": call(
            service, "remember", content="The user likes strawberries best", keys=["fruit", "strawberry"]
        )["saved"],
        "noise": call(service, "remember", content="The CI runs on Linux", keys=["CI", "Linux"])["saved"],
    }
    service.indexer.drain()
    return ids


def test_newton_reaches_strawberry_in_two_hops(service: MemoryService) -> None:
    ids = newton_store(service)
    recalled = call(service, "recall", query="Newton")
    assert recalled["status"] == "found"
    assert recalled["keys"][0]["concept"] == "Newton" and recalled["keys"][0]["match_type"] == "exact"
    top = recalled["memories"][0]
    assert top["id"] == ids["newton"] and top["passive"] is True
    assert top["matched_key"]["concept"] == "Newton" and top["validity"]["status"] == "fresh"
    connected = {k["concept"]: k["key_id"] for k in top["connected_keys"]}
    assert {"Newton", "apple", "gravity"} == set(connected)
    # a passive preview changes nothing
    assert weights(service, ids["newton"]) == {"Newton": 1.0, "apple": 1.0, "gravity": 1.0}

    hop1 = call(service, "read_key", key_id=connected["apple"], query="Newton")
    assert hop1["key"]["aliases"] == ["apples"] and hop1["total"] == 2
    assert "content" not in hop1["memories"][0]
    handle = next(h for h in hop1["memories"] if h["id"] != ids["newton"])
    apple = call(service, "read_memory", memory_id=handle["id"], via_key_id=connected["apple"])
    assert apple["id"] == ids["apple"] and "red fruit" in apple["content"]
    fruit = next(k for k in apple["connected_keys"] if k["concept"] == "fruit")

    hop2 = call(service, "read_key", key_id=fruit["key_id"], query="what does the user like")
    target = next(h for h in hop2["memories"] if h["id"] != ids["apple"])
    strawberry = call(service, "read_memory", memory_id=target["id"], via_key_id=fruit["key_id"])
    assert strawberry["id"] == ids["strawberry"] and "strawberries" in strawberry["content"]
    assert strawberry["validity"]["confirmation_count"] == 0  # a read is never a confirmation
    # vector-only search for "Newton" does not reach the strawberry fact: the path lives in the graph
    flat = service.search(
        SearchMemory.from_json({"query": "Newton", "channels": ["vec"], "limit": 3, "scope": "pooled"}), NS
    )
    assert ids["strawberry"] not in flat["sourceMemoryIds"][:1]


def test_hebbian_reinforces_only_the_traversed_edge_and_is_clamped(service: MemoryService) -> None:
    ids = newton_store(service)
    apple_key = key_id(service, "apple")
    before_newton = weights(service, ids["newton"])
    read = call(service, "read_memory", memory_id=ids["apple"], via_key_id=apple_key)
    assert read["reinforced"] == {"key_id": apple_key, "weight_before": 1.0, "weight": 1.1}
    assert weights(service, ids["apple"]) == pytest.approx({"apple": 1.1, "fruit": 1.0, "red": 1.0})
    assert weights(service, ids["newton"]) == before_newton  # the same key's other edge is untouched
    assert read["access_count"] == 1 and read["depth"] == 0.0
    for _ in range(40):
        call(service, "read_memory", memory_id=ids["apple"], via_key_id=apple_key)
    assert weights(service, ids["apple"])["apple"] == pytest.approx(3.0)
    # no via_key_id: access is recorded, no edge moves
    plain = call(service, "read_memory", memory_id=ids["strawberry"])
    assert plain["reinforced"] is None and weights(service, ids["strawberry"]) == {"fruit": 1.0, "strawberry": 1.0}


def test_dismiss_weakens_one_edge_with_a_floor(service: MemoryService) -> None:
    ids = newton_store(service)
    fruit = key_id(service, "fruit")
    first = call(service, "dismiss", memory_id=ids["apple"], key_id=fruit)
    assert first["weight_before"] == 1.0 and first["weight"] == 0.5 and not first["floored"]
    for _ in range(6):
        last = call(service, "dismiss", memory_id=ids["apple"], key_id=fruit)
    assert last["weight"] == pytest.approx(0.1) and last["floored"]
    assert weights(service, ids["apple"]) == pytest.approx({"apple": 1.0, "fruit": 0.1, "red": 1.0})
    assert weights(service, ids["strawberry"])["fruit"] == 1.0
    handles = call(service, "read_key", key_id=fruit)["memories"]
    assert {h["id"] for h in handles} == {ids["apple"], ids["strawberry"]}  # floored, never severed
    assert handles[0]["id"] == ids["strawberry"]  # the dismissed pairing ranks lower


def test_minilm_cannot_merge_cross_lingual_keys_so_aliases_do(service: MemoryService, embedder: Embedder) -> None:
    # Measured: all-MiniLM-L6-v2 is English-only. Korean is split into jamo and Chinese becomes [UNK], so
    # translation pairs score far below the 0.85 merge gate, and unrelated Chinese words collide at ~1.0.
    vectors = embedder.embed(["사과", "苹果", "apple", "草莓"])
    assert float(np.dot(vectors[0], vectors[2])) < 0.5 and float(np.dot(vectors[1], vectors[2])) < 0.5
    assert float(np.dot(vectors[1], vectors[3])) > 0.95  # 苹果 vs 草莓: both [UNK] [UNK]
    call(service, "remember", content="The user eats an apple every morning", keys=["apple|사과|苹果", "breakfast"])
    strawberry = call(service, "remember", content="Strawberry jam on toast", keys=["草莓", "toast"])
    korean = call(service, "remember", content="사과는 빨간 과일이다", keys=["사과", "과일"])
    service.indexer.drain()
    apple_key = key_id(service, "apple")
    assert call(service, "read_key", key_id=apple_key)["key"]["aliases"] == ["사과", "苹果"]
    assert apple_key in {k for k, _ in service.keys.keys.links_of_memory(korean["saved"])}  # merged via alias
    assert apple_key not in {k for k, _ in service.keys.keys.links_of_memory(strawberry["saved"])}  # no [UNK] merge
    for query, match in (("사과", "alias"), ("苹果", "alias"), ("apples", "variant")):
        recalled = call(service, "recall", query=query)
        assert recalled["keys"][0]["key_id"] == apple_key and recalled["keys"][0]["match_type"] == match, query
    assert korean.get("hints", {}).get("language_note")  # Korean-only keys: add the English forms


def test_alias_is_learned_from_routing_confirmed_reads(service: MemoryService) -> None:
    ids = newton_store(service)
    fruit = key_id(service, "fruit")
    assert call(service, "recall", query="과일")["status"] == "no_match"
    for round_ in range(1, 4):
        call(service, "read_key", key_id=fruit, query="과일")
        read = call(service, "read_memory", memory_id=ids["strawberry"], via_key_id=fruit)
        assert read["alias_learning"]["confirmations"] == round_
    assert read["alias_learning"]["learned"] is True
    found = call(service, "recall", query="과일")
    assert found["keys"][0]["key_id"] == fruit and found["keys"][0]["match_type"] == "alias"


def test_key_merging_and_hints(service: MemoryService) -> None:
    first = call(service, "remember", content="Deploys go through the staging cluster", keys=["deployment", "staging"])
    again = call(service, "remember", content="Deploys need a green CI run", keys=["deployments", "CI"])
    assert again["hints"]["merged_keys"][0]["into"] == "deployment"
    phrase = call(service, "remember", content="x", keys=["the staging cluster setup"])
    assert phrase["hints"]["phrase_keys"] == ["the staging cluster setup"]
    merged = {k for k, _ in service.keys.keys.links_of_memory(first["saved"])} & {
        k for k, _ in service.keys.keys.links_of_memory(again["saved"])
    }
    assert len(merged) == 1


def test_remember_dedupes_like_memory_add_and_is_normal_memory(service: MemoryService) -> None:
    saved = call(service, "remember", content="The release train leaves on Thursdays", keys=["release", "Thursday"])
    again = call(service, "remember", content="the release train  leaves on thursdays", keys=["schedule"])
    assert again["saved"] == saved["saved"] and again["deduplicated"] is True
    listed = call(service, "list_memories")
    assert listed["total"] == 1 and set(listed["memories"][0]["keys"]) == {"release", "Thursday", "schedule"}
    added = service.add_memory(AddMemory.from_json({"content": "The release train leaves on Thursdays"}), NS)
    assert added["deduplicated"] is True and added["id"] == saved["saved"]
    service.indexer.drain()
    detail = service.get_memory(saved["saved"])
    assert detail["memoryLayer"] == "L1" and detail["sourceAgent"] == "mcp"
    assert detail["validity"]["decay_profile"] == "standard" and detail["validity"]["status"] == "fresh"
    hits = service.search(SearchMemory.from_json({"query": "when does the release train leave", "scope": "pooled"}), NS)
    assert saved["saved"] in hits["sourceMemoryIds"]


def test_related_to_namespaces_stats_and_ttl_cleanup(service: MemoryService) -> None:
    base = call(
        service, "remember", content="Project Nexora uses Postgres 16", keys=["Nexora", "Postgres"], namespace="work"
    )
    linked = call(
        service,
        "remember",
        content="The DBA is Mina",
        keys=["DBA", "Mina"],
        namespace="work",
        related_to=[base["saved"]],
    )
    call(service, "remember", content="Buy milk", keys=["groceries"], namespace="home", ttl_seconds=0.05)
    related = call(service, "related", memory_id=base["saved"])
    assert [r["memory_id"] for r in related["related"]] == [linked["saved"]]
    assert related["related"][0]["via"] == ["related_to"]
    assert call(service, "browse_keys", namespace="home")["total"] == 1
    assert {k["concept"] for k in call(service, "browse_keys", namespace="work")["keys"]} == {
        "Nexora",
        "Postgres",
        "DBA",
        "Mina",
    }
    assert call(service, "recall", query="groceries", namespace="work")["status"] == "no_match"
    stats = call(service, "memory_stats")
    assert stats["keys"] == 5 and stats["related_links"] == 1 and stats["namespaces"]["work"] == 2
    import time

    time.sleep(0.1)
    assert call(service, "list_memories", namespace="home")["total"] == 0  # expired: hidden at once
    cleaned = call(service, "cleanup_expired")
    assert cleaned["deleted"] == 1
    assert call(service, "memory_stats")["memories"] == 2
    assert call(service, "cleanup_expired")["deleted"] == 0


def test_keys_http_contract_on_a_real_daemon(daemon: Daemon) -> None:
    with daemon.client(**{"x-memmy-source": "mcp", "x-memmy-session-key": "host-session-1"}) as client:

        def post(op: str, body: Any) -> Any:
            return client.post(f"/api/v1/keys/{op}", json=body)

        before = post("memory_stats", {}).json()
        bad_cases = [
            ("remember", {"content": "x", "keys": []}, "keys"),
            ("remember", {"content": "", "keys": ["a"]}, "content"),
            ("remember", {"content": "x", "keys": ["a"], "decay_profile": "forever"}, "decay_profile"),
            ("remember", {"content": "x", "keys": ["a"], "ttl_seconds": -5}, "ttl_seconds"),
            ("remember", {"content": "x", "keys": ["a"], "key_types": {"a": "person"}}, "key_types"),
            ("remember_batch", {"items": [{"content": "ok", "keys": ["k"]}, {"content": "x"}]}, "items[1].keys"),
            ("recall", {"top_k": 3}, "query"),
            # the arguments are read at the edge, before the store is asked whether trace_x exists
            ("confirm_memory", {"memory_id": "trace_x", "evidence": "  "}, "evidence"),
        ]
        for op, body, name in bad_cases:
            response = post(op, body)
            assert response.status_code in (400, 404), (op, response.text)
            if response.status_code == 400:
                assert response.json()["error"]["code"] == "invalid_argument"
                assert name in response.json()["error"]["message"], (op, response.json())
        assert post("memory_stats", {}).json()["memories"] == before["memories"]  # nothing written
        assert post("read_key", {"key_id": "key_nope"}).status_code == 404
        assert post("read_memory", {"memory_id": "trace_nope"}).status_code == 404
        assert post("no_such_tool", {}).status_code == 404

        saved = post(
            "remember",
            {
                "content": "Mina prefers tabs over spaces",
                "keys": ["Mina", "tabs", "style"],
                "key_types": {"Mina": "name"},
                "namespace": "team",
            },
        ).json()
        memory_id = saved["saved"]
        assert post("confirm_memory", {"memory_id": memory_id, "evidence": ""}).status_code == 400
        batch = post(
            "remember_batch",
            {
                "items": [
                    {"content": "Standup is at 10", "keys": ["standup", "time"]},
                    {"content": "Mina prefers tabs over spaces", "keys": ["x"], "namespace": "team"},
                ]
            },
        )
        assert batch.status_code == 200 and batch.json()[1] == {"saved": memory_id, "deduplicated": True}
        daemon.drain()
        recalled = post("recall", {"query": "tabs", "namespace": "team", "explain": True}).json()
        assert recalled["status"] == "found" and recalled["namespace_memory_count"] == 1
        memory = recalled["memories"][0]
        assert memory["id"] == memory_id and set(memory["validity"]) >= {
            "freshness",
            "status",
            "age_days",
            "last_confirmed_at",
            "confirmation_count",
            "verification_recommended",
            "verification_required",
        }
        read = post("read_memory", {"memory_id": memory_id}).json()
        assert read["source"]["host_session"] == "host-session-1" and read["source"]["host_agent"] == "mcp"
        confirmed = post("confirm_memory", {"memory_id": memory_id, "evidence": "user said so today"}).json()
        assert confirmed["confirmation_count"] == 1 and confirmed["depth"] == 0.05
        detail = client.get(f"/api/v1/memory/{memory_id}").json()
        assert detail["validity"]["confirmation_count"] == 1
        empty = post("recall", {"query": "zebra migration", "namespace": "team"}).json()
        assert empty["status"] == "no_match" and empty["keys"] == [] and "nearest_keys" in empty
        spec = client.get("/api/v1/openapi.json").json()
        assert "/api/v1/keys/recall" in spec["paths"] and "/api/v1/tombstones" in spec["paths"]

    base = ["--url", daemon.url, "--token", str(daemon.token)]
    out = CliRunner().invoke(cli, [*base, "keys", "recall", "tabs", "--namespace", "team"], catch_exceptions=False)
    assert out.exit_code == 0 and "Mina prefers tabs" in out.output
    out = CliRunner().invoke(cli, [*base, "keys", "remember", "Lunch is at noon", "--key", "lunch", "--key", "noon"])
    assert out.exit_code == 0 and out.output.startswith("Saved trace_")
    out = CliRunner().invoke(cli, [*base, "keys", "stats"])
    assert out.exit_code == 0 and "keys:" in out.output
    browse = CliRunner().invoke(cli, [*base, "keys", "browse", "--namespace", "team"], catch_exceptions=False)
    assert browse.exit_code == 0 and "Mina" in browse.output
    tabs = next(line.split("]")[0][1:] for line in browse.output.splitlines() if "] tabs" in line)
    handles = CliRunner().invoke(cli, [*base, "keys", "read", tabs, "--query", "tabs"], catch_exceptions=False)
    assert handles.exit_code == 0 and memory_id in handles.output
    full = CliRunner().invoke(cli, [*base, "keys", "read-memory", memory_id, "--via-key", tabs])
    assert full.exit_code == 0 and "Mina prefers tabs" in full.output and "w=1.1" in full.output


class StubMultilingual:
    """A multilingual model in miniature: translations share one axis, everything else is random."""

    AXES = {"apple": 0, "사과": 0, "苹果": 0, "fruit": 1, "과일": 1, "水果": 1}

    @property
    def fingerprint(self) -> EmbeddingFingerprint:
        return EmbeddingFingerprint("openai_compatible", "bge-m3", 64)

    def embed(self, texts: Sequence[str], role: str = "document") -> NDArray[np.float32]:
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            axis = self.AXES.get(text.strip().casefold())
            if axis is not None:
                out[i, axis] = 1.0
            else:
                seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
                out[i] = np.random.default_rng(seed).normal(size=64)
                out[i] /= np.linalg.norm(out[i])
        return out


def test_a_multilingual_model_merges_translations_by_similarity(isolated_home: Path) -> None:
    service = MemoryService.open(load_config(), embedder=StubMultilingual())
    service.indexer.load_index()
    try:
        assert call(service, "memory_stats")["thresholds"]["multilingual"] is True
        call(service, "remember", content="The user eats an apple every morning", keys=["apple", "fruit"])
        korean = call(service, "remember", content="사과를 매일 먹는다", keys=["사과", "과일"])
        merged = {m["key"]: m["into"] for m in korean["hints"]["merged_keys"]}
        assert merged == {"사과": "apple", "과일": "fruit"}
        recalled = call(service, "recall", query="苹果")
        assert recalled["keys"][0]["concept"] == "apple" and recalled["keys"][0]["match_type"] == "semantic"
        assert recalled["keys"][0]["memory_count"] == 2
    finally:
        service.close()


def test_a_model_change_re_embeds_every_key_surface(isolated_home: Path, embedder: Embedder) -> None:
    service = MemoryService.open(load_config(), embedder=embedder)
    service.indexer.load_index()
    call(service, "remember", content="The user eats an apple every morning", keys=["apple|사과", "breakfast"])
    service.indexer.drain()
    service.close()

    def stamps(svc: MemoryService) -> dict[str, int]:
        rows = svc.db.query("SELECT embedding_model, COUNT(*) FROM memory_key_vectors GROUP BY 1")
        return {r[0]: r[1] for r in rows}

    reopened = MemoryService.open(load_config(), embedder=StubMultilingual())
    try:
        reopened.indexer.load_index()
        assert stamps(reopened) == {"all-MiniLM-L6-v2": 3}
        assert call(reopened, "recall", query="苹果")["status"] == "no_match"
        reopened.indexer.drain()
        assert stamps(reopened) == {"bge-m3": 3}  # every surface re-embedded under the new fingerprint
        recalled = call(reopened, "recall", query="苹果")
        assert recalled["keys"][0]["concept"] == "apple" and recalled["keys"][0]["match_type"] == "semantic"
    finally:
        reopened.close()
