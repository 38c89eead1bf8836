"""Image generation through the image slot (``models.image``): one call to an OpenAI-compatible
``/images/generations`` endpoint with the official ``openai`` SDK; the picture is saved under ``images/`` of the
session's project or workspace. The agent gets it as the ``generate_image`` tool when the slot is set, the
workbench as ``/image PROMPT``; without the slot neither exists and nothing else changes."""

from __future__ import annotations

import asyncio
import base64
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from memmy.agent.config import AgentConfig
from memmy.agent.slots import read_slots
from memmy.agent.usage import UsageBook

if TYPE_CHECKING:
    from memmy.agent.tools import ToolBox

SIZES = ("1024x1024", "1024x1536", "1536x1024", "512x512", "256x256")
MAX_IMAGE_BYTES = 20 * 1024 * 1024
FOLDER = "images"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}\.(png|jpg|jpeg|webp)")


class ImageError(Exception):
    """Why no image was made (no slot, a bad request, the endpoint failed)."""


@dataclass(frozen=True)
class Image:
    """A saved picture: its path, its name under ``images/``, and the token usage the endpoint reported."""

    path: Path
    name: str
    usage: dict[str, int]


def enabled(config: AgentConfig) -> bool:
    """Whether an image slot is set up."""
    return read_slots(config.raw)["image"].enabled


def _file_name(prompt: str, data: bytes) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:40] or "image"
    suffix = "jpg" if data[:3] == b"\xff\xd8\xff" else "webp" if data[8:12] == b"WEBP" else "png"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}.{suffix}"


async def _download(url: str, timeout_s: float) -> bytes:
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=True, max_redirects=3) as client:
        async with client.stream("GET", url) as response:
            response.raise_for_status()
            data = b""
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > MAX_IMAGE_BYTES:
                    raise ImageError("the image is over 20 MB")
    return data


async def generate(
    config: AgentConfig, prompt: str, folder: Path, size: str = "1024x1024", timeout_s: float = 180.0
) -> Image:
    """Make one picture of ``prompt`` and save it under ``folder/images/``."""
    import openai

    slot = read_slots(config.raw)["image"].resolved()
    if not slot.enabled:
        raise ImageError("no image model: set the image generation slot in Settings or `memmy onboard`")
    if not prompt.strip():
        raise ImageError("describe the image to make")
    if size not in SIZES:
        raise ImageError(f"size: one of {', '.join(SIZES)}")
    client = openai.AsyncOpenAI(api_key=slot.api_key or "x", base_url=slot.api_base, timeout=timeout_s, max_retries=1)
    try:
        answer = await client.images.generate(model=slot.model, prompt=prompt.strip(), size=size, n=1)
    except openai.OpenAIError as exc:
        status = getattr(exc, "status_code", None)
        raise ImageError(f"the image endpoint failed ({status or type(exc).__name__})") from exc
    finally:
        await client.close()
    items = answer.data or []
    item = items[0] if items else None
    if item is not None and item.b64_json:
        data = base64.b64decode(item.b64_json)
    elif item is not None and item.url:
        data = await _download(item.url, timeout_s)
    else:
        raise ImageError("the image endpoint returned no image")
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError("the image is over 20 MB")
    name = _file_name(prompt, data)
    target = folder / FOLDER / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    usage: dict[str, Any] = answer.usage.model_dump() if answer.usage is not None else {}
    counts = {k: int(v) for k, v in usage.items() if isinstance(v, int)}
    await asyncio.to_thread(UsageBook(config.home).record, "image", counts.get("total_tokens", 0))
    return Image(target, name, counts)


def install(config: AgentConfig, tools: ToolBox) -> None:
    """Give ``tools`` the ``generate_image`` tool when the image slot is set (take it away when it is not)."""
    if not enabled(config):
        tools.tools.pop("generate_image", None)
        return
    from memmy.agent.tools import Tool, ToolError

    async def run(args: dict[str, Any]) -> str:
        prompt = args.get("prompt")
        if not isinstance(prompt, str):
            raise ToolError("prompt: expected a description of the image")
        try:
            image = await generate(config, prompt, tools.base_dir, str(args.get("size") or "1024x1024"))
        except ImageError as exc:
            raise ToolError(str(exc)) from None
        return f"saved {FOLDER}/{image.name} ({image.path.stat().st_size} bytes)"

    parameters = {
        "type": "object",
        "properties": {"prompt": {"type": "string"}, "size": {"type": "string", "enum": list(SIZES)}},
        "required": ["prompt"],
    }
    tools.add(
        Tool("generate_image", "Make a picture from a description; saves it under images/.", parameters, run, 200)
    )
