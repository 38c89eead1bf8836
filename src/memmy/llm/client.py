"""An OpenAI-compatible chat client for JSON answers (OpenAI, DeepSeek, Qwen, Kimi, Ollama, LM Studio ...).

Used by optional, time-boxed steps (query extraction, relevance filter, query rewrite). Every failure is
an :class:`LLMError` whose message never carries the API key; callers fall back to rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from memmy.errors import MemmyError

_SECRET = re.compile(r"(Bearer\s+)[A-Za-z0-9._\-]+|sk-[A-Za-z0-9_\-]{8,}|(api[_-]?key[\"'=:\s]+)[^\s\"',}]+", re.I)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.S)


class LLMError(MemmyError):
    """The model could not be called or did not answer with the expected JSON."""

    code = "llm_failed"


def scrub(text: str) -> str:
    """Remove bearer tokens and API keys from text destined for logs or errors."""
    return _SECRET.sub(lambda m: (m.group(1) or m.group(2) or "") + "[redacted]", text)


class JsonLLM(Protocol):
    """What recall and evolution need from a model."""

    def complete_json(self, system: str, user: str, *, timeout_s: float) -> Any:
        """Return the parsed JSON answer or raise :class:`LLMError`."""
        ...


@dataclass(frozen=True)
class LLMEndpoint:
    """Where and how to call one chat model."""

    endpoint: str
    model: str
    api_key: str = ""
    temperature: float = 0.0
    max_tokens: int = 512


def parse_json_answer(content: str) -> Any:
    """Parse a model's JSON answer, tolerating code fences and leading prose."""
    text = _FENCE.sub("", content.strip())
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
        if start >= 0:
            try:
                return json.loads(text[start:])
            except json.JSONDecodeError:
                pass
    raise LLMError(f"model answer is not valid JSON: {scrub(content[:200])!r}")


class OpenAICompatibleLLM:
    """POST ``{endpoint}/chat/completions`` with JSON mode; one retry on malformed JSON."""

    def __init__(self, config: LLMEndpoint, malformed_retries: int = 1) -> None:
        self.config = config
        self.malformed_retries = malformed_retries

    def _url(self) -> str:
        base = self.config.endpoint.rstrip("/")
        return base if base.endswith("/chat/completions") else f"{base}/chat/completions"

    def complete_json(self, system: str, user: str, *, timeout_s: float) -> Any:
        """One JSON completion within ``timeout_s`` seconds."""
        headers = {"content-type": "application/json"}
        if self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        body = {
            "model": self.config.model,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        last_error: LLMError | None = None
        for _attempt in range(self.malformed_retries + 1):
            try:
                response = httpx.post(self._url(), json=body, headers=headers, timeout=timeout_s)
            except httpx.TimeoutException:
                raise LLMError(f"model did not answer within {timeout_s:.1f} s") from None
            except httpx.HTTPError as exc:
                raise LLMError(f"model endpoint unreachable: {scrub(str(exc))}") from None
            if response.status_code >= 400:
                raise LLMError(f"model endpoint answered HTTP {response.status_code}: {scrub(response.text[:200])}")
            try:
                content = response.json()["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                raise LLMError("model endpoint answered without choices[0].message.content") from None
            try:
                return parse_json_answer(str(content))
            except LLMError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error
