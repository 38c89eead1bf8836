"""A corpus of fake but format-valid secrets (>= 80 secrets of >= 30 kinds), each in a sentence.

``CORPUS`` items are (expected kind, text as a user or tool would write it, the secret bytes that must not
survive anywhere). Values are generated from a fixed seed so every run plants the same secrets, and no value is
a real credential.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
from typing import Any

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
    # Forms found missing on every path (issue 28): a token as a URL's user or password, client secrets in hex or
    # base64 that starts with / or +, passwords on a command line.
    add("github_token", "git clone https://x-access-token:{}@github.com/acme/app.git", "ghp_" + rand(36))
    # The token as the user: one clean marker over the whole user:password (never a nested one).
    add("url_credentials", "git remote set-url origin https://{}:x-oauth-basic@github.com/acme/app", "ghp_" + rand(36))
    add("gitlab_token", "git clone https://oauth2:{}@gitlab.com/acme/app.git", "glpat-" + rand(20, ALNUM + "_-"))
    add("secret_assignment", "client_secret: {}", rand(32, HEX))
    for start in "/+":
        add("secret_assignment", 'client_secret = "{}"', start + rand(39, ALNUM + "/+"))
    add("cli_password", "sshpass -p {} ssh deploy@10.0.0.5 uptime", rand(12) + "7")
    add("cli_password", "sshpass -p '{}' scp dump.sql backup@10.0.0.9:/srv", rand(10) + "#2")
    add("cli_password", "mysql -h db.internal -u root -p{} app < schema.sql", rand(12) + "4")
    add("cli_password", "mysqldump -uroot -p'{}' shop > shop.sql", rand(11) + "!")
    add("cli_password", "curl -u deploy:{} https://ci.example.com/job/build", rand(14))
    add("cli_password", "curl --user 'admin:{}' -X POST https://jenkins.local/reload", rand(13) + "$x")
    for template in AWS_PARTNER_PROSE[:2]:
        key_id, secret = aws_pair()
        items.append(("aws_secret_key", template.format(id=key_id, secret=secret), secret))
    return items


#: An AWS secret key written next to its key id, not after an ``aws_secret`` name (prose, CSV, a colon pair).
AWS_PARTNER_PROSE = (
    "the key is {id} with secret {secret}",
    "use access key {id} and secret {secret} for the deploy user",
    "User name,Access key ID,Secret access key\ndeploy,{id},{secret}",
    "creds: {id}:{secret}",
    "{id} / {secret} (rotate on Friday)",
    "new IAM keys for ci\nid {id}\nsecret {secret}",
    "{secret} is the secret that goes with {id}",
    "aws keys — {id}, {secret}.",
)


def aws_pair() -> tuple[str, str]:
    """A fake AWS key id and its 40-character secret key (seeded)."""
    return "AKIA" + rand(16, string.ascii_uppercase + "234567"), rand(40, ALNUM + "/+")


def make_corpus(seed: int) -> list[tuple[str, str, str]]:
    """The corpus with values drawn from ``seed`` (each write path in a test gets its own secrets)."""
    global _rng
    _rng = random.Random(seed)
    return _items()


CORPUS: list[tuple[str, str, str]] = make_corpus(20261203)
KINDS = sorted({kind for kind, _, _ in CORPUS})

# -- the structured generator ------------------------------------------------------------------------------------
#: Kinds recognised by a name, URL, header or command next to the value (or, for a Discord bot token, a keyword
#: in the text): such an item's whole line is placed. Every other kind's bare value starts the line.
NAMED_KINDS = frozenset(
    {
        "aws_secret_key",
        "azure_storage_key",
        "private_key",
        "url_credentials",
        "password",
        "secret_assignment",
        "authorization_bearer",
        "bearer_token",
        "cli_password",
        "discord_bot_token",
        "slack_webhook",
        "discord_webhook",
    }
)
#: Where a generated case puts its line: Claude Code ``tool_use`` input, an OpenAI ``function.arguments`` string,
#: a heredoc in plain text, and an AWS secret in prose next to its key id.
CONTEXTS = ("tool_use_input", "function_arguments", "heredoc", "prose_partner")


class Case:
    """One generated placement: ``text`` is what a path stores as text (a tool input serialised the way the
    importer does); ``value`` is the structured form a turn or an agent sends (a ``tool_use`` input or an OpenAI
    tool call), None for plain text."""

    __slots__ = ("context", "kind", "needle", "text", "value")

    def __init__(self, context: str, kind: str, text: str, needle: str, value: dict[str, Any] | None) -> None:
        self.context, self.kind, self.text, self.needle, self.value = context, kind, text, needle, value

    def __repr__(self) -> str:
        return f"Case({self.context!r}, {self.kind!r}, {self.text[:60]!r})"


def _line(kind: str, text: str, needle: str) -> str:
    """The line placed at the start of a line: the bare value, or the whole sentence for a named kind."""
    if kind in NAMED_KINDS or needle not in text or kind == "private_key":
        return text
    return needle


def tool_use_input(line: str, n: int) -> dict[str, Any]:
    """A Claude Code ``tool_use`` input with ``line`` at the start of a line: a Bash heredoc or a Write."""
    if n % 2:
        return {"file_path": "/srv/app/.env", "content": f"# generated by setup\n{line}\nDEBUG=0\n"}
    return {"command": f"cat > .env <<'EOF'\n{line}\nEOF\nchmod 600 .env", "description": "Write the env file"}


def openai_tool_call(line: str, n: int) -> dict[str, Any]:
    """An OpenAI-style tool call whose ``function.arguments`` string holds ``line`` at the start of a line."""
    arguments = {"command": ["bash", "-lc", f"export APP_ENV=prod\n{line}\n./deploy.sh --now"], "timeout": 60}
    return {"id": f"call_{n}", "type": "function", "function": {"name": "shell", "arguments": json.dumps(arguments)}}


def structured_cases(seed: int) -> list[Case]:
    """Every corpus item at line start in a tool input, in function arguments and in a heredoc, plus every AWS
    partner phrasing in prose. Each placement draws its own values (from ``seed``), so a secret found in a file
    names the one placement it came from."""
    cases: list[Case] = []
    for offset, context in enumerate(CONTEXTS[:3]):
        for n, (kind, text, needle) in enumerate(make_corpus(seed * len(CONTEXTS) + offset)):
            line = _line(kind, text, needle)
            if context == "tool_use_input":
                tool_input = tool_use_input(line, n)
                serialised = json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
                cases.append(Case(context, kind, serialised, needle, tool_input))
            elif context == "function_arguments":
                call = openai_tool_call(line, n)
                cases.append(Case(context, kind, call["function"]["arguments"], needle, call))
            else:
                heredoc = f"Put this in the credentials file:\ncat <<EOF > ~/.config/app/credentials\n{line}\nEOF\ndone"
                cases.append(Case(context, kind, heredoc, needle, None))
    for template in AWS_PARTNER_PROSE:
        for _ in range(2):
            key_id, secret = aws_pair()
            text = template.format(id=key_id, secret=secret)
            cases += [Case("prose_partner", "aws_secret_key", text, secret, None)]
            cases += [Case("prose_partner", "aws_access_key", text, key_id, None)]
    return cases


def needle_forms(needle: str) -> set[str]:
    """The secret, its lower-case form (FTS tokens are folded) and each long token of it, lower-cased."""
    forms = {needle, needle.lower()}
    forms |= {token.lower() for token in re.findall(r"[A-Za-z0-9]{12,}", needle)}
    return forms


def leaks(needle: str, stored: str) -> bool:
    """Whether any form of ``needle`` survives in ``stored`` (searched as is and lower-cased)."""
    folded = stored.lower()
    return any(form in stored or form in folded for form in needle_forms(needle))


def stored_in_process(redactor: Any, case: Case) -> list[str]:
    """What the in-process paths keep of ``case``: the importer's ``redact`` of the text, and the turn route's
    ``redact_json`` of the structured value (serialised), with the agent's own capture reading the same value."""
    stored = [redactor.redact(case.text)]
    if case.value is not None:
        stored.append(json.dumps(redactor.redact_json(case.value), ensure_ascii=False))
    return stored


#: Text that holds no secret and must come back byte for byte, alone and at line start inside tool input: git
#: SHAs, UUIDs, lockfile hashes, image digests, long hex ids in JSON, a short base64 image in a tool result, port
#: flags, command lines that prompt for their password, paths under secret-like names, placeholders.
BENIGN = (
    "3f786850e387550fdab836ed7e6dc881de23001b fix the flaky redis test",
    "commit 9c1185a5c5e9fc54612808977ee8f548b2258d31\nAuthor: Dev <dev@example.com>",
    "Merge: 1a410efbd13591db07496601ebc7a059dd55cfe9 cb0c4a9f5e1c0aa1e9c1ee4b2e0c2f1d0f77a3c2",
    "request id 123e4567-e89b-12d3-a456-426614174000 took 41 ms",
    "f47ac10b-58cc-4372-a567-0e02b2c3d479",
    '"integrity": "sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+nx1XOIwLp7hPuXKydrcb7QRZe2BTEGqSsEMjZA==",',
    'name = "requests"\nversion = "2.32.3"\n'
    'hash = "sha256:70761cfe03c773ceb22aa2f671b4757976145175cdfca038c02654d061d6dcc6"',
    "golang.org/x/text v0.14.0 h1:ScX5w1eTa3QqT8oi6+ziP7dTV1S2+ALU0bI+0zXKWiQ=",
    "image: postgres@sha256:4c5f9a9c1b5fd1f6ab1c1d7c4b7e2a8c3f5e9d0a1b2c3d4e5f6a7b8c9d0e1f2a3",
    '{"id": "5f0c3b9e2d7a4e1f8c6b3a9d0e2f4c1b", "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", '
    '"spanId": "00f067aa0ba902b7"}',
    '{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "'
    + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==" * 8
    + '"}}',
    "docker run -p 8080:80 nginx",
    "docker run --name mysql -p3306:3306 -e MYSQL_ROOT_PASSWORD=$MYSQL_ROOT_PASSWORD mysql:8",
    "ssh -p 2222 deploy@10.0.0.5",
    "python -m http.server 8000 -b 127.0.0.1; npx serve -p 3000",
    "mysql -h db.internal -P 3306 -u root -p app",
    'mysql -u app -p"$DB_PASS" app',
    "curl -u deploy https://ci.example.com/job/build",
    'curl -u "$CI_USER:$CI_PASS" https://ci.example.com/job/build',
    "sshpass -f ~/.ssh/pw.txt ssh deploy@10.0.0.5",
    'sshpass -p "$SSHPASS" ssh deploy@10.0.0.5',
    'client_secret_file = "/Users/Alice/Project2024/src/client.json"',
    "export PATH=/home/runner/work/app2/app2/node_modules/.bin:$PATH",
    "tokenizer = AutoTokenizer.from_pretrained('bert-base-uncased')\nmax_tokens: 4096",
    "api_key = os.environ['OPENAI_API_KEY']\npassword = getpass.getpass()",
    "https://github.com/acme/app/commit/3f786850e387550fdab836ed7e6dc881de23001b",
    "ARN arn:aws:iam::123456789012:role/Deploy in region eu-west-1",
)


def benign_cases() -> list[Case]:
    """Every benign text alone, at line start in a tool input, in function arguments and in a heredoc."""
    cases: list[Case] = []
    for n, text in enumerate(BENIGN):
        tool_input = tool_use_input(text, n)
        call = openai_tool_call(text, n)
        cases += [
            Case("plain", "benign", text, "", None),
            Case(
                "tool_use_input", "benign", json.dumps(tool_input, ensure_ascii=False, sort_keys=True), "", tool_input
            ),
            Case("function_arguments", "benign", call["function"]["arguments"], "", call),
            Case("heredoc", "benign", f"cat <<EOF > notes.txt\n{text}\nEOF", "", None),
        ]
    return cases


def notes(cases: list[Case], size: int = 4) -> list[tuple[list[Case], str]]:
    """Cases joined ``size`` at a time into one note (serialised tool inputs next to prose, as a person pastes
    them into ``memory add`` or ``remember``): JSON inside a text that is not JSON itself."""
    joined = []
    for start in range(0, len(cases), size):
        chunk = cases[start : start + size]
        joined.append((chunk, "\n\n".join(dict.fromkeys(case.text for case in chunk))))
    return joined
