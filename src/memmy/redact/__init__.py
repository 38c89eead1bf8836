"""Secret redaction for every text memmy stores or reads out of host files (rules, engine, JSON walk).

One :class:`Redactor` (built-in rules plus the user's ``redaction.extraPatterns`` and ``redaction.allowlist``)
is applied where requests become service calls, in the importer, in the MCP transcript tools and in the hook's
transcript readers, so nothing reaches the store, its logs or an agent with a credential in it.
"""

from __future__ import annotations

from memmy.redact.engine import (
    DEFAULT_REDACTOR,
    RedactionConfigError,
    RedactionReport,
    Redactor,
    redact,
    redact_json,
)
from memmy.redact.hygiene import replace_surrogates, replace_surrogates_json

__all__ = [
    "DEFAULT_REDACTOR",
    "RedactionConfigError",
    "RedactionReport",
    "Redactor",
    "redact",
    "redact_json",
    "replace_surrogates",
    "replace_surrogates_json",
]
