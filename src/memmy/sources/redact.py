"""Secret redaction for imported history: the rules and engine live in :mod:`memmy.redact`."""

from __future__ import annotations

from memmy.redact import RedactionReport, Redactor, redact
from memmy.redact.rules import RULES

__all__ = ["RULES", "RedactionReport", "Redactor", "redact"]
