"""The six model slots and where each lives in ``config.yaml``:

========== ================================================ ==========================================
slot       keys                                             providers
========== ================================================ ==========================================
primary    ``agents.defaults`` + ``providers.<name>``       every :data:`~memmy.agent.config.PROVIDERS`
embedding  ``memmyMemory.embedding``                        ``local`` (built in), ``openai_compatible``
summary    ``memmyMemory.summary``                          off, ``openai_compatible``, ``local_only``, ``host``
evolution  ``memmyMemory.evolution``                        as summary
asr        ``models.asr``                                   off, ``openai`` (any ``/audio/transcriptions``)
image      ``models.image``                                 off, ``openai`` (any ``/images/generations``)
========== ================================================ ==========================================

A key is kept as written: a ``${ENV}`` reference stays a reference in the file and is shown as such, a literal key
is written once and only ever shown as ``set``. ASR and image generation are optional: an empty slot turns the
microphone or the image tool off and blocks nothing else. The connection test makes a real call per slot."""

from __future__ import annotations

import io
import os
import re
import struct
import wave
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from memmy.agent.config import PROVIDERS, expand_env
from memmy.errors import ConfigError

SLOTS = ("primary", "embedding", "summary", "evolution", "asr", "image")
LABELS = {
    "primary": "Primary (chat)",
    "embedding": "Embedding",
    "summary": "Memory summary",
    "evolution": "Skill evolution",
    "asr": "Speech to text (ASR)",
    "image": "Image generation",
}
OPTIONAL = frozenset({"asr", "image"})
_MEMORY_LLM = ("", "openai_compatible", "local_only", "host")
CHOICES: dict[str, tuple[str, ...]] = {
    "primary": tuple(PROVIDERS),
    "embedding": ("local", "openai_compatible"),
    "summary": _MEMORY_LLM,
    "evolution": _MEMORY_LLM,
    "asr": ("", "openai"),
    "image": ("", "openai"),
}
DEFAULT_MODELS = {"embedding": "all-MiniLM-L6-v2", "asr": "whisper-1", "image": "gpt-image-1"}
_ENV_ONLY = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_REMOTE = ("openai_compatible", "openai")


@dataclass(frozen=True)
class Slot:
    """One slot as the file has it (``api_key`` unexpanded); ``provider`` "" is off."""

    name: str
    provider: str
    model: str
    api_base: str
    api_key: str

    @property
    def enabled(self) -> bool:
        """Whether the slot is set up (a provider chosen)."""
        return bool(self.provider)

    @property
    def remote(self) -> bool:
        """Whether the slot calls an endpoint (the primary model always does)."""
        return self.name == "primary" or self.provider in _REMOTE

    def key_view(self) -> str:
        """What a page may show of the key: the ``${ENV}`` reference, ``set`` or ""."""
        if _ENV_ONLY.fullmatch(self.api_key.strip()):
            return self.api_key.strip()
        return "set" if self.api_key else ""

    def resolved(self, env: Mapping[str, str] | None = None) -> Slot:
        """The slot with ``${ENV}`` references expanded (for a call; never written)."""
        env = os.environ if env is None else env
        return replace(self, api_key=str(expand_env(self.api_key, env)), api_base=str(expand_env(self.api_base, env)))

    def to_json(self) -> dict[str, Any]:
        """The slot for the Settings page: never the key itself."""
        return {
            "slot": self.name,
            "label": LABELS[self.name],
            "provider": self.provider,
            "providers": list(CHOICES[self.name]),
            "model": self.model,
            "apiBase": self.api_base,
            "key": self.key_view(),
            "optional": self.name in OPTIONAL,
            "enabled": self.enabled,
        }


def section(tree: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    """The mapping at ``keys`` in a parsed config ({} where a key is missing or not a mapping)."""
    for key in keys:
        value = tree.get(key) if isinstance(tree, Mapping) else None
        tree = value if isinstance(value, Mapping) else {}
    return tree


def read_slots(raw: Mapping[str, Any]) -> dict[str, Slot]:
    """Every slot from the parsed (unexpanded) config file."""
    defaults = section(raw, "agents", "defaults")
    provider = str(defaults.get("provider") or ("openai" if defaults.get("model") else ""))
    spec = PROVIDERS.get(provider)
    entry = section(raw, "providers", provider)
    found = {
        "primary": Slot(
            "primary",
            provider,
            str(defaults.get("model") or (spec.model if spec else "")),
            str(entry.get("apiBase") or (spec.api_base if spec else "")),
            str(entry.get("apiKey") or ""),
        )
    }
    for name in ("embedding", "summary", "evolution"):
        tree = section(raw, "memmyMemory", name)
        default_provider = "local" if name == "embedding" else ""
        found[name] = Slot(
            name,
            str(tree.get("provider", default_provider) or default_provider),
            str(tree.get("model") or DEFAULT_MODELS.get(name, "")),
            str(tree.get("endpoint") or ""),
            str(tree.get("apiKey") or ""),
        )
    for name in ("asr", "image"):
        tree = section(raw, "models", name)
        found[name] = Slot(
            name,
            str(tree.get("provider") or ""),
            str(tree.get("model") or ""),
            str(tree.get("apiBase") or ""),
            str(tree.get("apiKey") or ""),
        )
    return found


def parse_slot(body: Mapping[str, Any], current: Slot) -> Slot:
    """A slot edit from the Settings page or onboarding (``slot``, ``provider``, ``model``, ``apiBase``,
    ``apiKey``); an absent or empty key keeps the current one. :class:`ConfigError` says what is wrong."""
    provider = str(body.get("provider") or "").strip()
    if provider not in CHOICES[current.name]:
        shown = ", ".join(c or "(off)" for c in CHOICES[current.name])
        raise ConfigError(f"{current.name}.provider: one of {shown}")
    model = str(body.get("model") or "").strip() or DEFAULT_MODELS.get(current.name, "")
    base = str(body.get("apiBase") or "").strip().rstrip("/")
    key = str(body.get("apiKey") or "").strip() or current.api_key
    if provider and current.name == "primary" and not model:
        raise ConfigError("primary.model: required")
    if provider in _REMOTE and not base:
        raise ConfigError(f"{current.name}.apiBase: required for an OpenAI-compatible endpoint")
    if provider in _REMOTE and not model:
        raise ConfigError(f"{current.name}.model: required")
    if base and not base.startswith(("http://", "https://")):
        raise ConfigError(f"{current.name}.apiBase: expected an http(s) URL")
    if any(c in key for c in "\r\n"):
        raise ConfigError(f"{current.name}.apiKey: one line")
    return Slot(current.name, provider, model, base, key)


def slot_patch(slot: Slot) -> dict[str, Any]:
    """The config update that writes ``slot`` (for :func:`memmy.agent.config.write_agent_sections`)."""
    fields: dict[str, Any]
    if slot.name == "primary":
        entry: dict[str, Any] = {"apiBase": slot.api_base}
        if slot.api_key:
            entry["apiKey"] = slot.api_key
        return {
            "agents": {"defaults": {"provider": slot.provider, "model": slot.model}},
            "providers": {slot.provider: entry},
        }
    if slot.name in ("embedding", "summary", "evolution"):
        fields = {"provider": slot.provider, "model": slot.model, "endpoint": slot.api_base, "apiKey": slot.api_key}
        return {"memmyMemory": {slot.name: fields}}
    fields = {"provider": slot.provider, "model": slot.model, "apiBase": slot.api_base, "apiKey": slot.api_key}
    return {"models": {slot.name: fields}}


def silent_wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    """A short silent WAV file: what the ASR connection test sends."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(struct.pack("<h", 0) * int(rate * seconds))
    return buffer.getvalue()


async def test_slot(slot: Slot, timeout_s: float = 15.0) -> tuple[bool, str]:
    """A real call through the slot (``slot`` resolved): the chat slots answer one token, embedding embeds a word,
    ASR transcribes half a second of silence, image generation lists the endpoint's models (a picture costs money).
    The built-in and host-side providers have nothing to reach."""
    import openai

    if not slot.enabled:
        return True, "off" if slot.name != "primary" else "no model configured"
    if not slot.remote:
        return True, f"{slot.provider}: nothing to reach (runs in the memory daemon or the host agent)"
    spec = PROVIDERS.get(slot.provider)
    if slot.name == "primary" and spec is not None and spec.kind == "gemini" and not slot.api_base.endswith("/openai"):
        return await _test_gemini(slot, timeout_s)
    client = openai.AsyncOpenAI(
        api_key=slot.api_key or "x", base_url=slot.api_base or None, timeout=timeout_s, max_retries=0
    )
    try:
        if slot.name == "embedding":
            vectors = await client.embeddings.create(model=slot.model, input=["connection test"])
            return True, f"{len(vectors.data[0].embedding)} dimensions"
        if slot.name == "asr":
            text = await client.audio.transcriptions.create(
                model=slot.model, file=("test.wav", silent_wav(), "audio/wav")
            )
            return True, f"transcribed ({len(text.text)} characters)"
        if slot.name == "image":
            models = await client.models.list()
            return True, f"{len(models.data)} models listed"
        answer = await client.chat.completions.create(
            model=slot.model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=1
        )
        return True, f"{slot.model} answered ({len(answer.choices)} choice)"
    except openai.OpenAIError as exc:
        status = getattr(exc, "status_code", None)
        said = str(exc).replace(slot.api_key, "***") if slot.api_key else str(exc)  # never echo the key back
        return False, f"{type(exc).__name__}{f' {status}' if status else ''}: {said[:200]}"
    finally:
        await client.close()


async def _test_gemini(slot: Slot, timeout_s: float) -> tuple[bool, str]:
    """The Gemini connection test: a one-token ``generateContent`` through ``google-genai``."""
    from google.genai import types

    from memmy.agent.providers import gemini_client, gemini_error

    client = gemini_client(slot.api_key, slot.api_base, timeout_s, 0)
    try:
        config = types.GenerateContentConfig(max_output_tokens=1)
        answer = await client.aio.models.generate_content(model=slot.model, contents="Say OK.", config=config)
        return True, f"{slot.model} answered ({len(answer.candidates or [])} candidate)"
    except Exception as exc:  # the SDK's APIError and the transport's errors alike
        where = f"gemini ({slot.api_base or 'default endpoint'})"
        said = str(gemini_error(where, "primary.apiKey", timeout_s, exc))
        return False, said.replace(slot.api_key, "***") if slot.api_key else said
