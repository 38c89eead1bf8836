"""An OpenAI-compatible chat client for JSON answers (OpenAI, DeepSeek, Qwen, Kimi, Ollama, LM Studio ...).

Used by optional, time-boxed steps (query extraction, relevance filter, query rewrite, evolution). Every failure
is an :class:`LLMError` whose message never carries the API key; callers fall back to rules. The whole call,
retries and backoff included, stays inside the caller's ``timeout_s``. Every HTTP exchange that reached the
server is reported to an optional ``on_usage`` callback with the tokens it spent (read from ``usage`` or
estimated), which is how :mod:`memmy.llm.budget` counts calls and tokens per day.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from memmy.errors import MemmyError

log = logging.getLogger(__name__)

_SECRET = re.compile(r"(Bearer\s+)[A-Za-z0-9._\-]+|sk-[A-Za-z0-9_\-]{8,}|(api[_-]?key[\"'=:\s]+)[^\s\"',}]+", re.I)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCED = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)(?:```|$)", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")

#: Base URLs used when a slot names a vendor but no endpoint.
VENDOR_ENDPOINTS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "qwen": "https://dashscope.aliyuncs.com/compatible-mode/v1",
    "kimi": "https://api.moonshot.cn/v1",
    "zhipu": "https://open.bigmodel.cn/api/paas/v4",
    "doubao": "https://ark.cn-beijing.volces.com/api/v3",
    "minimax": "https://api.minimax.chat/v1",
}

#: Statuses worth another attempt: rate limits and server-side failures.
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
#: Appended to the prompt when a malformed answer is asked again: the same prompt at temperature 0 gets the
#: same prose back from a deterministic local server.
JSON_REMINDER = "\n\n(Your previous answer was not JSON. Answer with the JSON object only, nothing else.)"
_MIN_ATTEMPT_S = 0.05  # below this much time left another attempt cannot succeed


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
class LLMUsage:
    """What one HTTP exchange with the model spent.

    ``status`` is the HTTP status, or 0 when the server took the request but no answer came in time (its
    prompt is then counted as spent). ``estimated`` is True when the server sent no ``usage`` and the tokens
    are ceil(chars / 4).
    """

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    estimated: bool
    status: int


UsageCallback = Callable[[LLMUsage], None]


@dataclass(frozen=True)
class LLMEndpoint:
    """Where and how to call one chat model."""

    endpoint: str
    model: str
    api_key: str = ""
    temperature: float = 0.0
    max_tokens: int = 512
    vendor: str = "openai_compatible"
    enable_thinking: bool = False
    max_retries: int = 0
    json_mode: bool = True
    repeat_penalty: float = 0.0

    def __repr__(self) -> str:
        key = "[redacted]" if self.api_key else ""
        return f"LLMEndpoint(endpoint={self.endpoint!r}, model={self.model!r}, vendor={self.vendor!r}, api_key={key!r})"


def resolve_endpoint(endpoint: str, vendor: str) -> str:
    """The endpoint to call: the configured one, else the vendor's public base URL, else ""."""
    return endpoint or VENDOR_ENDPOINTS.get(vendor, "")


def thinking_fields(vendor: str, enabled: bool) -> dict[str, Any]:
    """Vendor-specific request fields that turn reasoning on; nothing when thinking is off.

    Endpoints that reject them answer 400, after which the client drops them for good (see ``complete_json``).
    """
    if not enabled:
        return {}
    if vendor in ("zhipu", "doubao"):
        return {"thinking": {"type": "enabled"}}
    if vendor == "qwen":
        return {"enable_thinking": True}
    return {}


def estimate_tokens(chars: int) -> int:
    """The usual ceil(chars / 4) token estimate."""
    return math.ceil(max(chars, 0) / 4)


def usage_of(payload: Any, prompt_chars: int, answer_chars: int, status: int) -> LLMUsage:
    """Read ``usage`` from a chat-completions answer, estimating whatever the server left out."""
    raw = payload.get("usage") if isinstance(payload, dict) else None
    raw = raw if isinstance(raw, dict) else {}

    def count(key: str) -> int | None:
        value = raw.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None

    prompt, completion, total = count("prompt_tokens"), count("completion_tokens"), count("total_tokens")
    estimated = prompt is None and completion is None and total is None
    if estimated:
        prompt, completion = estimate_tokens(prompt_chars), estimate_tokens(answer_chars)
    if prompt is None:
        prompt = max((total or 0) - (completion or 0), 0)
    if completion is None:
        completion = max((total or 0) - prompt, 0)
    return LLMUsage(prompt, completion, total if total is not None else prompt + completion, estimated, status)


def _repair(text: str) -> str:
    """Close what a cut-off answer left open and drop trailing commas (``{"a": [1, 2,`` -> ``{"a": [1, 2]}``)."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    repaired = text + ('"' if in_string else "")
    repaired = re.sub(r"[,:]\s*$", "", repaired.rstrip())
    repaired = _TRAILING_COMMA.sub(r"\1", repaired + "".join(reversed(stack)))
    return repaired


def _first_json(text: str) -> Any:
    """The first JSON value in ``text`` (prose before it and anything after it ignored), repaired if cut off.

    A later ``{`` or ``[`` is tried only when the first cannot be read even repaired, and only at the start of a
    line (JSON after a line of prose); one inside the first value's strings is never taken for the answer.
    """
    decoder = json.JSONDecoder()
    first = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    later = [i for i, ch in enumerate(text) if ch in "{[" and i > first and text[:i].rstrip(" \t").endswith("\n")]
    starts = ([first] if first >= 0 else []) + later[:8]
    for n, start in enumerate(starts):
        try:
            return decoder.raw_decode(text, start)[0]
        except json.JSONDecodeError:
            pass
        if n == 0:
            try:
                return json.loads(_repair(text[start:]))
            except json.JSONDecodeError:
                pass
    raise ValueError("no JSON value")


def parse_json_answer(content: str) -> Any:
    """Parse a model's JSON answer, tolerating what small models wrap it in.

    ``<think>`` blocks, code fences anywhere, prose before or after the JSON, a second JSON value after the
    first, trailing commas and an answer cut off by the token limit (open strings, lists and objects closed).
    """
    text = _THINK.sub("", content).strip()
    fenced = _FENCED.search(text)
    candidates = [fenced.group(1).strip(), text] if fenced else [_FENCE.sub("", text)]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            pass
        try:
            return _first_json(candidate)
        except ValueError:
            continue
    raise LLMError(f"model answer is not valid JSON: {scrub(content)[:200]!r}")


def _content_of(payload: Any) -> str:
    """``choices[0].message.content`` as text (some servers send a list of text parts)."""
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError("model endpoint answered without choices[0].message.content") from None
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    if not isinstance(content, str) or not content.strip():
        raise LLMError("model endpoint answered with an empty message")
    return content


class _Transient(Exception):
    """An attempt failed in a way another attempt may fix."""


class OpenAICompatibleLLM:
    """POST ``{endpoint}/chat/completions`` in JSON mode, time-boxed, with retries.

    Transient failures (HTTP 408/429/5xx, connection errors) are retried up to ``config.max_retries`` times
    with a backoff of at most 0.5 s x attempt; a malformed JSON answer is asked again ``malformed_retries``
    times, with :data:`JSON_REMINDER` after the prompt; a 400 naming ``response_format``, ``repeat_penalty``
    (or the thinking flag) is asked again once without it, and the field stays off for this client (Ollama and
    LM Studio variants). ``json_mode=False`` never sends ``response_format`` (llama.cpp's server turns it into a
    grammar that made a 0.5B model 5-10x slower); ``repeat_penalty > 0`` sends llama.cpp's and Ollama's repeat
    penalty. Nothing goes past ``timeout_s``.
    """

    def __init__(
        self, config: LLMEndpoint, malformed_retries: int = 1, *, on_usage: UsageCallback | None = None
    ) -> None:
        self.config = config
        self.malformed_retries = malformed_retries
        self.on_usage = on_usage
        self._dropped: set[str] = set()  # request fields this endpoint rejected

    def _url(self) -> str:
        base = resolve_endpoint(self.config.endpoint, self.config.vendor).rstrip("/")
        return base if base.endswith("/chat/completions") else f"{base}/chat/completions"

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def request_body(self, system: str, user: str) -> dict[str, Any]:
        """The chat-completions request for one prompt, minus fields this endpoint already rejected."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        if self.config.json_mode and "response_format" not in self._dropped:
            body["response_format"] = {"type": "json_object"}
        if self.config.repeat_penalty > 0 and "repeat_penalty" not in self._dropped:
            body["repeat_penalty"] = self.config.repeat_penalty
        if "thinking" not in self._dropped:
            body.update(thinking_fields(self.config.vendor, self.config.enable_thinking))
        return body

    def _report(self, usage: LLMUsage, on_usage: UsageCallback | None) -> None:
        for callback in (self.on_usage, on_usage):
            if callback is not None:
                callback(usage)

    def _secret_free(self, text: str) -> str:
        if self.config.api_key and len(self.config.api_key) >= 4:
            text = text.replace(self.config.api_key, "[redacted]")
        return scrub(text)

    def _exchange(self, body: dict[str, Any], deadline: float) -> tuple[int, bytes]:
        """One POST whose connect, send and read all end by ``deadline``."""
        remaining = deadline - time.monotonic()
        with httpx.stream("POST", self._url(), json=body, headers=self._headers(), timeout=remaining) as response:
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise LLMError(f"model endpoint answered more than {MAX_RESPONSE_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("deadline passed while reading the answer")
            return response.status_code, b"".join(chunks)

    def _rejected_field(self, status: int, text: str, body: dict[str, Any]) -> str | None:
        """The optional field a 400/422 complains about, if it is one we can drop."""
        if status not in (400, 422):
            return None
        lowered = text.lower()
        if "response_format" in body and ("response_format" in lowered or "json_object" in lowered):
            return "response_format"
        if "repeat_penalty" in body and "repeat_penalty" in lowered:
            return "repeat_penalty"
        thinking = thinking_fields(self.config.vendor, self.config.enable_thinking)
        if thinking and any(key in body for key in thinking) and "thinking" in lowered:
            return "thinking"
        return None

    def complete_json(self, system: str, user: str, *, timeout_s: float, on_usage: UsageCallback | None = None) -> Any:
        """One JSON completion within ``timeout_s`` seconds in total; ``on_usage`` sees every exchange."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        prompt_chars = len(system) + len(user)
        transient_left = max(self.config.max_retries, 0)
        malformed_left = max(self.malformed_retries, 0)
        attempt, reminded = 0, False
        while True:
            attempt += 1
            body = self.request_body(system, user if attempt == 1 or not reminded else user + JSON_REMINDER)
            try:
                return self._attempt(body, deadline, timeout_s, prompt_chars, on_usage)
            except _Transient as exc:
                reason = str(exc)
                if transient_left <= 0:
                    raise LLMError(f"{reason} (after {attempt} attempt{'s' if attempt > 1 else ''})") from None
                transient_left -= 1
                backoff = 0.5 * attempt
            except _Malformed as exc:
                if malformed_left <= 0:
                    raise exc.error from None
                malformed_left -= 1
                reason, backoff, reminded = exc.error.message, 0.0, True
            except _Rejected as exc:
                self._dropped.add(exc.field)
                reason, backoff = f"endpoint rejected {exc.field}; asking again without it", 0.0
            remaining = deadline - time.monotonic()
            if remaining - backoff < _MIN_ATTEMPT_S:
                raise LLMError(f"{reason}; no time left for another attempt within {timeout_s:.1f} s")
            log.info("LLM attempt %d to %s failed, retrying: %s", attempt, self.config.model, reason)
            if backoff:
                time.sleep(backoff)

    def _attempt(
        self, body: dict[str, Any], deadline: float, timeout_s: float, prompt_chars: int, on_usage: UsageCallback | None
    ) -> Any:
        """One HTTP exchange and its interpretation; raises the private retry signals or LLMError."""
        if deadline - time.monotonic() <= 0:
            raise LLMError(f"model did not answer within {timeout_s:.1f} s")
        try:
            status, raw = self._exchange(body, deadline)
        except httpx.ConnectTimeout:
            raise LLMError(f"model endpoint could not be reached within {timeout_s:.1f} s") from None
        except httpx.TimeoutException:
            # The server had the prompt: count it as spent.
            self._report(LLMUsage(estimate_tokens(prompt_chars), 0, estimate_tokens(prompt_chars), True, 0), on_usage)
            raise LLMError(f"model did not answer within {timeout_s:.1f} s") from None
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise _Transient(f"model endpoint unreachable: {self._secret_free(str(exc))}") from None
        except httpx.HTTPError as exc:
            raise LLMError(f"model endpoint failed: {self._secret_free(str(exc))}") from None
        text = raw.decode("utf-8", errors="replace")
        if status >= 400:
            self._report(LLMUsage(0, 0, 0, False, status), on_usage)
            message = f"model endpoint answered HTTP {status}: {self._secret_free(text)[:200]}"
            field = self._rejected_field(status, text, body)
            if field is not None and field not in self._dropped:
                raise _Rejected(field)
            if status in TRANSIENT_STATUSES:
                raise _Transient(message)
            raise LLMError(message)
        try:
            payload = json.loads(text)
        except ValueError:
            payload = None
        try:
            content = _content_of(payload)
        except LLMError as exc:
            self._report(usage_of(payload, prompt_chars, len(text), status), on_usage)
            raise _Malformed(exc) from None
        self._report(usage_of(payload, prompt_chars, len(content), status), on_usage)
        try:
            return parse_json_answer(content)
        except LLMError as exc:
            raise _Malformed(LLMError(self._secret_free(exc.message))) from None


class _Malformed(Exception):
    """The model answered, but not with JSON."""

    def __init__(self, error: LLMError) -> None:
        super().__init__(error.message)
        self.error = error


class _Rejected(Exception):
    """The endpoint refused an optional request field."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field
