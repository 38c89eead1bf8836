"""Model providers through their official SDKs: OpenAI Chat Completions (and every compatible endpoint), Anthropic
Messages and Gemini (``google-genai``). All stream; all return one :class:`Completion` in the OpenAI message shape
the loop uses.
SDK errors become a :class:`ProviderError` whose message says what happened and what to do."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from memmy.agent.config import ModelChoice
from memmy.errors import MemmyError

TextSink = Callable[[str], None]
Options = Mapping[str, Any]

#: Chat Completions fields that ``memmy serve`` handles itself; every other field of a request is an option the
#: provider gets as it came (``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``tool_choice``,
#: ``response_format``, ``seed`` …; a field the SDK does not name, like vLLM's ``top_k``, travels in the body).
SERVE_FIELDS = frozenset({"model", "messages", "stream", "stream_options", "tools"})


#: Named ``messages.create`` parameters among what :func:`anthropic_options` produces.
ANTHROPIC_PARAMS = frozenset({"max_tokens", "metadata", "stop_sequences", "tool_choice"})


def request_options(body: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The provider options of a Chat Completions request, or an error for what one answer cannot carry."""
    if body.get("n") not in (None, 1):
        return {}, "n: memmy serve returns one choice; send n=1 (or leave it out)"
    if body.get("logprobs") or body.get("top_logprobs"):
        return {}, "logprobs: not relayed by memmy serve; leave logprobs/top_logprobs out"
    options = {k: v for k, v in body.items() if k not in SERVE_FIELDS and k not in ("n", "logprobs", "top_logprobs")}
    return {k: v for k, v in options.items() if v is not None}, None


def anthropic_options(options: Options) -> dict[str, Any]:
    """Chat Completions options in the Messages API's terms (what it has no equivalent for is left out)."""
    out: dict[str, Any] = {}
    for key in ("temperature", "top_p", "top_k", "metadata"):
        if key in options and (key != "metadata" or isinstance(options[key], dict)):
            out[key] = options[key]
    stop = options.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    limit = options.get("max_completion_tokens") or options.get("max_tokens")
    if limit:
        out["max_tokens"] = limit
    choice = options.get("tool_choice")
    if choice in ("auto", "none"):
        out["tool_choice"] = {"type": choice}
    elif choice == "required":
        out["tool_choice"] = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out["tool_choice"] = {"type": "tool", "name": choice["function"].get("name", "")}
    if options.get("parallel_tool_calls") is False and "tool_choice" in out and choice != "none":
        out["tool_choice"]["disable_parallel_tool_use"] = True
    if isinstance(options.get("user"), str) and "metadata" not in out:
        out["metadata"] = {"user_id": options["user"]}
    return out


class ProviderError(MemmyError):
    """A model call that failed; ``kind`` is unreachable, timeout, rate_limited, auth, bad_request or error."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class ToolCall:
    """One tool call the model asked for; ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str

    def as_message(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Completion:
    """A finished model answer."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str = "stop"
    cost: float = 0.0  # what the provider says the call cost (OpenRouter's usage.cost), 0 when it does not say


class Provider(Protocol):
    """What the loop needs from a model."""

    choice: ModelChoice

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
        options: Options | None = None,
    ) -> Completion:
        """Send the conversation, stream text to ``on_text``, return the whole answer (``options``: sampling)."""
        ...


def _status_message(choice: ModelChoice, exc: Exception) -> ProviderError:
    import anthropic
    import openai

    where = f"{choice.provider} ({choice.api_base or 'default endpoint'})"
    if isinstance(exc, openai.APITimeoutError | anthropic.APITimeoutError):
        return ProviderError(f"{where} did not answer within {choice.timeout_s:g} s; try again", "timeout")
    if isinstance(exc, openai.APIConnectionError | anthropic.APIConnectionError):
        return ProviderError(f"cannot reach {where}: is it running and is apiBase right?", "unreachable")
    if isinstance(exc, openai.RateLimitError | anthropic.RateLimitError):
        return ProviderError(f"{where} is rate limiting requests (HTTP 429); wait a moment and retry", "rate_limited")
    if isinstance(exc, openai.AuthenticationError | anthropic.AuthenticationError):
        return ProviderError(
            f"{where} refused the API key (HTTP 401); check providers.{choice.provider}.apiKey", "auth"
        )
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        detail = str(getattr(exc, "message", "") or exc)[:300]
        kind = "bad_request" if exc.status_code < 500 else "error"
        return ProviderError(f"{where} answered HTTP {exc.status_code}: {detail}", kind)
    if isinstance(exc, openai.APIError | anthropic.APIError):
        return ProviderError(f"{where} sent an answer memmy could not read: {str(exc)[:300]}", "error")
    return ProviderError(f"{where} failed: {type(exc).__name__}: {str(exc)[:300]}", "error")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every provider client of the process (the same one httpx builds by default, honouring
    ``SSL_CERT_FILE``): reading the CA bundle takes tens of milliseconds, and a host of many sessions (``memmy serve``
    with chat channels: a client per chat) would pay it, on the event loop, for each."""
    import httpx

    return httpx.create_ssl_context()


def know_platform(client: Any, sdk: Any) -> None:
    """Give a Stainless-made SDK client (``openai``, ``anthropic``) the platform it names in its headers now: it
    looks it up at its first request, in a thread, and a client shared by many chats had each of their first turns
    wait for that thread (20 chats at once: 20 thread hops in front of the first requests)."""
    with contextlib.suppress(AttributeError):  # a private detail of the SDK: without it the SDK looks it up itself
        if getattr(client, "_platform", "") is None:
            client._platform = sdk._base_client.get_platform()


class OpenAIProvider:
    """Chat Completions through ``openai.AsyncOpenAI`` (OpenAI, DeepSeek, Ollama, vLLM, any base URL)."""

    def __init__(self, choice: ModelChoice) -> None:
        import openai  # the SDKs load with the first provider, not with every `memmy` command

        self.choice = choice
        self.sdk = openai
        # chunks as the JSON objects they came as (the SDK's ``cast_to=object``): its SSE decoding, error events,
        # retries and draining stay, without a typed ChatCompletionChunk built field by field for every chunk (a
        # third of a chat turn's CPU with a few chunks an answer, more with a real model's chunk per token)
        self.chunks = openai.AsyncStream[object]
        self.client = openai.AsyncOpenAI(
            api_key=choice.api_key or "not-needed",
            base_url=choice.api_base or None,
            timeout=choice.timeout_s,
            max_retries=choice.max_retries,
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
        )
        know_platform(self.client, openai)

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
        options: Options | None = None,
    ) -> Completion:
        """Stream one answer; tool-call fragments are joined by index."""
        kwargs: dict[str, Any] = {"model": self.choice.model, "messages": messages, "stream": True}
        kwargs["stream_options"] = {"include_usage": True}
        if tools:
            kwargs["tools"] = tools
        options = options or {}
        if "max_tokens" not in options and "max_completion_tokens" not in options:
            limit = "max_completion_tokens" if self.choice.provider == "openai" else "max_tokens"
            kwargs[limit] = self.choice.max_tokens
        kwargs.update(options)  # the OpenAI parameters and the extra ones a gateway takes, in one JSON body
        done = Completion()
        parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        try:
            # The SDK's documented route for a raw body (``client.post``) instead of ``chat.completions.create``:
            # the body is plain JSON already, and create's typed transform of it (every message and tool schema,
            # walked against the TypedDicts) cost ~10 ms of event-loop time a request, more than the rest of a chat
            # turn together (bench/channels.py --profile).
            response = await self.client.post(
                "/chat/completions", body=kwargs, cast_to=object, stream=True, stream_cls=self.chunks
            )
            async for chunk in response:
                if isinstance(chunk, dict):
                    _read_chunk(chunk, done, parts, calls, on_text)
        except self.sdk.OpenAIError as exc:
            raise _status_message(self.choice, exc) from None
        done.text = "".join(parts)
        done.tool_calls = [
            ToolCall(slot["id"] or f"call_{index}", slot["name"], slot["arguments"])
            for index, slot in sorted(calls.items())
        ]
        return done


def _read_chunk(
    chunk: dict[str, Any],
    done: Completion,
    parts: list[str],
    calls: dict[int, dict[str, str]],
    on_text: TextSink | None,
) -> None:
    """Add one streamed Chat Completions chunk (its JSON object) to the answer: text, tool-call fragments joined by
    index, the finish reason, and the usage the last chunk carries."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        done.usage = {
            "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "completion_tokens": int(usage.get("completion_tokens") or 0),
        }
        cost = usage.get("cost")  # an extra field some gateways send
        done.cost = float(cost) if isinstance(cost, int | float) else 0.0
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, str) and content:
            parts.append(content)
            if on_text is not None:
                on_text(content)
        for fragment in delta.get("tool_calls") or []:
            slot = calls.setdefault(int(fragment.get("index") or 0), {"id": "", "name": "", "arguments": ""})
            if fragment.get("id"):
                slot["id"] = str(fragment["id"])
            function = fragment.get("function") or {}
            slot["name"] += str(function.get("name") or "")
            slot["arguments"] += str(function.get("arguments") or "")
        if choice.get("finish_reason"):
            done.finish_reason = str(choice["finish_reason"])


def to_anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-shaped messages -> (system text, Anthropic messages with tool_use / tool_result blocks)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        content = message.get("content") or ""
        if role == "system":
            system.append(str(content))
        elif role == "tool":
            block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""), "content": str(content)}
            push("user", [block])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": str(content)}] if content else []
            for call in message.get("tool_calls") or []:
                try:
                    args = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    args = {}
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": args})
            if blocks:
                push("assistant", blocks)
        else:
            push("user", user_blocks(content))
    return "\n\n".join(system), out


def user_blocks(content: Any) -> list[dict[str, Any]]:
    """A user message's content as Anthropic blocks: text, and ``data:`` image parts as base64 image blocks."""
    if not isinstance(content, list):
        return [{"type": "text", "text": str(content)}]
    blocks: list[dict[str, Any]] = []
    for part in content:
        url = str((part.get("image_url") or {}).get("url", "")) if isinstance(part, dict) else ""
        if url.startswith("data:") and ";base64," in url:
            media, data = url[5:].split(";base64,", 1)
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
        elif isinstance(part, dict) and part.get("type") == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
    return blocks


class AnthropicProvider:
    """Messages through ``anthropic.AsyncAnthropic``, streamed from the raw events."""

    def __init__(self, choice: ModelChoice) -> None:
        import anthropic

        self.choice = choice
        self.sdk = anthropic
        self.client = anthropic.AsyncAnthropic(
            api_key=choice.api_key or "not-needed",
            base_url=choice.api_base or None,
            timeout=choice.timeout_s,
            max_retries=choice.max_retries,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        )
        know_platform(self.client, anthropic)

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
        options: Options | None = None,
    ) -> Completion:
        """Stream one answer; ``tool_use`` blocks become tool calls."""
        system, converted = to_anthropic(messages)
        kwargs: dict[str, Any] = {
            "model": self.choice.model,
            "messages": converted,
            "max_tokens": self.choice.max_tokens,
            "stream": True,
        }
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = [
                {
                    "name": t["function"]["name"],
                    "description": t["function"].get("description", ""),
                    "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}},
                }
                for t in tools
            ]
        translated = anthropic_options(options or {})
        if not tools:
            translated.pop("tool_choice", None)
        # The SDK names some fields; the rest (temperature, top_p, top_k in recent SDKs) travel in the body.
        kwargs.update({k: v for k, v in translated.items() if k in ANTHROPIC_PARAMS})
        extra = {k: v for k, v in translated.items() if k not in ANTHROPIC_PARAMS}
        if extra:
            kwargs["extra_body"] = extra
        done = Completion()
        parts: list[str] = []
        blocks: dict[int, dict[str, str]] = {}
        try:
            events = await self.client.messages.create(**kwargs)
            async for event in events:
                kind = event.type
                if kind == "message_start":
                    done.usage["prompt_tokens"] = event.message.usage.input_tokens or 0
                elif kind == "content_block_start" and event.content_block.type == "tool_use":
                    block = event.content_block
                    blocks[event.index] = {"id": block.id, "name": block.name, "arguments": ""}
                elif kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        parts.append(delta.text)
                        if on_text is not None:
                            on_text(delta.text)
                    elif delta.type == "input_json_delta" and event.index in blocks:
                        blocks[event.index]["arguments"] += delta.partial_json
                elif kind == "message_delta":
                    done.usage["completion_tokens"] = event.usage.output_tokens or 0
                    if event.delta.stop_reason:
                        done.finish_reason = "tool_calls" if event.delta.stop_reason == "tool_use" else "stop"
        except self.sdk.AnthropicError as exc:
            raise _status_message(self.choice, exc) from None
        done.text = "".join(parts)
        done.tool_calls = [ToolCall(b["id"], b["name"], b["arguments"] or "{}") for _, b in sorted(blocks.items())]
        return done


#: The separator between a Gemini function call's id and its thought signature inside one OpenAI tool-call id
#: (Gemini 3 wants each call's signature back with the call; the loop keeps only OpenAI-shaped messages).
_SIGNATURE = "~sig~"
#: The prefix of the ids memmy gives calls the model sent without one (never sent back to Gemini as an id).
_LOCAL_ID = "gemini-call-"


def _gemini_part(part: Any) -> Any:
    """An OpenAI user content part as a Gemini part: text, or a ``data:`` image as inline bytes (else None)."""
    from google.genai import types

    if not isinstance(part, dict):
        return None
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return types.Part(inline_data=types.Blob(mime_type=media, data=base64.b64decode(data)))
    if part.get("type") == "text":
        return types.Part(text=str(part.get("text", "")))
    return None


def _gemini_id(call_id: str) -> str | None:
    """The id Gemini gave a function call (None where memmy made one up)."""
    own = str(call_id).split(_SIGNATURE, 1)[0]
    return None if not own or own.startswith(_LOCAL_ID) else own


def to_gemini(messages: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """OpenAI-shaped messages -> (system instruction, Gemini contents with function call / response parts)."""
    from google.genai import types

    system: list[str] = []
    out: list[types.Content] = []
    names: dict[str, str] = {}  # tool call id -> function name (a function response names its function)

    def push(role: str, parts: list[types.Part]) -> None:
        if not parts:
            return
        if out and out[-1].role == role and out[-1].parts is not None:
            out[-1].parts.extend(parts)
        else:
            out.append(types.Content(role=role, parts=parts))

    for message in messages:
        role = message.get("role")
        content = message.get("content") or ""
        if role == "system":
            system.append(str(content))
        elif role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            response = types.FunctionResponse(
                id=_gemini_id(call_id),
                name=names.get(call_id, str(message.get("name") or "tool")),
                response={"result": str(content)},
            )
            push("user", [types.Part(function_response=response)])
        elif role == "assistant":
            parts = [types.Part(text=str(content))] if content else []
            for call in message.get("tool_calls") or []:
                try:
                    args = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    args = {}
                names[call["id"]] = call["function"]["name"]
                signature = str(call["id"]).partition(_SIGNATURE)[2]
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(
                            id=_gemini_id(call["id"]),
                            name=call["function"]["name"],
                            args=args if isinstance(args, dict) else {},
                        ),
                        thought_signature=base64.b64decode(signature) if signature else None,
                    )
                )
            push("model", parts)
        elif isinstance(content, list):
            push("user", [p for p in (_gemini_part(part) for part in content) if p is not None])
        else:
            push("user", [types.Part(text=str(content))])
    return "\n\n".join(system), out


def gemini_config(choice: ModelChoice, system: str, tools: list[dict[str, Any]], options: Options) -> Any:
    """The ``GenerateContentConfig`` of one call: system instruction, function declarations, sampling options in
    Gemini's terms (what it has no equivalent for is left out)."""
    from google.genai import types

    fields: dict[str, Any] = {"max_output_tokens": options.get("max_completion_tokens") or options.get("max_tokens")}
    fields["max_output_tokens"] = fields["max_output_tokens"] or choice.max_tokens
    for key in ("temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty"):
        if key in options:
            fields[key] = options[key]
    stop = options.get("stop")
    if stop:
        fields["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if isinstance(options.get("response_format"), dict) and options["response_format"].get("type") == "json_object":
        fields["response_mime_type"] = "application/json"
    if system:
        fields["system_instruction"] = system
    if tools:
        declarations = [
            types.FunctionDeclaration(
                name=t["function"]["name"],
                description=t["function"].get("description", ""),
                parameters_json_schema=t["function"].get("parameters") or {"type": "object", "properties": {}},
            )
            for t in tools
        ]
        fields["tools"] = [types.Tool(function_declarations=declarations)]
        mode = {"auto": "AUTO", "none": "NONE", "required": "ANY"}.get(str(options.get("tool_choice")))
        if mode:
            calling = types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode(mode))
            fields["tool_config"] = types.ToolConfig(function_calling_config=calling)
    fields["automatic_function_calling"] = types.AutomaticFunctionCallingConfig(disable=True)
    return types.GenerateContentConfig(**fields)


def gemini_client(api_key: str, api_base: str, timeout_s: float, max_retries: int) -> Any:
    """A ``google.genai.Client`` for the Gemini API at ``api_base`` (the SDK's default host when empty), on httpx
    with the process's TLS context."""
    import httpx
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        base_url=api_base or None,
        api_version="v1beta",
        timeout=int(timeout_s * 1000),
        retry_options=types.HttpRetryOptions(attempts=max_retries + 1),
        httpx_async_client=httpx.AsyncClient(verify=tls_context(), timeout=timeout_s),
    )
    return genai.Client(api_key=api_key or "not-needed", http_options=options)


def gemini_error(where: str, key_field: str, timeout_s: float, exc: Exception) -> ProviderError:
    """A Gemini SDK or transport failure as a :class:`ProviderError` that says what to do."""
    import httpx
    from google.genai import errors

    if isinstance(exc, httpx.TimeoutException):
        return ProviderError(f"{where} did not answer within {timeout_s:g} s; try again", "timeout")
    if isinstance(exc, httpx.TransportError | OSError):
        return ProviderError(f"cannot reach {where}: is it running and is apiBase right?", "unreachable")
    if isinstance(exc, errors.APIError):
        detail = str(exc.message or exc)[:300]
        if exc.code == 429:
            message = f"{where} is rate limiting requests (HTTP 429); wait a moment and retry"
            return ProviderError(message, "rate_limited")
        if exc.code in (401, 403) or "API key" in detail:
            return ProviderError(f"{where} refused the API key (HTTP {exc.code}); check {key_field}", "auth")
        kind = "bad_request" if exc.code < 500 else "error"
        return ProviderError(f"{where} answered HTTP {exc.code}: {detail}", kind)
    return ProviderError(f"{where} failed: {type(exc).__name__}: {str(exc)[:300]}", "error")


class GeminiProvider:
    """``generateContent`` through Google's ``google-genai`` SDK, streamed (``streamGenerateContent``)."""

    def __init__(self, choice: ModelChoice) -> None:
        self.choice = choice
        self.client = gemini_client(choice.api_key, choice.api_base, choice.timeout_s, choice.max_retries)

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
        options: Options | None = None,
    ) -> Completion:
        """Stream one answer; ``functionCall`` parts become tool calls."""
        system, contents = to_gemini(messages)
        config = gemini_config(self.choice, system, tools, options or {})
        done = Completion()
        parts: list[str] = []
        try:
            chunks = await self.client.aio.models.generate_content_stream(
                model=self.choice.model, contents=contents, config=config
            )
            async for chunk in chunks:
                if chunk.usage_metadata is not None:
                    done.usage = {
                        "prompt_tokens": chunk.usage_metadata.prompt_token_count or 0,
                        "completion_tokens": chunk.usage_metadata.candidates_token_count or 0,
                    }
                for candidate in chunk.candidates or []:
                    for part in (candidate.content.parts if candidate.content else None) or []:
                        if part.function_call is not None:
                            call = part.function_call
                            call_id = call.id or f"{_LOCAL_ID}{len(done.tool_calls)}"
                            if part.thought_signature:
                                call_id += _SIGNATURE + base64.b64encode(part.thought_signature).decode()
                            arguments = json.dumps(call.args or {}, ensure_ascii=False)
                            done.tool_calls.append(ToolCall(call_id, call.name or "", arguments))
                        elif part.text and not part.thought:
                            parts.append(part.text)
                            if on_text is not None:
                                on_text(part.text)
                    if candidate.finish_reason is not None and candidate.finish_reason.name == "MAX_TOKENS":
                        done.finish_reason = "length"
        except Exception as exc:  # the SDK raises its APIError and the transport's own errors
            where = f"{self.choice.provider} ({self.choice.api_base or 'default endpoint'})"
            key_field = f"providers.{self.choice.provider}.apiKey"
            raise gemini_error(where, key_field, self.choice.timeout_s, exc) from None
        done.text = "".join(parts)
        if done.tool_calls:
            done.finish_reason = "tool_calls"
        return done


def build_provider(choice: ModelChoice) -> Provider:
    """The provider object for a resolved model."""
    if choice.kind == "anthropic":
        return AnthropicProvider(choice)
    if choice.kind == "gemini":
        return GeminiProvider(choice)
    return OpenAIProvider(choice)


class ProviderCache:
    """One provider client per model for a host of many requests or sessions (``memmy serve``, the chat turns'
    worker): built on first use and kept, with its connections."""

    def __init__(self) -> None:  # noqa: D107
        self._built: dict[ModelChoice, Provider] = {}

    def built(self, choice: ModelChoice) -> Provider | None:
        """The provider of ``choice`` if it is built already (None: not yet)."""
        return self._built.get(choice)

    def get(self, choice: ModelChoice) -> Provider:
        """The provider of ``choice``, built now if it is not yet."""
        if choice not in self._built:
            self._built[choice] = build_provider(choice)
        return self._built[choice]

    async def ready(self, choice: ModelChoice) -> Provider:
        """The same from an event loop: a provider not built yet is built in a thread, since importing its SDK
        takes a second or more on a busy machine and blocking the loop that long would time out a recall request
        already on its way."""
        built = self.built(choice)
        return built if built is not None else await asyncio.to_thread(self.get, choice)
