"""A corpus of fake but format-valid secrets (>= 80 secrets of >= 30 kinds), each in a sentence.

``CORPUS`` items are (expected kind, text as a user or tool would write it, the secret bytes that must not
survive anywhere). Values are generated from a fixed seed so every run plants the same secrets, and no value is
a real credential.
"""

from __future__ import annotations

import base64
import json
import random
import string

_rng = random.Random(20261203)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = ALNUM) -> str:
    """``n`` random characters from ``alphabet`` (seeded)."""
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _jwt() -> str:
    header = _b64url({"alg": "HS256", "typ": "JWT"})
    payload = _b64url({"sub": rand(10), "iat": _rng.randint(1_600_000_000, 1_800_000_000)})
    return f"{header}.{payload}.{rand(43, ALNUM + '-_')}"


def _pem(kind: str) -> tuple[str, str]:
    body = "\n".join(rand(64, ALNUM + "+/") for _ in range(4))
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----", body.splitlines()[1]


def _items() -> list[tuple[str, str, str]]:
    items: list[tuple[str, str, str]] = []

    def add(kind: str, template: str, secret: str, needle: str | None = None) -> None:
        items.append((kind, template.format(secret), needle or secret))

    for _ in range(3):
        add(
            "aws_access_key",
            "my aws key id is {} for the deploy user",
            "AKIA" + rand(16, string.ascii_uppercase + "234567"),
        )
    for _ in range(2):
        s = rand(40, ALNUM + "/+")
        add("aws_secret_key", "aws_secret_access_key = {}", s)
    add("google_api_key", "maps key AIza{} in the frontend", "AIza" + rand(35, ALNUM + "_-"))
    add("google_oauth_secret", "client secret {} from the console", "GOCSPX-" + rand(28, ALNUM + "_-"))
    gcp_key, gcp_line = _pem("PRIVATE KEY")
    add(
        "private_key",
        'service account json: {{"type": "service_account", "private_key": "{}"}}',
        gcp_key.replace("\n", "\\n"),
        gcp_line,
    )
    for _ in range(2):
        s = rand(86, ALNUM + "+/") + "=="
        add(
            "azure_storage_key",
            "DefaultEndpointsProtocol=https;AccountName=acct1;AccountKey={};EndpointSuffix=core.windows.net",
            s,
        )
    add("azure_ad_client_secret", "azure app secret {} expires next year", rand(3) + "8Q~" + rand(34, ALNUM + "_~.-"))
    for prefix in ("dop_v1_", "doo_v1_"):
        add("digitalocean_token", "export DIGITALOCEAN_TOKEN={}", prefix + rand(64, HEX))
    for prefix in ("ghp_", "gho_", "ghs_"):
        add("github_token", "git clone https://github.com/acme/app with token {}", prefix + rand(36))
    add("github_token", "fine-grained PAT {} works", "github_pat_" + rand(22) + "_" + rand(59))
    for _ in range(3):
        add("gitlab_token", "gitlab token: {}", "glpat-" + rand(20, ALNUM + "_-"))
    for _ in range(3):
        add("npm_token", "//registry.npmjs.org/:_authToken {}", "npm_" + rand(36))
    for _ in range(3):
        add("pypi_token", "twine upload -p {}", "pypi-AgEIcHlwaS5vcmc" + rand(70, ALNUM + "_-"))
    for prefix in ("sk_live_", "rk_live_", "sk_test_"):
        add("stripe_key", "stripe key {} in settings.py", prefix + rand(24))
    add("stripe_key", "webhook signing secret {}", "whsec_" + rand(32))
    for prefix in ("shpat_", "shpss_"):
        add("shopify_token", "shopify admin token {}", prefix + rand(32, HEX))
    add(
        "slack_token",
        "SLACK_BOT={} in .env",
        "xoxb-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" + rand(24),
    )
    add(
        "slack_token",
        "socket mode app token {}",
        "xapp-1-A"
        + rand(10, string.ascii_uppercase + string.digits)
        + "-"
        + rand(13, string.digits)
        + "-"
        + rand(64, HEX),
    )
    add(
        "slack_token",
        "user token {}",
        "xoxp-" + rand(12, string.digits) + "-" + rand(12, string.digits) + "-" + rand(32, HEX),
    )
    add(
        "slack_webhook",
        "post to {}",
        "https://hooks.slack.com/services/T"
        + rand(8, string.ascii_uppercase)
        + "/B"
        + rand(8, string.ascii_uppercase)
        + "/"
        + rand(24),
    )
    for _ in range(3):
        add(
            "telegram_bot_token",
            "telegram bot {} answers /start",
            rand(10, string.digits).lstrip("0").rjust(10, "1") + ":AA" + rand(33, ALNUM + "_-"),
        )
    for prefix in ("SK", "AC"):
        add("twilio_key", "twilio credential {}", prefix + rand(32, HEX))
    for _ in range(2):
        add(
            "discord_bot_token",
            "discord bot token {}",
            "M" + rand(25) + "." + rand(6, ALNUM + "_-") + "." + rand(27, ALNUM + "_-"),
        )
    add(
        "discord_webhook",
        "alerts go to {}",
        "https://discord.com/api/webhooks/" + rand(18, string.digits) + "/" + rand(68, ALNUM + "_-"),
    )
    for _ in range(3):
        add("openai_api_key", "OpenAI key {} for the eval script", "sk-proj-" + rand(48, ALNUM + "_-"))
    for _ in range(3):
        add("anthropic_api_key", "anthropic key {}", "sk-ant-api03-" + rand(93, ALNUM + "_-") + "AA")
    for _ in range(3):
        add("jwt", "session cookie {} from the login", _jwt())
    for kind in ("RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY"):
        pem, line = _pem(kind)
        add("private_key", "here is id_rsa:\n{}\n", pem, line)
    pem, line = _pem("PGP PRIVATE KEY BLOCK")
    add("private_key", "gpg export:\n{}", pem, line)
    for scheme, port in (
        ("postgres", 5432),
        ("postgresql", 5432),
        ("mysql", 3306),
        ("mongodb+srv", 0),
        ("redis", 6379),
        ("amqp", 5672),
    ):
        pw = rand(14) + "!x"
        host = f"db.internal:{port}" if port else "cluster0.abcde.mongodb.net"
        add("url_credentials", scheme + "://app_user:{}@" + host + "/main", pw)
    pw = rand(16)
    add("url_credentials", "DATABASE_URL=postgres://svc:{}@10.0.0.5:5432/prod", pw)
    add("url_credentials", "REDIS_URL=redis://:{}@cache:6379/0", rand(20))
    add("url_credentials", "curl https://deploy:{}@ci.example.com/hook", rand(18))
    add("password", 'DB_PASSWORD="{}"', rand(12) + " with space")
    add("password", "MYSQL_ROOT_PASSWORD={}", rand(15))
    add("password", '{{"username": "admin", "password": "{}"}}', rand(12))
    add("password", "password: {}", rand(10) + "#1")
    add("password", "数据库密码是{}，明天改掉", rand(11))
    add("password", "Server=db;User Id=sa;Password={};", rand(14))
    add("secret_assignment", "export SERVICE_API_KEY={}", rand(32))
    add("secret_assignment", 'client_secret = "{}"', rand(40, ALNUM))
    add("secret_assignment", "SESSION_SECRET={}", rand(48, HEX))
    add("secret_assignment", "auth_token: {}", rand(30))
    add("secret_assignment", "这个服务的密钥是 {}", rand(24) + "9")
    add("authorization_bearer", "curl -H 'Authorization: Bearer {}' https://api.example.com", rand(40, ALNUM + "._-"))
    add("bearer_token", "use bearer {} when calling", rand(36))
    add("huggingface_token", "HF token {}", "hf_" + rand(34, string.ascii_letters))
    add("groq_api_key", "groq {}", "gsk_" + rand(52))
    add("databricks_token", "databricks {}", "dapi" + rand(32, HEX))
    add("vault_token", "VAULT_TOKEN is {}", "hvs." + rand(90, ALNUM + "_-"))
    add("sendgrid_api_key", "sendgrid {}", "SG." + rand(22, ALNUM + "_-") + "." + rand(43, ALNUM + "_-"))
    add("mailchimp_api_key", "mailchimp {}", rand(32, HEX) + "-us12")
    add("mailgun_api_key", "mailgun {}", "key-" + rand(32, HEX))
    add("square_token", "square {}", "sq0atp-" + rand(22, ALNUM + "_-"))
    add("alibaba_access_key", "aliyun {}", "LTAI" + rand(20))
    add("postman_api_key", "postman {}", "PMAK-" + rand(24, HEX) + "-" + rand(34, HEX))
    add("linear_api_key", "linear {}", "lin_api_" + rand(40))
    add("newrelic_key", "new relic {}", "NRAK-" + rand(27, string.ascii_uppercase + string.digits))
    add("heroku_api_key", "heroku {}", "HRKU-" + rand(60, ALNUM + "_-"))
    add("doppler_token", "doppler {}", "dp.pt." + rand(43))
    add("age_secret_key", "age key {}", "AGE-SECRET-KEY-1" + rand(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"))
    add("grafana_token", "grafana {}", "glsa_" + rand(32) + "_" + rand(8, HEX))
    add("replicate_token", "replicate {}", "r8_" + rand(37))
    add("xai_api_key", "grok key {}", "xai-" + rand(80))
    add("atlassian_token", "jira token {}", "ATATT3" + rand(186, ALNUM + "_-"))
    return items


def make_corpus(seed: int) -> list[tuple[str, str, str]]:
    """The corpus with values drawn from ``seed`` (each write path in a test gets its own secrets)."""
    global _rng
    _rng = random.Random(seed)
    return _items()


CORPUS: list[tuple[str, str, str]] = make_corpus(20261203)
KINDS = sorted({kind for kind, _, _ in CORPUS})
