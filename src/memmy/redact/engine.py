"""The redaction engine: a keyword pre-filter, then only the rules whose keywords occur in the text.

The pre-filter finds every keyword in one pass (:class:`memmy.redact.keywords.KeywordScan`), not one substring
search per keyword: the same keywords, found ~10x faster.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import cache

from memmy.redact.keywords import KeywordScan
from memmy.redact.rules import PASSWORD_NAME, RULES, Rule

TYPE_CHECKING = False  # the hook imports this module for one prompt: no typing, no dataclasses, no compile at import
if TYPE_CHECKING:
    from typing import Any

#: Values that name a secret instead of being one (``password: None``, ``token = "<your token>"``).
_PLACEHOLDERS = frozenset(
    {
        "none",
        "null",
        "nil",
        "true",
        "false",
        "undefined",
        "str",
        "string",
        "bytes",
        "int",
        "optional",
        "required",
        "empty",
        "secret",
        "password",
        "token",
        "changeme",
        "example",
        "redacted",
        "hidden",
        "input",
        "getpass",
        "os.environ",
        "process.env",
        "env",
        "your_password",
        "your-password",
    }
)
_PLACEHOLDER_START = ("$", "<", "{", "%", "[", "*", "(", "os.", "process.env", "env(", "getenv", "/", "~", "./")
_DOTTED_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_SECRET_JSON_KEY = (
    r"(?i)[\w.-]*(?:password|passwd|passphrase|secret|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|auth[_-]?token|access[_-]?token|refresh[_-]?token|bearer[_-]?token|bot[_-]?token|credentials?)[\w.-]*"
)


class RedactionConfigError(ValueError):
    """An extra pattern or allowlist entry in the ``redaction`` settings is not usable."""


_PASSWORD_KEY = r"(?i)[\w.-]*" + PASSWORD_NAME


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    """One of this module's patterns, compiled the first time it is used (as the rules are)."""
    return re.compile(pattern)


class RedactionReport:
    """How many secrets of each kind were removed."""

    def __init__(self, counts: Counter[str] | None = None) -> None:
        self.counts: Counter[str] = counts if counts is not None else Counter()

    def __repr__(self) -> str:
        return f"RedactionReport(counts={self.counts!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RedactionReport) and self.counts == other.counts

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    @property
    def total(self) -> int:
        """All redactions."""
        return sum(self.counts.values())


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value``."""
    if not value:
        return 0.0
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _unquote(value: str) -> str:
    if value.startswith('\\"') and value.endswith('\\"') and len(value) >= 4:
        return value[2:-2]
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'`":
        return value[1:-1]
    return value


def _random_base64(value: str) -> bool:
    """A long base64 run that is random (mixed case, digits, >= 4.25 bits a character): a key that happens to
    start with ``/`` or ``+``, not a path (``/Users/Alice/Project2024/src`` stays near 4.1 bits)."""
    return (
        len(value) >= 32
        and value.count("/") <= 4
        and bool(_compiled(r"[A-Za-z0-9+/]+={0,2}").fullmatch(value))
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
        and shannon_entropy(value) >= 4.25
    )


def _placeholder(value: str) -> bool:
    lowered = value.lower()
    return (
        not value.strip()
        or lowered in _PLACEHOLDERS
        or (lowered.startswith(_PLACEHOLDER_START) and not _random_base64(value))
        or "(" in value
        or "REDACTED" in value
        or len(set(value)) <= 2
    )


def looks_like_password(value: str) -> bool:
    """A value after a password-like name that is a real value, not a type, placeholder or expression."""
    value = _unquote(value)
    return len(value) >= 3 and not _placeholder(value)


def looks_like_secret(value: str) -> bool:
    """A value after a secret-like name that looks random: letters and digits, or long and high-entropy."""
    value = _unquote(value)
    if len(value) < 8 or _placeholder(value) or any(c.isspace() for c in value):
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if has_digit and has_alpha:
        return shannon_entropy(value) >= 2.5
    return len(value) >= 20 and not _compiled(_DOTTED_NAME).fullmatch(value) and shannon_entropy(value) >= 3.5


def _tail_ok(text: str, start: int, end: int) -> bool:
    """The rest of a secret-like name is empty, ``s``, or starts a new word (``_KEY``, ``Key``, ``2``, ``是``)."""
    if start == end:
        return True
    first = text[start]
    if first in "_.-" or first.isupper() or first.isdigit() or not first.isascii():
        return True
    return first in "sS" and (end == start + 1 or text[start + 1] in "_.-")


def looks_like_token(value: str) -> bool:
    """A bearer value that is not a placeholder such as ``YOUR_TOKEN`` or ``$TOKEN``."""
    return not _placeholder(value) and not re.fullmatch(r"[A-Z_]+", value)


def looks_like_aws_secret(value: str) -> bool:
    """A 40-character run next to an AWS key id that is random base64 (both cases and a digit or ``/``/``+``), not a
    40-hex git SHA or a word."""
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() or c in "/+" for c in value)
        and shannon_entropy(value) >= 3.5
    )


_CHECKS = {
    "password": looks_like_password,
    "entropy": looks_like_secret,
    "bearer": looks_like_token,
    "aws_secret": looks_like_aws_secret,
}
#: Keys whose string is an HTTP credential header's value (``Bearer …``, ``Basic …``, ``Token …``).
_AUTH_HEADERS = frozenset({"authorization", "proxy-authorization"})
#: How many ``{`` or ``[`` a text may have tried as the start of an embedded JSON value (see ``_redact_embedded``).
_EMBEDDED_TRIES = 256
#: A marker already in the text: a later rule's match that overlaps one is widened to it (markers never nest).
_MARKER = r"\[REDACTED:[a-z0-9_]{1,40}\]"


def _escaped_break(text: str, start: int) -> bool:
    """The two characters before ``start`` are an escaped line break or tab (``\\n``, ``\\r``, ``\\t``) of a JSON
    or shell string: a line boundary for the rules, although ``n`` is a letter."""
    return start >= 2 and text[start - 1] in "nrt" and text[start - 2] == "\\"


def _unescape(match: re.Match[str]) -> str:
    """One JSON escape (``\\uXXXX`` or ``\\/``) as the character it stands for."""
    escape = match.group()
    return "/" if escape == "\\/" else chr(int(escape[2:], 16))


def _json_style(text: str) -> dict[str, Any]:
    """How ``text`` was serialised (compact separators, ``\\u`` escapes), so a re-encoded copy reads alike."""
    compact = '": ' not in text and '", "' not in text and ", " not in text
    return {
        "ensure_ascii": text.isascii() and "\\u" in text,
        "separators": (",", ":") if compact else (", ", ": "),
    }


class Redactor:
    """Built-in rules plus configured extra patterns, minus allowlisted matches."""

    def __init__(self, extra_patterns: Iterable[tuple[str, str]] = (), allowlist: Iterable[str] = ()) -> None:
        extra_patterns, allowlist = tuple(extra_patterns), tuple(allowlist)
        self._spec = (extra_patterns, allowlist)
        extra: list[Rule] = []
        for kind, pattern in extra_patterns:
            try:
                extra.append(Rule(kind, re.compile(pattern), ("",)))
            except re.error as exc:
                raise RedactionConfigError(
                    f"redaction.extraPatterns: {kind}: invalid regular expression: {exc}"
                ) from None
        try:
            self.allowlist = tuple(re.compile(entry) for entry in allowlist)
        except re.error as exc:
            raise RedactionConfigError(f"redaction.allowlist: invalid regular expression: {exc}") from None
        self.rules = tuple(extra) + RULES
        self._always = tuple(i for i, rule in enumerate(self.rules) if "" in rule.keywords)
        by_keyword: dict[str, list[int]] = {}
        for index, rule in enumerate(self.rules):
            for keyword in rule.keywords:
                if keyword:
                    by_keyword.setdefault(keyword, []).append(index)
        self._by_keyword = {k: tuple(v) for k, v in sorted(by_keyword.items())}
        self._keywords = KeywordScan(self._by_keyword)

    def __reduce__(self) -> tuple[type[Redactor], tuple[tuple[tuple[str, str], ...], tuple[str, ...]]]:
        """Pickled as the patterns it was built from (the history reader process builds its own)."""
        return (Redactor, self._spec)

    @classmethod
    def from_config(cls, settings: Mapping[str, Any] | None) -> Redactor:
        """Build from the ``redaction`` section of config.yaml (``extraPatterns``, ``allowlist``)."""
        settings = settings or {}
        extra: list[tuple[str, str]] = []
        for number, entry in enumerate(settings.get("extraPatterns") or [], start=1):
            if isinstance(entry, str):
                extra.append(("custom", entry))
            elif isinstance(entry, Mapping) and isinstance(entry.get("pattern"), str):
                name = str(entry.get("name") or "custom")
                if not re.fullmatch(r"[a-z0-9_]{1,40}", name):
                    raise RedactionConfigError(
                        f"redaction.extraPatterns[{number}].name: use lowercase letters, digits, _"
                    )
                extra.append((name, entry["pattern"]))
            else:
                raise RedactionConfigError(f"redaction.extraPatterns[{number}]: expected a regex or {{name, pattern}}")
        allow = settings.get("allowlist") or []
        if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
            raise RedactionConfigError("redaction.allowlist: expected a list of regular expressions")
        return cls(extra, allow)

    def _allowed(self, secret: str) -> bool:
        return any(entry.search(secret) for entry in self.allowlist)

    def could_redact(self, text: str) -> bool:
        """False when no rule can match anywhere in ``text`` (no keyword occurs, too short for the keyword-less
        rules), so nothing in it, nor in any part of it, would be redacted: one scan may clear many fields.
        JSON escapes that may hide a keyword are read decoded (``\\u5bc6\\u7801`` is 密码, ``:\\/\\/`` is ``://``)."""
        if any(len(text) >= self.rules[index].min_len for index in self._always):
            return True
        if "\\u" in text or "\\/" in text:
            text = _compiled(r"\\u[0-9a-fA-F]{4}|\\/").sub(_unescape, text)
        return bool(self._keywords.found(text.lower()))

    def redact(self, text: str | None, report: RedactionReport | None = None) -> str:
        """Replace every secret in ``text`` with a ``[REDACTED:<kind>]`` marker.

        A text that is a JSON document (a tool's serialised input, OpenAI ``function.arguments``) is redacted on
        its decoded keys and strings, newlines and all, and re-encoded when something was found; any other text is
        read as it is, where an escaped ``\\n`` counts as a line break for the rules that need a word boundary."""
        if not text:
            return text or ""
        head = text.lstrip()[:1] if text[0].isspace() else text[0]
        if head in ("{", "[", '"'):
            structured = self._redact_structured(text, report)
            if structured is not None:
                return structured
        if "\\" in text and self.could_redact(text):
            parts = self._embedded_json(text, report)
            if len(parts) > 1:
                return "".join(part if decoded else self._redact_text(part, report) for part, decoded in parts)
        return self._redact_text(text, report)

    def _embedded_json(self, text: str, report: RedactionReport | None) -> list[tuple[str, bool]]:
        """``text`` cut into the JSON objects and arrays inside it (``echo {"command": "…\\n…"}``, serialised tool
        inputs pasted into a note), each already redacted decoded as :meth:`redact` does a JSON text (``True``),
        and the text between them (``False``), to be read as text. At most ``_EMBEDDED_TRIES`` places are tried
        as the start of a value, so a text full of brackets costs little."""
        decoder = json.JSONDecoder()
        parts: list[tuple[str, bool]] = []
        last = position = 0
        for _ in range(_EMBEDDED_TRIES):
            found = _compiled(r"[\[{]").search(text, position)
            if found is None:
                break
            start = found.start()
            try:
                value, end = decoder.raw_decode(text, start)
            except (ValueError, RecursionError):
                position = start + 1
                continue
            position = end
            if isinstance(value, (dict, list)) and value:
                cleaned = self._redact_structured(text[start:end], report)
                if cleaned is not None:
                    parts += [(text[last:start], False), (cleaned, True)]
                    last = end
        parts.append((text[last:], False))
        return [(part, decoded) for part, decoded in parts if part]

    def _redact_structured(self, text: str, report: RedactionReport | None) -> str | None:
        """``text`` as JSON with its keys and strings redacted (re-encoded only when one changed), or None when
        it is not a JSON object, array or string."""
        if not self.could_redact(text):
            return text  # no keyword in it, nor in any string it holds (see could_redact)
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, (dict, list, str)):
            return None
        try:
            cleaned = self.redact_json(value, report)
        except RecursionError:
            return None
        return text if cleaned == value else json.dumps(cleaned, **_json_style(text))

    def _redact_text(self, text: str, report: RedactionReport | None) -> str:
        """Every rule whose keywords occur in ``text``, in order."""
        lowered = text.lower()
        selected = set(self._always)
        for keyword in self._keywords.found(lowered):
            selected.update(self._by_keyword[keyword])
        for index in sorted(selected):
            rule = self.rules[index]
            if len(text) < rule.min_len:
                continue
            foldable = rule.folded is not None and len(lowered) == len(text)
            changed = self._apply(rule, text, lowered if foldable else None, report)
            if changed is not text:
                text, lowered = changed, changed.lower()
        return text

    def _apply(self, rule: Rule, text: str, lowered: str | None, report: RedactionReport | None) -> str:
        """``text`` with ``rule``'s matches replaced (searched in ``lowered`` with the folded pattern if given).

        A match that overlaps a marker already in the text is widened to cover it and one marker replaces both;
        a match inside a marker is skipped: markers never nest."""
        check = _CHECKS.get(rule.check)
        pattern = rule.folded if lowered is not None and rule.folded is not None else rule.pattern
        groups = pattern.groupindex
        markers = [m.span() for m in _compiled(_MARKER).finditer(text)] if "[REDACTED:" in text else []
        pieces: list[str] = []
        last = found = 0
        marker = f"[REDACTED:{rule.kind}]"
        for match in pattern.finditer(lowered if lowered is not None else text):
            start = match.start()
            if (
                rule.boundary
                and start
                and text[start - 1].isascii()
                and text[start - 1].isalnum()
                and not _escaped_break(text, start)
            ):
                continue
            if "tail" in groups and not _tail_ok(text, match.start("tail"), match.end("tail")):
                continue
            begin, end = match.span("s") if "s" in groups and match.start("s") >= 0 else match.span()
            secret = text[begin:end]
            if (check is not None and not check(secret)) or self._allowed(secret):
                continue
            for left, right in markers:
                if left < end and begin < right:
                    if left <= begin and end <= right:
                        break  # already a marker
                    begin, end = min(begin, left), max(end, right)
            else:
                if begin < last:
                    continue
                pieces += [text[last:begin], marker]
                last = end
                found += 1
        if not found:
            return text
        if report is not None:
            report.counts[rule.kind] += found
        pieces.append(text[last:])
        return "".join(pieces)

    def redact_json(self, value: Any, report: RedactionReport | None = None) -> Any:
        """A copy of a JSON value with every string redacted; a string under a secret-like key is redacted whole."""
        if isinstance(value, str):
            return self.redact(value, report)
        if isinstance(value, list):
            return [self.redact_json(item, report) for item in value]
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                if isinstance(item, str) and isinstance(key, str) and _compiled(_SECRET_JSON_KEY).fullmatch(key):
                    password = bool(_compiled(_PASSWORD_KEY).fullmatch(key))
                    if (looks_like_password if password else looks_like_secret)(item) and not self._allowed(item):
                        if report is not None:
                            report.counts["password" if password else "secret_assignment"] += 1
                        out[key] = "[REDACTED:password]" if password else "[REDACTED:secret_assignment]"
                        continue
                if isinstance(item, str) and isinstance(key, str) and key.lower() in _AUTH_HEADERS:
                    # A header object ({"Authorization": "Basic …"}): read as the header line the rules know.
                    out[key] = self.redact(f"{key}: {item}", report)[len(key) + 2 :]
                    continue
                if isinstance(key, str) and self.could_redact(key):
                    key = self.redact(key, report)
                out[key] = self.redact_json(item, report)
            return out
        return value


DEFAULT_REDACTOR = Redactor()


def redact(text: str | None, report: RedactionReport | None = None) -> str:
    """Redact with the built-in rules only (no user configuration)."""
    return DEFAULT_REDACTOR.redact(text, report)


def redact_json(value: Any, report: RedactionReport | None = None) -> Any:
    """Redact a JSON value with the built-in rules only."""
    return DEFAULT_REDACTOR.redact_json(value, report)
