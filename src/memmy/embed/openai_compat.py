"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Ollama, vLLM, LM Studio, ...)."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
from numpy.typing import NDArray

from memmy.embed.base import EmbeddingFingerprint, EmbedRole, check_texts, l2_normalize
from memmy.errors import EmbeddingError

PROVIDER = "openai_compatible"
PROBE_TEXT = "dimension probe"
_BACKOFF_BASE_S = 0.25
_BACKOFF_MAX_S = 4.0
_BEARER_RE = re.compile(r"(?i)\bbearer\s+[^\s\"',;]+")
_SK_RE = re.compile(r"\bsk-[A-Za-z0-9_\-]{3,}")
_USERINFO_RE = re.compile(r"(?<=://)[^/@\s]+@")


def scrub_secrets(text: str, api_key: str | None = None) -> str:
    """Remove an API key (verbatim, ``Bearer ...``, ``sk-...``, URL user info) from ``text``."""
    if api_key:
        text = text.replace(api_key, "***")
    text = _BEARER_RE.sub("Bearer ***", text)
    text = _USERINFO_RE.sub("***@", text)
    return _SK_RE.sub("sk-***", text)


def embeddings_url(endpoint: str) -> str:
    """Return the ``.../embeddings`` URL for a base endpoint such as ``http://host:11434/v1``."""
    url = endpoint.strip().rstrip("/")
    return url if url.endswith("/embeddings") else f"{url}/embeddings"


class _Retryable(Exception):
    """A transient failure (connection error, timeout, 429, 5xx) worth another attempt."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OpenAICompatibleEmbedder:
    """Calls ``POST {endpoint}/embeddings`` with ``{"model": ..., "input": [...]}`` and normalises the answer.

    Blank texts are never sent (the OpenAI API rejects empty input): they get an all-zero vector. The
    dimension is taken from ``dim`` or discovered from the first answer. Instances are thread-safe.
    """

    def __init__(
        self,
        endpoint: str,
        model: str,
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = 32,
        timeout_ms: int = 60000,
        max_retries: int = 2,
    ) -> None:
        if not endpoint or not endpoint.strip():
            raise EmbeddingError("the openai_compatible embedder needs an endpoint URL")
        if not model or not model.strip():
            raise EmbeddingError("the openai_compatible embedder needs a model name")
        if not endpoint.strip().lower().startswith(("http://", "https://")):
            raise EmbeddingError(f"the embedding endpoint must be an http(s) URL, got {endpoint!r}")
        if dim is not None and dim < 1:
            raise EmbeddingError(f"the embedding dimension must be positive, got {dim}")
        self.url = embeddings_url(endpoint)
        try:
            httpx.URL(self.url)
        except Exception as exc:  # httpx.InvalidURL and friends
            message = f"invalid embedding endpoint {endpoint!r}: {exc}"
            raise EmbeddingError(scrub_secrets(message, api_key)) from None
        self.model = model.strip()
        self._api_key = api_key or None
        self._dim = dim
        self.batch_size = max(1, batch_size)
        self.timeout_s = max(1, timeout_ms) / 1000.0
        self.max_retries = max(0, max_retries)
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:
        return f"OpenAICompatibleEmbedder(url={self.url!r}, model={self.model!r}, dim={self._dim})"

    @property
    def dim(self) -> int | None:
        """The vector dimension, or None until the first answer when it was not given."""
        return self._dim

    @property
    def fingerprint(self) -> EmbeddingFingerprint:
        """``openai_compatible:<model>:<dim>``; makes one probe call when the dimension is still unknown."""
        if self._dim is None:
            self.embed([PROBE_TEXT])
        assert self._dim is not None
        return EmbeddingFingerprint(provider=PROVIDER, model=self.model, dim=self._dim)

    def embed(self, texts: Sequence[str], role: EmbedRole = "document") -> NDArray[np.float32]:
        """Embed texts (in batches of ``batch_size``) into L2-normalised float32 rows, input order kept.

        ``role`` is accepted for the :class:`Embedder` contract; the endpoint gets the same request for
        either role. While the dimension is unknown, a call with nothing to send (empty or blank texts)
        makes one probe request so that the result can have shape ``(n, dim)``.
        """
        items = check_texts(texts, role)
        wanted = [i for i, text in enumerate(items) if text.strip()]
        chunks: list[NDArray[np.float32]] = []
        for start in range(0, len(wanted), self.batch_size):
            batch = [items[i] for i in wanted[start : start + self.batch_size]]
            chunks.append(self._request(batch))
        if self._dim is None:
            self._request([PROBE_TEXT])  # nothing was sent: learn the dimension for the (0, dim) / zero rows
        assert self._dim is not None
        out = np.zeros((len(items), self._dim), dtype=np.float32)
        if chunks:
            out[wanted] = np.concatenate(chunks, axis=0)
        return l2_normalize(out)

    def close(self) -> None:
        """Close the pooled HTTP connections (the embedder reopens them if used again)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> OpenAICompatibleEmbedder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- HTTP -----------------------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s))
            return self._client

    def _fail(self, message: str) -> EmbeddingError:
        text = f"embedding request to {self.url} failed: {message}"
        return EmbeddingError(scrub_secrets(text, self._api_key))

    def _request(self, batch: list[str]) -> NDArray[np.float32]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = {"model": self.model, "input": batch}
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._attempt(payload, headers, len(batch))
            except _Retryable as exc:
                if attempt + 1 >= attempts:
                    raise self._fail(f"{exc} (gave up after {attempts} attempts)") from None
                delay = min(_BACKOFF_BASE_S * 2**attempt, _BACKOFF_MAX_S)
                if exc.retry_after is not None:
                    delay = min(max(exc.retry_after, 0.0), _BACKOFF_MAX_S)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _attempt(self, payload: dict[str, Any], headers: dict[str, str], n: int) -> NDArray[np.float32]:
        try:
            response = self._http().post(self.url, json=payload, headers=headers)
        except httpx.TimeoutException:
            raise _Retryable(f"timed out after {self.timeout_s:g} s") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"cannot connect ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # other httpx errors (invalid URL, decoding...)
            raise self._fail(f"{type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status >= 400:
            detail = f"HTTP {status}: {_excerpt(response)}"
            if status == 429 or status >= 500:
                raise _Retryable(detail, _retry_after(response))
            hint = " (check the API key)" if status in (401, 403) else ""
            raise self._fail(detail + hint)
        try:
            body = response.json()
        except ValueError:
            raise self._fail(f"the answer is not JSON: {_excerpt(response)}") from None
        return self._parse(body, n)

    def _parse(self, body: Any, n: int) -> NDArray[np.float32]:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise self._fail("the answer has no 'data' list")
        if len(data) != n:
            raise self._fail(f"asked for {n} embeddings, got {len(data)}")
        rows: list[Any] = [None] * n
        for pos, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
                raise self._fail(f"data[{pos}] has no 'embedding' list")
            index = item.get("index", pos)
            if not isinstance(index, int) or not 0 <= index < n or rows[index] is not None:
                raise self._fail(f"data[{pos}] has a bad or repeated index {index!r}")
            rows[index] = item["embedding"]
        try:
            matrix = np.array(rows, dtype=np.float64)
        except (TypeError, ValueError):
            raise self._fail("the embeddings are not numeric lists of one length") from None
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise self._fail("the embeddings are not numeric lists of one length")
        if not np.isfinite(matrix).all():
            raise self._fail("the embeddings contain NaN or infinite values")
        dim = matrix.shape[1]
        with self._lock:
            if self._dim is None:
                self._dim = dim
        if dim != self._dim:
            raise self._fail(f"the endpoint returned {dim}-dimensional vectors, expected {self._dim}")
        return matrix.astype(np.float32)


def _excerpt(response: httpx.Response, limit: int = 300) -> str:
    try:
        text = response.text
    except Exception:  # undecodable body
        return "<unreadable body>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None
