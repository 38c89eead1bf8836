"""Text embeddings: the :class:`Embedder` contract, the local MiniLM (onnxruntime, numpy fallback), the optional
multilingual-e5-small, OpenAI-compatible endpoints, and where each model's cosine stands on MiniLM's scale."""

from memmy.embed.base import Embedder, EmbeddingFingerprint, EmbedRole, l2_normalize
from memmy.embed.factory import LOCAL_MODEL_ALIASES, SUPPORTED_PROVIDERS, build_embedder
from memmy.embed.minilm import LocalMiniLMEmbedder
from memmy.embed.onnx_minilm import OnnxMiniLMEmbedder, model_cache_dir
from memmy.embed.openai_compat import OpenAICompatibleEmbedder

__all__ = [
    "LOCAL_MODEL_ALIASES",
    "SUPPORTED_PROVIDERS",
    "EmbedRole",
    "Embedder",
    "EmbeddingFingerprint",
    "LocalMiniLMEmbedder",
    "OnnxMiniLMEmbedder",
    "OpenAICompatibleEmbedder",
    "build_embedder",
    "l2_normalize",
    "model_cache_dir",
]
