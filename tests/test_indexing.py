"""Vectors stay consistent with the store: add/delete/restart, model changes re-embed, failures never block writes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from memmy.commands.memory import AddMemory, DeleteMemory, SearchMemory
from memmy.commands.turn_requests import OpenSession, StartTurn
from memmy.config import load_config
from memmy.embed import Embedder, build_embedder
from memmy.embed.base import EmbeddingFingerprint, EmbedRole
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.text import FTS_DELETE
from memmy.store.vectors import VectorIndex
from tests.answers import must
from tests.openai_stub import run_openai_stub

NS = Namespace(source="test")


def open_service(embedder: Embedder) -> MemoryService:
    service = MemoryService.open(load_config(), embedder=embedder)
    service.queue.release_leases()
    service.indexer.load_index()
    return service


def test_vector_index_upsert_remove_search() -> None:
    index = VectorIndex(dim=3, capacity=2)
    vectors = {f"m{i}": np.eye(3, dtype=np.float32)[i % 3] for i in range(5)}
    for memory_id, vector in vectors.items():
        index.upsert(memory_id, "vec", vector)
    assert len(index) == 5  # grew past the initial capacity
    index.upsert("m0", "vec", np.array([0, 1, 0], dtype=np.float32))  # replace in place
    assert len(index) == 5
    index.remove("m1")
    assert len(index) == 4 and not index.contains("m1")
    hits = index.search(np.array([0, 1, 0], dtype=np.float32), k=10)
    assert sorted(m for m, s in hits if s > 0.99) == ["m0", "m4"]
    assert {m for m, _ in hits} == {"m0", "m2", "m3", "m4"}


def test_index_follows_add_delete_and_restart(embedder: Embedder, isolated_home: Path) -> None:
    service = open_service(embedder)
    kept = must(
        service.add_memory(AddMemory.from_json({"content": "Postgres migrations run with alembic upgrade head"}), NS)[
            "id"
        ]
    )
    dropped = must(
        service.add_memory(AddMemory.from_json({"content": "Redis cache keys expire after ten minutes"}), NS)["id"]
    )
    service.indexer.drain()
    # membership, not len(): on PostgreSQL the index is the database's, and its size an estimate
    index = service.indexer.index
    assert index is not None and index.contains(kept) and index.contains(dropped)
    service.delete_memory(dropped, DeleteMemory.from_json({}), NS)
    assert index.contains(kept) and not index.contains(dropped)
    service.close()

    restarted = open_service(embedder)
    assert restarted.indexer.index is not None and restarted.indexer.index.contains(kept)
    assert not restarted.indexer.index.contains(dropped)
    query = restarted.indexer.embed_query("database schema upgrade tool")
    assert query is not None
    assert restarted.indexer.index.search(query, 1)[0][0] == kept
    restarted.close()


def test_changing_the_embedding_model_re_embeds_in_the_background(embedder: Embedder, isolated_home: Path) -> None:
    service = open_service(embedder)
    ids = [
        must(
            service.add_memory(
                AddMemory.from_json({"content": f"fact {i}: the build uses bazel target //app:{i}"}), NS
            )["id"]
        )
        for i in range(6)
    ]
    service.indexer.drain()
    assert service.vectors.fingerprints() == [
        {"provider": "local", "model": "all-MiniLM-L6-v2", "dim": 384, "count": 6}
    ]
    service.close()

    with run_openai_stub() as base_url:
        remote = build_embedder("openai_compatible", model="stub-model", endpoint=base_url)
        switched = open_service(remote)
        # Nothing from the old space is searchable in the new one, and everything is queued again.
        assert switched.indexer.index is not None and len(switched.indexer.index) == 0
        assert switched.indexer.reembed.total == 6
        assert switched.health()["embeddingQueue"]["pending"] == 6
        switched.indexer.drain()
        assert switched.vectors.fingerprints() == [
            {"provider": "openai_compatible", "model": "stub-model", "dim": 8, "count": 6}
        ]
        assert len(switched.indexer.index) == 6
        assert all(switched.queue.states(ids)[i]["state"] == "ready" for i in ids)
        switched.close()


def test_embedding_failure_never_fails_the_write(isolated_home: Path) -> None:
    with run_openai_stub(fail_times=1000, status=503) as base_url:
        failing = build_embedder("openai_compatible", model="stub", endpoint=base_url, max_retries=0)
        service = MemoryService.open(load_config(), embedder=failing)
        added = service.add_memory(AddMemory.from_json({"content": "written while the embedding endpoint is down"}), NS)
        assert added["status"] == "activated"
        # Text search finds it at once; the vector waits in the retry queue.
        assert service.search(SearchMemory.from_json({"query": "embedding endpoint down"}), NS)["sourceMemoryIds"] == [
            added["id"]
        ]
        done, failed = service.indexer.run_once()
        assert (done, failed) == (0, 1)
        state = service.queue.states([must(added["id"])])[must(added["id"])]
        assert state["state"] == "embedding_pending" and state["attemptCount"] == 1
        row = service.db.query_one("SELECT status, attempts, next_attempt_at, last_error FROM embedding_retry_queue")
        assert row is not None
        assert row["status"] == "pending" and row["attempts"] == 1 and "503" in row["last_error"]
        # Exhaust the attempts: the memory ends up `failed` with a retry action, and stays searchable.
        service.db.conn.execute("UPDATE embedding_retry_queue SET attempts = max_attempts - 1, next_attempt_at = 0")
        service.indexer.run_once()
        state = service.queue.states([must(added["id"])])[must(added["id"])]
        assert state["state"] == "failed" and state["retryAction"] == "retry"
        assert service.retry_processing(must(added["id"]))["accepted"] is True
        service.close()


@pytest.mark.parametrize("layer", ["L2", "L3", "Skill"])
def test_other_layers_use_the_vec_field(embedder: Embedder, isolated_home: Path, layer: str) -> None:
    service = open_service(embedder)
    memory_id = service.add_memory(AddMemory.from_json({"content": "Prefer small pull requests", "layer": layer}), NS)[
        "id"
    ]
    service.indexer.drain()
    row = service.db.query_one(
        "SELECT vector_field, embedding_dim FROM memory_vector_entries WHERE memory_id=?", (memory_id,)
    )
    assert row is not None
    assert row["vector_field"] == "vec" and row["embedding_dim"] == 384
    service.close()


class CountingEmbedder:
    """The real embedder, counting the query texts it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.queries: list[str] = []

    @property
    def fingerprint(self) -> EmbeddingFingerprint:
        return self.inner.fingerprint

    def embed(self, texts: Sequence[str], role: EmbedRole = "document") -> NDArray[np.float32]:
        if role == "query":
            self.queries.extend(texts)
        return self.inner.embed(texts, role)


def test_a_turn_start_runs_the_model_once_for_its_prompt(embedder: Embedder, isolated_home: Path) -> None:
    counting = CountingEmbedder(embedder)
    service = open_service(counting)
    service.add_memory(AddMemory.from_json({"content": "Postgres migrations run with alembic upgrade head"}), NS)
    service.indexer.drain()
    session = service.open_session(OpenSession.from_json({"source": "test"}), NS)["sessionId"]
    prompts = ["how do we upgrade the database schema", "which tool runs the postgres migrations"]
    for number, prompt in enumerate(prompts):  # recall and episode routing both need the prompt's vector
        body = {"sessionId": session, "turnId": f"t{number}", "query": prompt}
        service.start_turn(StartTurn.from_json(body), NS)
    assert sorted(counting.queries) == sorted(prompts)
    service.close()


class PurgingEmbedder(CountingEmbedder):
    """The real embedder that, on its first document batch, hard-deletes one memory first (as ``doctor --canary``
    purges its trace while the trace's vector is being computed)."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.service: MemoryService | None = None
        self.victim = ""

    def embed(self, texts: Sequence[str], role: EmbedRole = "document") -> NDArray[np.float32]:
        if role == "document" and self.victim and self.service is not None:
            with self.service.store.transaction() as conn:
                conn.execute(FTS_DELETE, (self.victim,))
                conn.execute("DELETE FROM memories WHERE id = ?", (self.victim,))
            self.victim = ""
        return super().embed(texts, role)


def test_a_memory_deleted_while_its_vector_is_computed_is_skipped_and_the_batch_goes_on(
    embedder: Embedder, isolated_home: Path
) -> None:
    purging = PurgingEmbedder(embedder)
    service = open_service(purging)
    purging.service = service
    gone = must(service.add_memory(AddMemory.from_json({"content": "canary trace, purged mid-embedding"}), NS)["id"])
    kept = must(service.add_memory(AddMemory.from_json({"content": "the build uses bazel target //app"}), NS)["id"])
    purging.victim = gone
    assert service.indexer.run_once() == (1, 0)  # no foreign-key failure takes the whole batch down
    stored = {row["memory_id"] for row in service.store.query("SELECT memory_id FROM memory_vector_entries")}
    assert stored == {kept}
    assert service.queue.states([gone, kept])[kept]["state"] == "ready"
    assert service.store.query_one("SELECT 1 FROM embedding_retry_queue WHERE target_id = ?", (gone,)) is None
    service.close()
