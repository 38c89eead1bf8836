"""all-MiniLM-L6-v2 in pure numpy: no torch, no onnxruntime; weights and tokenizer from :mod:`memmy.embed.weights`.

The forward pass is a plain BERT encoder (6 layers, 12 heads, hidden 384, exact erf GELU), followed by mean
pooling over the attention mask and L2 normalisation, exactly as sentence-transformers does it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memmy.embed.base import EmbeddingFingerprint, EmbedRole, check_texts, l2_normalize
from memmy.embed.weights import MISSING_HINT
from memmy.embed.weights import default_model_dir as default_model_dir  # re-exported: engines find weights here
from memmy.errors import EmbeddingError

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
NUM_LAYERS = 6
NUM_HEADS = 12
HEAD_DIM = DIM // NUM_HEADS
LAYER_NORM_EPS = 1e-12
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of the model
INSTALL_HINT = MISSING_HINT
MAX_BATCH_TOKENS = 384  # padded tokens per forward pass: beyond this sgemm falls out of L2 cache (measured)

F32 = NDArray[np.float32]

# Numerical Recipes ``erfcc`` (Chebyshev fit of erfc): relative error < 1.2e-7 everywhere. The last
# coefficient absorbs ln(1/2), so the fit yields erfc/2 directly.
_ERFC_COEFFS = (
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223 - float(np.log(2.0)),
)
_T_SCALE = np.float32(0.5 / np.sqrt(2.0))
_GELU_BLOCK = 32768  # elements per pass: keeps the temporaries in L2 cache


def _gelu_block(x: F32, a: F32, t: F32, p: F32, e: F32) -> None:
    # With z = |x|/sqrt 2 and h = erfc(z)/2 = t*exp(-z^2 + poly(t) - ln 2), t = 1/(1 + z/2):
    # gelu(x) = x * Phi(x) = max(x, 0) - |x| * h   (Phi(x) = 1 - h for x >= 0, h for x < 0).
    np.abs(x, out=a)
    np.multiply(a, _T_SCALE, out=t)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    np.multiply(t, np.float32(_ERFC_COEFFS[0]), out=p)
    p += np.float32(_ERFC_COEFFS[1])
    for c in _ERFC_COEFFS[2:]:
        p *= t
        p += np.float32(c)
    np.multiply(a, a, out=e)
    e *= np.float32(-0.5)
    p += e
    np.exp(p, out=p)
    p *= t
    p *= a
    np.maximum(x, np.float32(0.0), out=x)
    x -= p


def gelu_(x: F32) -> F32:
    """Exact (erf-form) GELU ``x * Phi(x)`` applied in place to a C-contiguous array; returns ``x``.

    ``erfc`` comes from a Chebyshev fit with relative error below 1.2e-7, so the result is float32-exact
    (measured max abs error vs ``math.erf`` 2.4e-7 on [-12, 12]).
    """
    flat = x.reshape(-1)
    n = flat.size
    size = min(_GELU_BLOCK, n)
    a, t, p, e = (np.empty(size, dtype=np.float32) for _ in range(4))
    for s in range(0, n, size):
        k = min(s + size, n) - s
        _gelu_block(flat[s : s + k], a[:k], t[:k], p[:k], e[:k])
    return x


def layer_norm_(x: F32, gamma: F32, beta: F32) -> F32:
    """LayerNorm over axis 0 of a (features, tokens) array, in place (eps 1e-12); returns ``x``.

    ``gamma`` and ``beta`` are (features, 1) columns.
    """
    x -= x.mean(axis=0)
    var = np.einsum("ij,ij->j", x, x)
    var *= np.float32(1.0 / x.shape[0])
    var += np.float32(LAYER_NORM_EPS)
    np.sqrt(var, out=var)
    x /= var
    x *= gamma
    x += beta
    return x


@dataclass(frozen=True)
class _Layer:
    """One encoder layer; weights keep torch's (out, in) layout since activations are (features, tokens)."""

    wqkv: F32  # (1152, 384): query rows pre-scaled by 1/sqrt(head_dim), then key, then value
    bqkv: F32  # biases and LayerNorm parameters are (n, 1) columns
    wo: F32  # (384, 384)
    bo: F32
    ln1_g: F32
    ln1_b: F32
    wi: F32  # (1536, 384)
    bi: F32
    wo2: F32  # (384, 1536)
    bo2: F32
    ln2_g: F32
    ln2_b: F32


@dataclass(frozen=True)
class _Model:
    word: F32  # (30522, 384)
    position: F32  # (512, 384)
    token_type0: F32  # (384,)
    ln_g: F32
    ln_b: F32
    layers: tuple[_Layer, ...]


def _load_weights(path: Path) -> _Model:
    from safetensors.numpy import load_file

    raw: dict[str, NDArray[Any]] = load_file(str(path))

    def get(name: str) -> F32:
        for key in (name, f"bert.{name}"):
            if key in raw:
                return np.ascontiguousarray(raw[key], dtype=np.float32)
        raise EmbeddingError(f"the MiniLM weights at {path} lack tensor {name!r}")

    def col(name: str) -> F32:
        return get(name).reshape(-1, 1)

    scale = np.float32(1.0 / np.sqrt(HEAD_DIM))
    layers = []
    for i in range(NUM_LAYERS):
        p = f"encoder.layer.{i}."
        wq, wk, wv = (get(p + f"attention.self.{n}.weight") for n in ("query", "key", "value"))
        bq, bk, bv = (col(p + f"attention.self.{n}.bias") for n in ("query", "key", "value"))
        layers.append(
            _Layer(
                wqkv=np.concatenate([wq * scale, wk, wv], axis=0),
                bqkv=np.concatenate([bq * scale, bk, bv], axis=0),
                wo=get(p + "attention.output.dense.weight"),
                bo=col(p + "attention.output.dense.bias"),
                ln1_g=col(p + "attention.output.LayerNorm.weight"),
                ln1_b=col(p + "attention.output.LayerNorm.bias"),
                wi=get(p + "intermediate.dense.weight"),
                bi=col(p + "intermediate.dense.bias"),
                wo2=get(p + "output.dense.weight"),
                bo2=col(p + "output.dense.bias"),
                ln2_g=col(p + "output.LayerNorm.weight"),
                ln2_b=col(p + "output.LayerNorm.bias"),
            )
        )
    word = get("embeddings.word_embeddings.weight")
    if word.shape[1] != DIM or layers[0].wqkv.shape != (3 * DIM, DIM):
        raise EmbeddingError(f"the weights at {path} do not have the all-MiniLM-L6-v2 shapes")
    return _Model(
        word=word,
        position=get("embeddings.position_embeddings.weight"),
        token_type0=get("embeddings.token_type_embeddings.weight")[0],
        ln_g=col("embeddings.LayerNorm.weight"),
        ln_b=col("embeddings.LayerNorm.bias"),
        layers=tuple(layers),
    )


def _forward(model: _Model, ids: NDArray[np.int64], lengths: NDArray[np.int64]) -> F32:
    """Run the encoder on a right-padded batch ``ids`` (B, L); return mean-pooled (B, 384) vectors.

    Activations are kept as (features, tokens) so every dense layer is ``W @ x`` on contiguous operands,
    which OpenBLAS runs fastest for the few-token batches typical of queries.
    """
    b, seq = ids.shape
    tokens = b * seq
    emb = model.word[ids]  # (B, L, 384), a fresh array
    emb += model.position[:seq]
    emb += model.token_type0
    x = np.ascontiguousarray(emb.reshape(tokens, DIM).T)  # (384, B*L)
    layer_norm_(x, model.ln_g, model.ln_b)
    padded = bool((lengths < seq).any())
    valid = np.arange(seq)[None, :] < lengths[:, None]  # (B, L)
    # Attention is computed transposed, (B, H, keys, queries), so softmax reduces over a non-last axis,
    # which numpy vectorises far better than many short last-axis reductions.
    bias = np.where(valid, np.float32(0.0), np.float32(-1e9)).astype(np.float32)[:, None, :, None]
    for layer in model.layers:
        qkv = layer.wqkv @ x
        qkv += layer.bqkv
        heads = qkv.reshape(3, NUM_HEADS, HEAD_DIM, b, seq)
        q_t = heads[0].transpose(2, 0, 1, 3)  # (B, H, d, L)
        k = heads[1].transpose(2, 0, 3, 1)  # (B, H, L, d)
        v_t = heads[2].transpose(2, 0, 1, 3)  # (B, H, d, L)
        scores = np.matmul(np.ascontiguousarray(k), np.ascontiguousarray(q_t))  # (B, H, keys, queries)
        if padded:
            scores += bias
        scores -= scores.max(axis=2, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=2, keepdims=True)
        ctx_t = np.matmul(np.ascontiguousarray(v_t), scores)  # (B, H, d, queries)
        ctx_t = np.ascontiguousarray(ctx_t.transpose(1, 2, 0, 3)).reshape(DIM, tokens)
        attn = layer.wo @ ctx_t
        attn += layer.bo
        attn += x
        x = layer_norm_(attn, layer.ln1_g, layer.ln1_b)
        h = layer.wi @ x
        h += layer.bi
        gelu_(h)
        out = layer.wo2 @ h
        out += layer.bo2
        out += x
        x = layer_norm_(out, layer.ln2_g, layer.ln2_b)
    x3 = x.reshape(DIM, b, seq)
    if not padded:
        pooled: F32 = x3.mean(axis=2).T
        return pooled
    summed: F32 = np.einsum("dbl,bl->bd", x3, valid.astype(np.float32))
    summed /= np.maximum(lengths, 1).astype(np.float32)[:, None]
    return summed


class LocalMiniLMEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2 run locally in numpy (384 dimensions, normalised).

    The model loads lazily on the first :meth:`embed` (or eagerly via :meth:`load`); instances are
    thread-safe.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        batch_size: int = 32,
        max_seq_length: int = MAX_SEQ_LENGTH,
        query_cache_size: int = 1024,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if not 2 <= max_seq_length <= 512:
            raise ValueError("max_seq_length must be between 2 and 512")
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.max_batch_tokens = max(1, max_batch_tokens)
        self._fingerprint = EmbeddingFingerprint(provider="local", model=MODEL_NAME, dim=DIM)
        self._lock = threading.Lock()
        self._model: Any = None  # the engine: _Model here, an onnxruntime session in a subclass
        self._tokenizer: Any = None
        self._cache_size = max(0, query_cache_size)
        self._cache: OrderedDict[str, F32] = OrderedDict()
        self._cache_lock = threading.Lock()

    @property
    def fingerprint(self) -> EmbeddingFingerprint:
        """``local:all-MiniLM-L6-v2:384``; available without loading the model."""
        return self._fingerprint

    @property
    def loaded(self) -> bool:
        """Whether the weights and tokenizer are in memory."""
        return self._model is not None

    def load(self) -> None:
        """Load the tokenizer and weights now (idempotent); raises :class:`EmbeddingError` on failure."""
        if self._model is not None:
            return
        with self._lock:
            if self._model is not None:
                return
            model_dir = self._model_dir if self._model_dir is not None else default_model_dir()
            weights = model_dir / "model.safetensors"
            tok_file = model_dir / "tokenizer.json"
            for f in (weights, tok_file):
                if not f.is_file():
                    raise EmbeddingError(f"the local embedding model is incomplete: {f} is missing")
            try:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(tok_file))
                tokenizer.no_padding()  # tokenizer.json pads everything to 128 otherwise
                tokenizer.enable_truncation(max_length=self.max_seq_length)
                model = self._load_engine(weights)
            except EmbeddingError:
                raise
            except Exception as exc:  # corrupt file, incompatible library...
                message = f"could not load the local embedding model from {model_dir}: {exc}"
                raise EmbeddingError(message) from exc
            self._tokenizer = tokenizer
            self._model = model

    def _load_engine(self, weights: Path) -> Any:
        """Load what :meth:`_run` needs from the safetensors weights (numpy arrays here)."""
        return _load_weights(weights)

    def _run(self, ids: NDArray[np.int64], lengths: NDArray[np.int64]) -> F32:
        """Mean-pooled (not yet normalised) vectors of one right-padded batch."""
        return _forward(self._model, ids, lengths)

    def embed(self, texts: Sequence[str], role: EmbedRole = "document") -> NDArray[np.float32]:
        """Embed texts into L2-normalised float32 vectors of shape ``(len(texts), 384)``, input order kept.

        The role does not change the vector (MiniLM has no query/document prefixes); single queries are
        served from a small LRU cache.
        """
        items = check_texts(texts, role)
        if not items:
            return np.zeros((0, DIM), dtype=np.float32)
        use_cache = role == "query" and len(items) == 1 and self._cache_size > 0
        if use_cache:
            with self._cache_lock:
                hit = self._cache.get(items[0])
                if hit is not None:
                    self._cache.move_to_end(items[0])
                    return hit.reshape(1, DIM).copy()
        result = self._embed_uncached(items)
        if use_cache:
            row = result[0].copy()
            row.flags.writeable = False
            with self._cache_lock:
                self._cache[items[0]] = row
                self._cache.move_to_end(items[0])
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return result

    def _batches(self, lengths: NDArray[np.int64], order: NDArray[np.intp]) -> list[NDArray[np.intp]]:
        """Split length-sorted positions into batches of at most ``batch_size`` texts and about
        ``max_batch_tokens`` padded tokens (at least one text each): small batches stay in CPU cache."""
        batches: list[NDArray[np.intp]] = []
        start = 0
        n = len(order)
        while start < n:
            end = start + 1
            while end < n and end - start < self.batch_size:
                if (end - start + 1) * int(lengths[order[end]]) > self.max_batch_tokens:
                    break
                end += 1
            batches.append(order[start:end])
            start = end
        return batches

    def _embed_uncached(self, items: list[str]) -> F32:
        self.load()
        tokenizer = self._tokenizer
        assert self._model is not None
        try:
            # encode_batch_fast (no offsets) exists from tokenizers 0.20 on.
            encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
            encodings = encode(items, add_special_tokens=True)
        except Exception as exc:
            raise EmbeddingError(f"tokenisation failed: {exc}") from exc
        token_ids = [e.ids for e in encodings]
        lengths = np.fromiter((len(ids) for ids in token_ids), dtype=np.int64, count=len(token_ids))
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(items), DIM), dtype=np.float32)
        for idx in self._batches(lengths, order):
            batch_lengths = lengths[idx]
            seq = int(batch_lengths.max())
            ids = np.zeros((len(idx), seq), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, : lengths[i]] = token_ids[i]
            out[idx] = self._run(ids, batch_lengths)
        return l2_normalize(out)
