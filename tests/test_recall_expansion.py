"""Evidence the vector top-k missed is still counted (exact cosine), and pseudo-relevance feedback expansion."""

from __future__ import annotations

import numpy as np
import pytest

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.domain import Memory
from memmy.embed import Embedder
from memmy.namespace import Namespace
from memmy.recall.candidate import Candidate
from memmy.recall.expansion import expansion_terms
from memmy.store.vectors import VectorIndex, VectorMeta

NS = Namespace(source="claude_code")


def test_similarities_are_the_exact_cosines_of_the_listed_memories() -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(8)
    vectors = {}
    for number in range(20):
        vector = rng.standard_normal(8).astype(np.float32)
        vectors[f"m{number}"] = vector / np.linalg.norm(vector)
        index.upsert(f"m{number}", "vec_summary", vectors[f"m{number}"], VectorMeta("L1", f"p{number % 3}"))
    query = vectors["m4"]
    found = index.similarities(["m1", "m4", "m19", "unknown"], query)
    assert set(found) == {"m1", "m4", "m19"}
    for memory_id, score in found.items():
        assert score == pytest.approx(float(vectors[memory_id] @ query), abs=1e-3)  # rows are float16
    # the same scores as the vector channel's scan of the same rows
    scanned = dict(index.search(query, 20))
    assert all(score == pytest.approx(scanned[memory_id], abs=1e-6) for memory_id, score in found.items())


def test_a_keyword_hit_outside_the_vector_pool_keeps_its_cosine(make_service, embedder: Embedder) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    for number in range(30):  # the vector pool (20 per layer at limit 3) fills with these
        service.add_memory(
            AddMemory.from_json({"content": f"Deploy the web app to production with kubectl, step {number}."}), NS
        )
    rare = "The zygomorphic flower dataset lives in the botany bucket."
    rare_id = service.add_memory(AddMemory.from_json({"content": rare}), NS)["id"]
    service.indexer.drain()
    query = "deploy the zygomorphic web app"
    result = service.search(SearchMemory.from_json({"query": query, "verbose": True, "limit": 3}), NS)
    channels = {c["id"]: c["channels"] for c in result["debug"]["channels"]}
    assert rare_id in channels and "fts" in channels[rare_id]
    q = embedder.embed([query], role="query")[0]
    d = embedder.embed([rare])[0]
    assert channels[rare_id]["vec"] == pytest.approx(float(q @ d), abs=1e-3)


def _cand(memory_id: str, content: str, relevance: float) -> Candidate:
    cand = Candidate(Memory(id=memory_id, layer="L1", content=content))
    cand.relevance = relevance
    return cand


def test_expansion_terms_are_shared_by_the_best_hits_and_rare_in_the_pool() -> None:
    pool = [
        _cand("a", "Caroline has been playing guitar every evening with her band", 0.9),
        _cand("b", "Her guitar teacher says the band sounds great", 0.8),
        _cand("c", "Caroline bought a metronome", 0.7),
        *[_cand(f"x{i}", f"Caroline talked about the weather {i} with her friends", 0.1) for i in range(8)],
    ]
    terms = expansion_terms(pool, ["caroline", "instrument"])
    assert "guitar" in terms and "band" in terms  # in two of the three best hits, rare elsewhere
    assert "metronome" not in terms  # only one top hit has it: drift, not topic
    assert "caroline" not in terms  # already asked
    assert expansion_terms(pool[:1], ["instrument"]) == []  # one hit is not a consensus


def test_prf_finds_what_only_the_best_hits_words_reach(make_service) -> None:  # type: ignore[no-untyped-def]
    texts = [
        "Melanie practises the cello with her quartet every morning before work.",
        "Melanie joined a cello quartet and the quartet rehearses on Sundays.",
        "The quartet will perform at the library in spring.",
        "Melanie adopted a cat named Oliver last year.",
    ]
    for config, expected in (({"queryExpansion": "prf"}, True), ({"queryExpansion": "off"}, False)):
        service = make_service(
            {"algorithm": {"retrieval": {"contextWindow": 0, "queryExpansion": config["queryExpansion"]}}}
        )
        made = [service.add_memory(AddMemory.from_json({"content": t}), NS)["id"] for t in texts]
        service.indexer.drain()
        result = service.search(
            SearchMemory.from_json(
                {"query": "Melanie cello practice", "verbose": True, "limit": 10, "channels": ["fts"]}
            ),
            NS,
        )
        statuses = " ".join(result["status"])
        assert ("query_expansion:prf" in statuses) is expected
        # reached through "quartet" alone (a half-weight channel: found, though not necessarily above the threshold)
        assert (made[2] in result["debug"]["candidateMemoryIds"]) is expected
        assert made[0] in result["sourceMemoryIds"] and made[1] in result["sourceMemoryIds"]
