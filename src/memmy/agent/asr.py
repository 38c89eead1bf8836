"""Speech to text through the ASR slot (``models.asr``): one call to an OpenAI-compatible
``/audio/transcriptions`` endpoint with the official ``openai`` SDK. The workbench's microphone and the chat
channels' voice notes both come here; without an ASR slot :class:`AsrError` says so and nothing else is blocked."""

from __future__ import annotations

import asyncio

from memmy.agent.config import AgentConfig
from memmy.agent.slots import read_slots
from memmy.agent.usage import UsageBook

MAX_AUDIO_BYTES = 25 * 1024 * 1024  # OpenAI's own limit for one transcription
_SUFFIX = {
    "audio/webm": "webm",
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/aac": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/flac": "flac",
    "audio/amr": "amr",
}


class AsrError(Exception):
    """Why audio could not be transcribed (no slot, too big: ``upstream`` false; the endpoint failed: true)."""

    def __init__(self, message: str, upstream: bool = False) -> None:
        super().__init__(message)
        self.upstream = upstream


def audio_name(mime: str) -> str:
    """A file name whose suffix tells the endpoint the format (``voice.webm`` for ``audio/webm;codecs=opus``)."""
    base = mime.split(";", 1)[0].strip().lower()
    return f"voice.{_SUFFIX.get(base, base.rsplit('/', 1)[-1] or 'bin')}"


def enabled(config: AgentConfig) -> bool:
    """Whether an ASR slot is set up."""
    return read_slots(config.raw)["asr"].enabled


async def transcribe(config: AgentConfig, audio: bytes, mime: str, timeout_s: float = 60.0) -> str:
    """The text spoken in ``audio`` (``mime`` such as ``audio/webm``), through the ASR slot."""
    import openai

    slot = read_slots(config.raw)["asr"].resolved()
    if not slot.enabled:
        raise AsrError("no speech-to-text model: set the ASR slot in Settings or `memmy onboard`")
    if not audio:
        raise AsrError("the recording is empty")
    if len(audio) > MAX_AUDIO_BYTES:
        raise AsrError(f"the recording is over {MAX_AUDIO_BYTES // 1048576} MB")
    client = openai.AsyncOpenAI(api_key=slot.api_key or "x", base_url=slot.api_base, timeout=timeout_s, max_retries=1)
    try:
        answer = await client.audio.transcriptions.create(
            model=slot.model, file=(audio_name(mime), audio, mime.split(";", 1)[0] or "application/octet-stream")
        )
    except openai.OpenAIError as exc:
        status = getattr(exc, "status_code", None)
        raise AsrError(f"the ASR endpoint failed ({status or type(exc).__name__})", upstream=True) from exc
    finally:
        await client.close()
    usage = getattr(answer, "usage", None)  # newer endpoints report tokens (or seconds) for a transcription
    tokens = getattr(usage, "total_tokens", 0) if usage is not None else 0
    await asyncio.to_thread(UsageBook(config.home).record, "asr", tokens if isinstance(tokens, int) else 0)
    return answer.text.strip()


async def hear_voice_notes(
    config: AgentConfig | None, notes: list[tuple[str, str, bytes]]
) -> tuple[dict[str, str] | None, list[str]]:
    """Transcribe a chat message's voice notes ``(name, mime, bytes)``: (name -> text, or None when there is no
    ASR slot; a line for each note that could not be transcribed)."""
    if config is None or not enabled(config):
        return None, []
    heard: dict[str, str] = {}
    problems: list[str] = []
    for name, mime, data in notes:
        try:
            heard[name] = await transcribe(config, data, mime)
        except AsrError as exc:
            problems.append(f"{name}: {exc}")
    return heard, problems
