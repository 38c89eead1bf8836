"""The embedding contract shared by every backend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

EmbedRole = Literal["document", "query"]
"""What a text is embedded as: a stored document or a search query."""

ROLES: tuple[EmbedRole, ...] = ("document", "query")


@dataclass(frozen=True)
class EmbeddingFingerprint:
    """Identifies the vector space an embedder writes into.

    Vectors produced under different fingerprints must never be compared with each other.
    """

    provider: str
    model: str
    dim: int

    def key(self) -> str:
        """Return a stable one-line key such as ``"local:all-MiniLM-L6-v2:384"``."""
        return f"{self.provider}:{self.model}:{self.dim}"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    @property
    def fingerprint(self) -> EmbeddingFingerprint:
        """The provider, model and dimension of the vectors this embedder returns."""
        ...

    def embed(self, texts: Sequence[str], role: EmbedRole = "document") -> NDArray[np.float32]:
        """Embed ``texts`` into a float32 array of shape ``(len(texts), dim)``.

        Each row is L2-normalised (an all-zero row stays zero). An empty input gives shape ``(0, dim)``.
        Raises :class:`memmy.errors.EmbeddingError` when the backend fails.
        """
        ...


def check_texts(texts: Sequence[str], role: str) -> list[str]:
    """Validate the arguments of :meth:`Embedder.embed` and return the texts as a list."""
    if isinstance(texts, str | bytes):
        raise TypeError("texts must be a sequence of strings, not a single string")
    if role not in ROLES:
        raise ValueError(f"role must be 'document' or 'query', got {role!r}")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, expected str")
    return out


def l2_normalize(matrix: NDArray[np.floating] | NDArray[np.float32]) -> NDArray[np.float32]:
    """Return ``matrix`` as float32 with unit-length rows; all-zero rows stay zero (no NaN)."""
    out = np.asarray(matrix, dtype=np.float32)
    if out.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {out.shape}")
    norms = np.sqrt(np.einsum("ij,ij->i", out, out, dtype=np.float64)).astype(np.float32)
    norms[norms == 0.0] = 1.0
    result: NDArray[np.float32] = out / norms[:, None]
    return result
