"""Attachments of a message to the agent (the workbench's uploads, files sent in a chat channel): at most
:data:`MAX_FILES` files of :data:`MAX_BYTES` each (the workbench's limit). Images become
``image_url`` parts for a vision-capable model; ``.pdf``, ``.docx``, ``.xlsx``, ``.pptx`` become text through
pypdf, python-docx, openpyxl and python-pptx (the ``memmy[workbench]`` extra, imported only when such a file
arrives); ``.md``, ``.txt``, ``.csv``, ``.json`` and source files are read as UTF-8 text."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

MAX_FILES = 4
MAX_BYTES = 10 * 1024 * 1024
MAX_TEXT = 200_000  # characters of one file's text the model gets
IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp"}
TEXT = {
    ".md",
    ".markdown",
    ".txt",
    ".csv",
    ".tsv",
    ".json",
    ".yaml",
    ".yml",
    ".py",
    ".js",
    ".ts",
    ".html",
    ".css",
    ".toml",
    ".log",
    ".sql",
    ".sh",
    ".xml",
}


class AttachmentError(ValueError):
    """A file the agent cannot take, with the reason a user can act on."""


@dataclass(frozen=True)
class Converted:
    """One attachment as the model gets it: text to add to the message, or an image part."""

    name: str
    text: str | None = None
    image: dict[str, Any] | None = None


def _pdf(data: bytes) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)


def _docx(data: bytes) -> str:
    import docx

    document = docx.Document(io.BytesIO(data))
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        lines += [" | ".join(cell.text.strip() for cell in row.cells) for row in table.rows]
    return "\n".join(lines)


def _xlsx(data: bytes) -> str:
    from openpyxl import load_workbook

    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    out: list[str] = []
    for sheet in book.worksheets:
        out.append(f"## {sheet.title}")
        for row in sheet.iter_rows(values_only=True):
            if any(v is not None for v in row):
                out.append(",".join("" if v is None else str(v) for v in row))
    book.close()
    return "\n".join(out)


def _pptx(data: bytes) -> str:
    from pptx import Presentation

    deck = Presentation(io.BytesIO(data))
    out: list[str] = []
    for number, slide in enumerate(deck.slides, 1):
        out.append(f"## Slide {number}")
        for shape in slide.shapes:
            frame = getattr(shape, "text_frame", None)
            if frame is not None and frame.text.strip():
                out.append(frame.text)
    return "\n".join(out)


def _json_text(data: bytes) -> str:
    text = data.decode("utf-8")
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, indent=1)
    except ValueError:
        return text


OFFICE: dict[str, Callable[[bytes], str]] = {".pdf": _pdf, ".docx": _docx, ".xlsx": _xlsx, ".pptx": _pptx}


def convert(name: str, data: bytes) -> Converted:
    """One uploaded file as text or an image part; :class:`AttachmentError` when it cannot be used."""
    name = PurePath(name.replace("\\", "/")).name or "file"
    if len(data) > MAX_BYTES:
        raise AttachmentError(f"{name}: larger than {MAX_BYTES // (1024 * 1024)} MB")
    suffix = PurePath(name).suffix.lower()
    if suffix in IMAGES:
        url = f"data:{IMAGES[suffix]};base64,{base64.b64encode(data).decode()}"
        return Converted(name, image={"type": "image_url", "image_url": {"url": url}})
    try:
        if suffix in OFFICE:
            text = OFFICE[suffix](data)
        elif suffix == ".json":
            text = _json_text(data)
        elif suffix in TEXT or not suffix:
            text = data.decode("utf-8")
        else:
            raise AttachmentError(f"{name}: {suffix} files are not supported (images, pdf, docx, xlsx, pptx, text)")
    except ImportError as exc:
        raise AttachmentError(f"{name}: needs the workbench extra (pip install 'memmy[workbench]'): {exc}") from exc
    except UnicodeDecodeError as exc:
        raise AttachmentError(f"{name}: not UTF-8 text") from exc
    except AttachmentError:
        raise
    except Exception as exc:  # a damaged office file: every reader raises its own types
        raise AttachmentError(f"{name}: could not be read ({type(exc).__name__}: {exc})") from exc
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"\n…[{len(text) - MAX_TEXT} characters cut]"
    return Converted(name, text=text)


def message_text(text: str, files: list[Converted]) -> str:
    """The message the session keeps: the user's text, then each file's text (images by name only)."""
    blocks = [text.strip()] if text.strip() else []
    for item in files:
        if item.image is not None:
            blocks.append(f"[image attached: {item.name}]")
        else:
            blocks.append(f'<attachment name="{item.name}">\n{item.text}\n</attachment>')
    return "\n\n".join(blocks)
