"""Secret redaction: one example per rule, in English and in Chinese context."""

from __future__ import annotations

import re

import pytest

from memmy.sources.redact import RedactionReport, redact

SECRETS = {
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    "-----END OPENSSH PRIVATE KEY-----",
    "authorization_bearer": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefgh",
    "anthropic_api_key": "sk-ant-api03-" + "A1b2C3d4E5" * 5,
    "openai_api_key": "sk-proj-" + "Zz9Yy8Xx7W" * 5,
    "google_api_key": "AIzaSyD" + "x1Y2z3A4b5" * 3 + "Q",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github_token": "ghp_" + "a1B2c3D4e5" * 4,
    "slack_token": "xoxb-123456789012-abcdefghijklmnop",
    "password_assignment": 'DB_PASSWORD: "hunter2-is-weak"',
    "env_secret": "STRIPE_SECRET_KEY=rk_live_51Habcdefghijk",
    "long_base64": "Q" * 5000,
    "data_uri": "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAA" * 4,
}
SECRET_VALUES = {
    "private_key": "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    "authorization_bearer": "eyJhbGciOiJIUzI1NiJ9",
    "anthropic_api_key": "A1b2C3d4E5",
    "openai_api_key": "Zz9Yy8Xx7W",
    "google_api_key": "x1Y2z3A4b5",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_key": "wJalrXUtnFEMI",
    "github_token": "a1B2c3D4e5",
    "slack_token": "abcdefghijklmnop",
    "password_assignment": "hunter2",
    "env_secret": "rk_live_51H",
    "long_base64": "Q" * 100,
    "data_uri": "iVBORw0KGgo",
}


@pytest.mark.parametrize("rule", sorted(SECRETS))
@pytest.mark.parametrize("context", ["Here is the value: {} please keep it safe.", "我的密钥是{}，不要告诉别人。"])
def test_every_rule_in_english_and_chinese(rule: str, context: str) -> None:
    report = RedactionReport()
    text = context.format(SECRETS[rule])
    cleaned = redact(text, report)
    assert SECRET_VALUES[rule] not in cleaned
    assert "[REDACTED:" in cleaned
    assert report.total >= 1
    assert cleaned.startswith(context.split("{}")[0])  # the surrounding words survive


def test_chinese_password_sentence_and_normal_prose() -> None:
    assert "hunter22" not in redact("数据库密码是hunter22，明天改掉")
    assert "hunter22" not in redact("password=hunter22")
    prose = "The password policy is stored in the wiki; rotate tokens every 90 days."
    assert redact(prose) == prose
    code = "def compute(tokens): return len(tokens)  # sk-learn is not a key"
    assert redact(code) == code


def test_every_rule_compiles_on_first_use() -> None:
    """Rules are compiled lazily (nothing at import): each pattern, and its lower-case twin, must still compile."""
    from memmy.redact.rules import RULES

    for rule in RULES:
        assert rule.pattern.pattern and rule.kind
        folded = rule.folded
        assert folded is None or not folded.flags & re.IGNORECASE, rule.kind
