"""Answers as chat messages: split at the platform's limit on paragraph, line and word boundaries (a code block
cut in two is closed and reopened), and Markdown turned into what the platform renders."""

from __future__ import annotations

import html
import re

FENCE = "```"


def _cut(text: str, limit: int) -> int:
    """Where to end the first chunk of ``text`` (at most ``limit`` characters): the last paragraph, line or word
    break in its second half, else a hard cut."""
    window = text[:limit]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at >= limit // 2:
            return at + len(sep)
    return limit


def split_message(text: str, limit: int) -> list[str]:
    """``text`` as chunks of at most ``limit`` characters, every code fence balanced in each chunk."""
    if limit < 32:
        raise ValueError("limit must leave room for a code fence")
    chunks: list[str] = []
    rest = text.strip()
    reopen = ""
    while rest:
        budget = limit - len(reopen) - len(FENCE) - 1  # room to reopen a fence and to close one
        body = rest if len(rest) <= budget else rest[: _cut(rest, budget)]
        rest = rest[len(body) :].lstrip("\n") if len(body) < len(rest) else ""
        chunk = reopen + body
        open_fence = _open_fence(chunk)
        if open_fence is not None and rest:
            chunk = chunk.rstrip("\n") + "\n" + FENCE
            reopen = open_fence + "\n"
        else:
            reopen = ""
        chunks.append(chunk.strip("\n") if not reopen else chunk)
    return [c for c in chunks if c.strip()]


def _open_fence(chunk: str) -> str | None:
    """The opening line of a code fence left open at the end of ``chunk`` (``None`` when all are closed)."""
    opener: str | None = None
    for line in chunk.split("\n"):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            opener = None if opener is not None else stripped
    return opener


_INLINE = re.compile(r"`([^`\n]+)`|\*\*([^*\n]+)\*\*|\[([^\]\n]+)\]\((https?://[^)\s]+)\)")


def _inline_html(text: str) -> str:
    out: list[str] = []
    last = 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[last : match.start()], quote=False))
        code, bold, label, url = match.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code, quote=False)}</code>")
        elif bold is not None:
            out.append(f"<b>{html.escape(bold, quote=False)}</b>")
        else:
            out.append(f'<a href="{html.escape(url)}">{html.escape(label, quote=False)}</a>')
        last = match.end()
    out.append(html.escape(text[last:], quote=False))
    return "".join(out)


def markdown_to_telegram_html(text: str) -> str:
    """Markdown (fences, inline code, bold, links, ``#`` headings) as Telegram's HTML parse mode; everything else
    is escaped, so a model's ``<`` or ``&`` never breaks the message or becomes markup."""
    out: list[str] = []
    in_code = False
    code_lines: list[str] = []
    language = ""
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            if in_code:
                body = html.escape("\n".join(code_lines), quote=False)
                attr = f' class="language-{html.escape(language)}"' if language else ""
                out.append(f"<pre><code{attr}>{body}</code></pre>")
                code_lines, in_code = [], False
            else:
                language = re.sub(r"[^A-Za-z0-9_+-]", "", stripped[3:])[:20]
                in_code = True
            continue
        if in_code:
            code_lines.append(line)
            continue
        heading = re.match(r"#{1,6}\s+(.*)", stripped)
        out.append(f"<b>{_inline_html(heading.group(1))}</b>" if heading else _inline_html(line))
    if in_code:  # an unclosed fence still renders as code
        out.append(f"<pre>{html.escape(chr(10).join(code_lines), quote=False)}</pre>")
    return "\n".join(out)


def split_utf8(text: str, max_bytes: int) -> list[str]:
    """``text`` as chunks of at most ``max_bytes`` UTF-8 bytes (platforms that count bytes: WeCom's 2,048), cut
    on paragraph, line and word breaks like :func:`split_message`."""
    limit = max_bytes
    while True:
        chunks = split_message(text, max(32, limit))
        if all(len(chunk.encode()) <= max_bytes for chunk in chunks) or limit <= 32:
            return chunks
        longest = max(len(chunk.encode()) / max(1, len(chunk)) for chunk in chunks)
        limit = min(limit - 1, int(max_bytes / longest))


def markdown_to_plain(text: str) -> str:
    """Markdown as plain text for apps that show no formatting (iMessage): fences and ``#`` dropped, code kept
    as it is, bold unmarked, links as ``label (url)``."""
    out: list[str] = []
    in_code = False
    for line in text.split("\n"):
        if line.strip().startswith(FENCE):
            in_code = not in_code
            continue
        if in_code:
            out.append(line)
            continue
        line = re.sub(r"^\s*#{1,6}\s+", "", line)
        out.append(_INLINE.sub(lambda m: m[1] or m[2] or f"{m[3]} ({m[4]})", line))
    return "\n".join(out).strip()
