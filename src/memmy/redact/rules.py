"""The built-in secret rules: one regular expression per kind, with the cheap keywords that gate it.

The families and most patterns are derived from gitleaks' default rule set (``config/gitleaks.toml``) and
detect-secrets 1.5.0's plugins (AWS, Azure storage, basic auth, Discord, GitHub, GitLab, JWT, keyword, npm,
OpenAI, private key, PyPI, SendGrid, Slack, Square, Stripe, Telegram, Twilio, Mailchimp ...). Each rule names
the kind it replaces (``[REDACTED:<kind>]``). A rule with a named group ``s`` replaces only that group (the
name of an assignment or the user of a URL stays readable); otherwise the whole match is replaced.

Token prefixes are matched without ``\\b`` because CJK letters count as word characters: "密钥是sk-proj-..."
must still be caught; ``(?<![A-Za-z0-9])`` is used instead.
"""

from __future__ import annotations

import re

_B = r"(?<![A-Za-z0-9])"  # not preceded by an ASCII letter or digit
_E = r"(?![A-Za-z0-9])"  # not followed by one
_TOKEN_END = r"(?![A-Za-z0-9_-])"


class Rule:
    """One kind of secret: its pattern, the lowercase keywords one of which must occur, and whether an
    assignment value must look random (``check``: ``"password"``, ``"entropy"``, ``"bearer"`` or ``""``); an
    empty keyword means "always run" (for texts of at least ``min_len`` characters); ``boundary``: the match must
    not follow an ASCII letter or digit; ``folded``: the same pattern without IGNORECASE, for lower-cased text.

    ``pattern`` and ``folded`` may be given as source text: each is compiled the first time it is used, so
    importing the rules compiles nothing and a text runs only the rules its keywords select (a hook process,
    which redacts one prompt, compiles a few patterns instead of all of them; no ``dataclasses`` either)."""

    __slots__ = ("_folded", "_pattern", "boundary", "check", "keywords", "kind", "min_len")

    def __init__(
        self,
        kind: str,
        pattern: str | re.Pattern[str],
        keywords: tuple[str, ...],
        check: str = "",
        min_len: int = 0,
        boundary: bool = False,
        folded: str | re.Pattern[str] | None = None,
    ) -> None:
        self.kind = kind
        self.keywords = keywords
        self.check = check
        self.min_len = min_len
        self.boundary = boundary
        self._pattern = pattern
        self._folded = folded

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled pattern (compiled on first use)."""
        if isinstance(self._pattern, str):
            self._pattern = re.compile(self._pattern)
        return self._pattern

    @property
    def folded(self) -> re.Pattern[str] | None:
        """The case-sensitive twin for lower-cased text, if the rule has one (compiled on first use)."""
        if isinstance(self._folded, str):
            self._folded = re.compile(self._folded)
        return self._folded

    def __repr__(self) -> str:
        return f"Rule({self.kind!r}, keywords={self.keywords!r})"


def _rule(kind: str, pattern: str, keywords: tuple[str, ...], check: str = "", min_len: int = 0) -> Rule:
    # A leading look-behind hides the literal prefix from the regex engine's fast scan (measured 3-5x slower),
    # so ``_B`` at the start is dropped here and checked on each match instead (``boundary``).
    boundary = pattern.startswith(_B)
    pattern = pattern.removeprefix(_B)
    # A case-insensitive rule also gets a case-sensitive twin that runs on the lower-cased text: 60-150x faster
    # in CPython's regex engine, which cannot scan ahead for a literal under IGNORECASE (its literals are lower case).
    folded = pattern.removeprefix("(?i)") if pattern.startswith("(?i)") else None
    return Rule(kind, pattern, keywords, check, min_len, boundary, folded)


#: Words that make an assignment's value a password (any non-trivial value is redacted). The pattern starts at
#: the word itself (``DB_PASSWORD`` matches from ``PASSWORD``): a leading ``[\w]*`` would backtrack on every word.
#: The rest of the name; the engine rejects a tail that continues the word in lower case ("tokenize").
_NAME_END = r"(?P<tail>[\w.-]{0,40})"
PASSWORD_NAME = r"(?:password|passwd|passphrase|pwd|密码|口令)" + _NAME_END
#: Words whose value is a secret when it looks like one (long enough, not an identifier or expression).
SECRET_NAME = (
    r"(?:secret|token|api[_.-]?key|apikey|access[_.-]?key|private[_.-]?key|auth[_.-]?key|client[_.-]?key"
    r"|credentials?|signing[_.-]?key|encryption[_.-]?key|master[_.-]?key|密钥|令牌)" + _NAME_END
)
_KEY_PREFIXES = ("api", "access", "private", "auth", "client", "signing", "encryption", "master")
_SECRET_WORDS = ("secret", "token", "credential", "密钥", "令牌") + tuple(
    f"{prefix}{sep}key" for prefix in _KEY_PREFIXES for sep in ("", "_", "-", ".")
)
_ASSIGN = r"[\"']?\s*(?:[:=]|:=|=>|：|是|为)\s*"
# Quoted values may sit inside a JSON string (a tool's input), where their quotes are escaped: \"value\".
_QUOTED_OR_BARE = r"(?P<s>\\?\"[^\"\n]{1,512}?\\?\"|'[^'\n]{1,512}'|`[^`\n]{1,512}`|[^\s,;\"'`，。；）)}\]<>]{3,512})"

#: A word starts here: no letter, digit or ``_`` before it, or an escaped line break (``\\n`` in a JSON string).
_WORD_START = r"(?:(?<![A-Za-z0-9_])|(?<=\\[nrt]))"
_AWS_ID = r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}"
_AWS_KEYWORDS = ("akia", "asia", "abia", "acca", "a3t", "agpa", "aida", "aipa", "anpa", "anva", "aroa", "apka")
# Not inside a longer run; an escaped line break (``\n`` in a JSON string) before it counts as a boundary.
_AWS_SECRET = r"(?:(?<![A-Za-z0-9/+=])|(?<=\\[nrt]))(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
# A password given on a command line, quoted (also with a JSON string's escaped quotes) or bare.
_CLI_VALUE = r"(?P<s>\\?\"[^\"\n]{1,256}?\\?\"|'[^'\n]{1,256}'|[^\s'\"`;|&]{1,256})"

RULES: tuple[Rule, ...] = (
    _rule(
        "private_key",
        r"-----BEGIN[ A-Z0-9_-]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END[ A-Z0-9_-]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)",
        ("private key",),
    ),
    _rule(
        "data_uri",
        r"data:[\w.+-]+/[\w.+-]+(?:;[\w=.+-]+)*;base64,[A-Za-z0-9+/=\s]{16,}",
        ("base64,",),
    ),
    # --- AI providers -------------------------------------------------------------------------------
    _rule("anthropic_api_key", _B + r"sk-ant-(?:api|admin|sid)?\d{0,2}-?[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    _rule("openai_api_key", _B + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}", ("sk-",)),
    _rule("huggingface_token", _B + r"hf_[A-Za-z0-9]{30,40}" + _E, ("hf_",)),
    _rule("groq_api_key", _B + r"gsk_[A-Za-z0-9]{40,60}" + _E, ("gsk_",)),
    _rule("xai_api_key", _B + r"xai-[A-Za-z0-9]{60,90}" + _E, ("xai-",)),
    _rule("replicate_token", _B + r"r8_[A-Za-z0-9]{37}" + _E, ("r8_",)),
    # --- cloud --------------------------------------------------------------------------------------
    # Hand-written (neither gitleaks nor detect-secrets pairs them): an AWS secret key written next to its key
    # id in prose or a console CSV ("the key is AKIA... with secret wJalr..."), not after an ``aws_secret`` name.
    # Both orders; runs before ``aws_access_key`` (which replaces the id the pairing reads); the 40-character
    # run must be random base64 (``check="aws_secret"``: both cases and a digit), so a 40-hex git SHA is kept.
    _rule(
        "aws_secret_key",
        _B + _AWS_ID + r"(?![A-Za-z0-9])[\s\S]{0,200}?" + _AWS_SECRET,
        _AWS_KEYWORDS,
        check="aws_secret",
    ),
    _rule(
        "aws_secret_key",
        _AWS_SECRET + r"[\s\S]{0,200}?(?<![A-Za-z0-9])" + _AWS_ID + r"(?![A-Za-z0-9])",
        _AWS_KEYWORDS,
        check="aws_secret",
    ),
    _rule(
        "aws_access_key",
        _B + _AWS_ID + _E,
        _AWS_KEYWORDS,
    ),
    _rule(
        "aws_secret_key",
        r"(?i)aws.{0,20}?(?:secret|key).{0,20}?[\"']?\s*[:=]\s*[\"']?(?P<s>[A-Za-z0-9/+=]{40})" + r"(?![A-Za-z0-9/+=])",
        ("aws",),
    ),
    _rule("google_api_key", _B + r"AIza[A-Za-z0-9_-]{30,}", ("aiza",)),
    _rule("google_oauth_secret", _B + r"GOCSPX-[A-Za-z0-9_-]{28}" + _TOKEN_END, ("gocspx",)),
    _rule(
        "azure_storage_key",
        r"(?i)(?:accountkey|sharedaccesskey|sharedkey)\s*=\s*(?P<s>[A-Za-z0-9+/]{20,}={0,2})",
        ("accountkey", "sharedaccesskey", "sharedkey"),
    ),
    _rule(
        "azure_ad_client_secret",
        _B + r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}" + _E,
        ("q~",),
    ),
    _rule("digitalocean_token", _B + r"do[opr]_v1_[a-f0-9]{64}" + _E, ("_v1_",)),
    _rule("alibaba_access_key", _B + r"LTAI[A-Za-z0-9]{20}" + _E, ("ltai",)),
    _rule("databricks_token", _B + r"dapi[a-f0-9]{32}(?:-\d)?" + _E, ("dapi",)),
    _rule("vault_token", _B + r"hv[sb]\.[A-Za-z0-9_-]{24,}" + _TOKEN_END, ("hvs.", "hvb.")),
    _rule("heroku_api_key", _B + r"HRKU-[A-Za-z0-9_-]{60}" + _TOKEN_END, ("hrku-",)),
    # --- version control, CI and package registries -------------------------------------------------
    _rule(
        "github_token",
        _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})" + _E,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _rule(
        "gitlab_token",
        _B + r"gl(?:pat|dt|rt|ptt|ft|imt|agent|oas|soat)-[A-Za-z0-9_-]{20,}",
        ("glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glimt-", "glagent-", "gloas-", "glsoat-"),
    ),
    _rule("gitlab_token", _B + r"GR1348941[A-Za-z0-9_-]{20}", ("gr1348941",)),
    _rule("npm_token", _B + r"npm_[A-Za-z0-9]{36}" + _E, ("npm_",)),
    _rule("pypi_token", _B + r"pypi-AgE[A-Za-z0-9_-]{50,}", ("pypi-",)),
    _rule("atlassian_token", _B + r"ATATT3[A-Za-z0-9_=-]{180,}" + _E, ("atatt3",)),
    _rule("postman_api_key", _B + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _E, ("pmak-",)),
    _rule("linear_api_key", _B + r"lin_api_[A-Za-z0-9]{40}" + _E, ("lin_api_",)),
    _rule(
        "grafana_token",
        _B + r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,400}={0,2})",
        ("glsa_", "glc_"),
    ),
    _rule("doppler_token", _B + r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}" + _E, ("dp.",)),
    _rule("newrelic_key", _B + r"NR(?:AK|AA|II|JS)-[A-Za-z0-9]{27}" + _E, ("nrak-", "nraa-", "nrii-", "nrjs-")),
    _rule("age_secret_key", _B + r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", ("age-secret-key-",)),
    # --- payments and commerce ----------------------------------------------------------------------
    _rule(
        "stripe_key",
        _B + r"[sr]k_(?:live|test|prod)_[A-Za-z0-9]{10,247}" + _E,
        ("sk_live", "sk_test", "sk_prod", "rk_live", "rk_test", "rk_prod"),
    ),
    _rule("stripe_key", _B + r"whsec_[A-Za-z0-9]{24,}" + _E, ("whsec_",)),
    _rule("shopify_token", _B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _E, ("shpat_", "shpca_", "shppa_", "shpss_")),
    _rule("square_token", _B + r"(?:sq0(?:atp|csp)-[A-Za-z0-9_-]{22,43}|EAAA[A-Za-z0-9_-]{60})" + _E, ("sq0", "eaaa")),
    # --- messaging, mail and chat bots --------------------------------------------------------------
    _rule(
        "slack_token",
        _B + r"(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+"
        r"|xoxe\.xox[bp]-\d-[A-Za-z0-9]{100,})",
        ("xox", "xapp-"),
    ),
    _rule(
        "slack_webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_+-]+", ("hooks.slack",)
    ),
    _rule(
        "discord_webhook",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]+",
        ("discord",),
    ),
    _rule(
        "discord_bot_token",
        _B + r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}" + _TOKEN_END,
        ("discord", "bot", "token"),
    ),
    _rule("telegram_bot_token", r"(?<![0-9])\d{8,10}:AA[A-Za-z0-9_-]{32,34}" + _TOKEN_END, (":aa",)),
    _rule(
        "twilio_key",
        _B + r"SK[0-9a-f]{32}" + _E,  # one literal prefix per rule: the regex engine then scans for it
        ("sk",),
    ),
    _rule("twilio_key", _B + r"AC[0-9a-f]{32}" + _E, ("ac",)),
    _rule("sendgrid_api_key", _B + r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _TOKEN_END, ("sg.",)),
    _rule("mailchimp_api_key", _B + r"[0-9a-f]{32}-us\d{1,2}" + _E, ("-us",)),
    _rule("mailgun_api_key", _B + r"key-[0-9a-f]{32}" + _E, ("key-",)),
    # --- generic forms ------------------------------------------------------------------------------
    _rule(
        "jwt",
        _B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}" + _TOKEN_END,
        ("eyj",),
    ),
    _rule(
        "authorization_bearer",
        r"(?i)(?:authorization|auth|proxy-authorization)\s*[:=]\s*[\"']?(?:bearer|token|basic)\s+"
        r"(?P<s>[A-Za-z0-9._~+/=-]{8,})",
        ("auth",),
        check="bearer",
    ),
    _rule("bearer_token", _B + r"(?i)bearer\s+(?P<s>[A-Za-z0-9._~+/=-]{20,})", ("bearer",), check="bearer"),
    _rule(
        "url_credentials",
        r"://[^\s:/@\"'<>]*:(?P<s>[^\s@/\"'<>]{1,256})@[^\s@/\"'<>]",
        ("://",),
    ),
    # Hand-written (no gitleaks or detect-secrets rule reads command lines): a password given as an option of a
    # tool that takes it there. ``sshpass -p PW``; ``mysql``/``mysqldump``/``mariadb`` ``-pPW`` (attached: ``-p``
    # alone prompts, ``-P 3306`` is the port, ``docker run --name mysql -p3306:3306`` maps one); ``curl -u
    # user:PW`` / ``--user user:PW`` (``-u user`` alone prompts and is kept). ``$VAR`` and other placeholders are
    # kept (``check="password"``).
    _rule("cli_password", _WORD_START + r"sshpass\s+(?:-\w+\s+)*?-p\s*" + _CLI_VALUE, ("sshpass",), check="password"),
    _rule(
        "cli_password",
        _WORD_START + r"(?i:mysql|mariadb)[\w-]*\b[^\n|;&]{0,200}?\s-p(?!\d{1,5}:\d)" + _CLI_VALUE,
        ("mysql", "mariadb"),
        check="password",
    ),
    _rule(
        "cli_password",
        _WORD_START
        + r"curl\b[^\n|;&]{0,300}?\s(?:-u\s*|--user[\s=]+)(?:\\?[\"'])?[^\s:'\"]{1,128}:(?P<s>[^\s'\"]{1,256})",
        ("curl",),
        check="password",
    ),
    _rule(
        "password",
        r"(?i)" + PASSWORD_NAME + _ASSIGN + _QUOTED_OR_BARE,
        ("password", "passwd", "passphrase", "pwd", "密码", "口令"),
        check="password",
    ),
    _rule(
        "secret_assignment",
        r"(?i)" + SECRET_NAME + _ASSIGN + _QUOTED_OR_BARE,
        _SECRET_WORDS,
        check="entropy",
    ),
    _rule("long_base64", r"[A-Za-z0-9+/]{4096,}={0,2}", ("",), min_len=4096),
)
