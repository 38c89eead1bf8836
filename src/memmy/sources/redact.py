"""Secret redaction applied to imported history before anything is stored, indexed or embedded.

Rules (in order): long base64 runs and inline ``data:`` URIs, private keys, ``Authorization: Bearer``,
Anthropic / OpenAI / Google / AWS / GitHub / Slack tokens, password assignments, and ``.env``-style
``KEY=value`` lines whose key names a secret. Token prefixes are matched without ``\\b`` because CJK letters
count as word characters: "密钥是sk-proj-..." must still be caught.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_NOT_ALNUM_BEFORE = r"(?<![A-Za-z0-9])"
_NOT_ALNUM_AFTER = r"(?![A-Za-z0-9])"
_SECRET_KEY_NAME = (
    r"[A-Za-z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|PWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)[A-Za-z0-9_]*"
)

RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "data_uri",
        re.compile(r"data:[\w.+-]+/[\w.+-]+(?:;[\w=.+-]+)*;base64,[A-Za-z0-9+/=\s]{16,}"),
        "[REDACTED:data_uri]",
    ),
    ("long_base64", re.compile(r"[A-Za-z0-9+/]{4096,}={0,2}"), "[REDACTED:base64_payload]"),
    (
        "private_key",
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)"),
        "[REDACTED:private_key]",
    ),
    (
        "authorization_bearer",
        re.compile(r"(?i)((?:authorization|auth)\s*[:=]\s*[\"']?bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
        r"\1[REDACTED:authorization_bearer]",
    ),
    ("bearer_token", re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{20,}"), r"\1[REDACTED:bearer_token]"),
    ("anthropic_api_key", re.compile(_NOT_ALNUM_BEFORE + r"sk-ant-[A-Za-z0-9_-]{20,}"), "[REDACTED:anthropic_api_key]"),
    (
        "openai_api_key",
        re.compile(_NOT_ALNUM_BEFORE + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
        "[REDACTED:openai_api_key]",
    ),
    ("google_api_key", re.compile(_NOT_ALNUM_BEFORE + r"AIza[A-Za-z0-9_-]{30,}"), "[REDACTED:google_api_key]"),
    (
        "aws_access_key",
        re.compile(_NOT_ALNUM_BEFORE + r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}" + _NOT_ALNUM_AFTER),
        "[REDACTED:aws_access_key]",
    ),
    (
        "aws_secret_key",
        re.compile(r"(?i)(aws_?secret_?(?:access_?)?key\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{40}"),
        r"\1[REDACTED:aws_secret_key]",
    ),
    (
        "github_token",
        re.compile(_NOT_ALNUM_BEFORE + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
        "[REDACTED:github_token]",
    ),
    ("slack_token", re.compile(_NOT_ALNUM_BEFORE + r"xox[abposr]-[A-Za-z0-9-]{10,}"), "[REDACTED:slack_token]"),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/]+"), "[REDACTED:slack_webhook]"),
    (
        "password_assignment",
        re.compile(
            r"(?i)([\w.-]*(?:password|passwd|pwd|密码|口令)[\w.-]*[\"']?\s*(?:[:=]|：|是|为)\s*)"
            r"(\"[^\"\n]{3,}\"|'[^'\n]{3,}'|[^\s,;\"'，。]{3,})"
        ),
        r"\1[REDACTED:password]",
    ),
    (
        "env_secret",
        re.compile(r"((?<![A-Za-z0-9_])(?:export\s+)?" + _SECRET_KEY_NAME + r"\s*=\s*)([\"']?)[^\s\"'#，。；]{6,}\2"),
        r"\1[REDACTED:env_secret]",
    ),
)


#: Cheap pre-check: text with none of these cannot match any rule, so most messages skip the rule loop.
_TRIGGER = re.compile(
    r"data:|PRIVATE KEY|bearer|sk-|AIza|AKIA|ASIA|AGPA|AIDA|AROA|ANPA|aws|gh[pousr]_|github_pat_|xox|hooks\.slack"
    r"|pass|pwd|密码|口令|SECRET|TOKEN|PASSWORD|PASSWD|PWD|KEY|CREDENTIAL|[A-Za-z0-9+/]{4096}",
    re.IGNORECASE,
)


@dataclass
class RedactionReport:
    """How many secrets of each kind were removed."""

    counts: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """All redactions."""
        return sum(self.counts.values())


def redact(text: str | None, report: RedactionReport | None = None) -> str:
    """Replace every secret in ``text`` with a ``[REDACTED:<kind>]`` marker."""
    if not text:
        return text or ""
    if not _TRIGGER.search(text):
        return text
    for name, pattern, replacement in RULES:
        text, count = pattern.subn(replacement, text)
        if count and report is not None:
            report.counts[name] += count
    return text
